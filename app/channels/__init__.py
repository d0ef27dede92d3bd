"""Channel adapters: the providers a delivery worker hands messages to."""
