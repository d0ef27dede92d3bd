"""Real local peers for the provider adapters' tests and benchmarks: each speaks its
provider's protocol, checks what the real one checks (TLS, credentials), answers with its
real error shapes, and records what it received."""
