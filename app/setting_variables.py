"""Every environment variable Clarion reads, declared once: its name, the setting it sets,
the form of its value, its bounds and what it means.

``app.settings.Settings`` holds the values and their defaults; ``Settings.from_env`` reads
the variables declared here (the whole numbers by their bounds). The configuration reference
of the docs site is generated from these declarations, and a test fails when the code names a
``CLARION_`` variable that is not declared here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable.

    ``field`` is the ``Settings`` field it sets ("" when another part reads it, which then
    gives its ``default`` as text). A whole number has bounds (``low``, ``high``, both
    included); ``form`` says what any other value looks like. A ``secret`` is never printed.
    """

    name: str
    description: str
    field: str = ""
    form: str = "integer"
    low: int | None = None
    high: int | None = None
    default: str = ""
    secret: bool = False
    section: str = ""

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None


def _section(title: str, *variables: Variable) -> tuple[Variable, ...]:
    return tuple(replace(v, section=title) for v in variables)


_DAY = 86400
_URL = "URL"
_TEXT = "text"

CONNECTIONS = _section(
    "Redis and PostgreSQL",
    Variable(
        "CLARION_REDIS_URL",
        "The event log: `redis://`, `rediss://`, `unix://`, or a Redis Cluster as "
        "`redis+cluster://host:port,host:port` (any of its nodes).",
        field="redis_url", form=_URL,
    ),
    Variable(
        "CLARION_DATABASE_URL",
        "The read model (`postgresql://`); the database is created if missing.",
        field="database_url", form=_URL,
    ),
    Variable(
        "CLARION_KEY_PREFIX",
        "Prefix of every Redis key: 1-64 letters, digits, `_`, `.` or `-`.",
        field="key_prefix", form=_TEXT,
    ),
    Variable(
        "CLARION_SHARDS",
        "Number of shards (hash tags `{s0}`, `{s1}`, ...) the streams are split into; fixed for "
        "the life of a key space.",
        field="shards", low=1, high=1024,
    ),
)  # fmt: skip

SERVICE = _section(
    "The service",
    Variable(
        "CLARION_CONFIG", "Path of the type catalog (providers, channels, types).",
        field="config_path", form="path",
    ),
    Variable(
        "CLARION_API_KEYS",
        "The producers' API keys, `producer:secret:send+read,...` (scopes `send`, `read`, "
        "`recipients`, `admin`); a secret may be given as `sha256=<hex>`.",
        field="api_keys", form="comma-separated list", secret=True,
    ),
    Variable(
        "CLARION_DIGEST_SECRET",
        "At least 16 characters, required by the API and the workers: keys the digests that "
        "name contact addresses and the unsubscribe links. Keep it across restarts: a new one "
        "forgets which addresses were dead and ends the links already sent.",
        field="digest_secret", form=_TEXT, secret=True,
    ),
    Variable(
        "CLARION_PUBLIC_URL",
        "The https base URL recipients reach Clarion at (http only for `127.0.0.1` and "
        "`localhost`): unsubscribe links start with it. Unset: no `List-Unsubscribe` header.",
        field="public_url", form=_URL,
    ),
    Variable("CLARION_HOST", "Address the API listens on.", field="host", form=_TEXT),
    Variable("CLARION_PORT", "Port the API listens on.", field="port", low=1, high=65535),
    Variable(
        "CLARION_LOG_FORMAT", "`json`, or `console` for development.",
        field="log_format", form="`json` or `console`",
    ),
    Variable(
        "CLARION_LOG_LEVEL", "Lowest level logged (`DEBUG`, `INFO`, `WARNING`, `ERROR`).",
        field="log_level", form=_TEXT,
    ),
    Variable(
        "CLARION_API_KEY",
        "The API key `clarion send` presents, when `--api-key` is not given.",
        form=_TEXT, default="(none)", secret=True,
    ),
)  # fmt: skip

API = _section(
    "The API",
    Variable(
        "CLARION_IDEMPOTENCY_TTL", "Seconds a producer's `Idempotency-Key` is remembered.",
        field="idempotency_ttl_seconds", low=60, high=30 * _DAY,
    ),
    Variable(
        "CLARION_MAX_SCHEDULE",
        "Seconds ahead a notification's `send_at` or `delay` may be; 422 beyond.",
        field="max_schedule_seconds", low=60, high=365 * _DAY,
    ),
    Variable(
        "CLARION_MAX_BODY_BYTES", "Largest body of a single request; 413 above.",
        field="max_body_bytes", low=1024, high=1 << 30,
    ),
    Variable(
        "CLARION_MAX_BATCH_BODY_BYTES", "Largest body of a batch request; 413 above.",
        field="max_batch_body_bytes", low=1024, high=1 << 30,
    ),
    Variable(
        "CLARION_UNSUBSCRIBE_TTL", "Seconds an unsubscribe link works after its email was sent.",
        field="unsubscribe_ttl_seconds", low=3600, high=3650 * _DAY,
    ),
    Variable(
        "CLARION_CAMPAIGN_BACKLOG",
        "Work items of a campaign's priority that may wait before its generator makes more: "
        "what a campaign of any size holds of itself in Redis.",
        field="campaign_backlog", low=1000, high=100_000_000,
    ),
)  # fmt: skip

INBOX = _section(
    "The inbox",
    Variable(
        "CLARION_INBOX_TOKEN_TTL",
        "Seconds a recipient token works when its request asks for no other.",
        field="inbox_token_ttl_seconds", low=60, high=12 * 3600,
    ),
    Variable(
        "CLARION_INBOX_TOKEN_KEYS",
        "`<key id>:<secret>,...` (at most 8) that sign recipient tokens: the first signs, every "
        "one verifies. Unset: one key, id `d`, derived from `CLARION_DIGEST_SECRET`.",
        field="inbox_token_keys", form="comma-separated list", secret=True,
    ),
    Variable(
        "CLARION_INBOX_ORIGINS",
        "Comma-separated web origins (`https://app.example.com`) whose pages may call "
        "`/v1/inbox` (CORS). Unset: only same-origin pages may.",
        field="inbox_origins", form="comma-separated list",
    ),
    Variable(
        "CLARION_INBOX_STREAMS",
        "Open inbox streams per API process, below `CLARION_MAX_CONNECTIONS`; past it 503.",
        field="inbox_streams", low=1, high=1_000_000,
    ),
    Variable(
        "CLARION_INBOX_STREAMS_PER_RECIPIENT",
        "Open inbox streams of one recipient per API process; a further one replaces the "
        "oldest (open at least 30 s), else 429.",
        field="inbox_streams_per_recipient", low=1, high=100,
    ),
    Variable(
        "CLARION_INBOX_RESUMES_PER_MINUTE",
        "Reconnects of one recipient per API process and minute that re-read its feed; a "
        "further one gets `reset`.",
        field="inbox_resumes_per_minute", low=1, high=10_000,
    ),
)  # fmt: skip

HTTP_EDGE = _section(
    "The HTTP server's edge (per API process)",
    Variable(
        "CLARION_MAX_HEADER_BYTES", "Largest request head (request line and headers); 431 above.",
        field="max_header_bytes", low=4096, high=1 << 20,
    ),
    Variable(
        "CLARION_HEADER_TIMEOUT",
        "Seconds a client may take to send a request head; then 408 and the connection closed.",
        field="header_timeout_seconds", low=1, high=300,
    ),
    Variable(
        "CLARION_BODY_TIMEOUT",
        "Seconds a request body may go without a byte coming, at least "
        "`CLARION_HEADER_TIMEOUT`; then 408 and the connection closed.",
        field="body_timeout_seconds", low=1, high=3600,
    ),
    Variable(
        "CLARION_KEEP_ALIVE", "Seconds an idle kept-alive connection stays open.",
        field="keep_alive_seconds", low=1, high=300,
    ),
    Variable(
        "CLARION_MAX_CONNECTIONS",
        "Connections and requests one API process holds at once (inbox streams included); "
        "past it 503 with `Retry-After`.",
        field="max_connections", low=16, high=1_000_000,
    ),
)  # fmt: skip

DELIVERY = _section(
    "Delivery workers",
    Variable(
        "CLARION_LANE_HIGH", "Sends in flight per worker process for HIGH priority.",
        field="lane_high", low=1, high=10_000,
    ),
    Variable(
        "CLARION_LANE_NORMAL",
        "Sends in flight per worker process for NORMAL priority, the widest lane: a wider lane "
        "means larger batches per Redis round trip.",
        field="lane_normal", low=1, high=10_000,
    ),
    Variable(
        "CLARION_LANE_LOW", "Sends in flight per worker process for LOW priority.",
        field="lane_low", low=1, high=10_000,
    ),
    Variable(
        "CLARION_LEASE_MS",
        "Milliseconds a worker may hold a delivery before others take it over; a provider's "
        "timeout must end inside it.",
        field="lease_ms", low=100, high=3_600_000,
    ),
    Variable(
        "CLARION_MAX_DELIVERIES",
        "Leases of one delivery without an outcome before it is dead-lettered as POISON.",
        field="max_deliveries", low=1, high=1000,
    ),
    Variable(
        "CLARION_RECIPIENT_CAP",
        "The default cap of deliveries per recipient and channel, as `<limit>/<duration>` "
        "(`100/1h`; durations `30s`, `10m`, `1h`, `1d`): over it a delivery is SUPPRESSED, "
        "reason `throttled`. For every type without a throttle of its own or its category's "
        "(which replace it), except HIGH priority types. Empty: no default cap.",
        field="recipient_cap", form="`<limit>/<duration>`",
    ),
)  # fmt: skip

RETENTION = _section(
    "Retention",
    Variable(
        "CLARION_RETENTION_DAYS",
        "Days of notifications, deliveries and their events kept in PostgreSQL.",
        field="retention_days", low=1, high=3650,
    ),
    Variable(
        "CLARION_STREAM_RETENTION",
        "Seconds Redis keeps stream entries every consumer group is done with.",
        field="stream_retention_seconds", low=60, high=30 * _DAY,
    ),
    Variable(
        "CLARION_DLQ_RETENTION",
        "Seconds the dead-letter stream keeps an entry (and a FAILED delivery's state lives).",
        field="dlq_retention_seconds", low=3600, high=3650 * _DAY,
    ),
    Variable(
        "CLARION_DELIVERY_STATE_RETENTION",
        "Seconds an ended delivery's state stays in Redis when the projector does not let it "
        "go sooner, e.g. while PostgreSQL is away.",
        field="delivery_state_retention_seconds", low=3600, high=3650 * _DAY,
    ),
    Variable(
        "CLARION_PROJECTED_STATE_RETENTION",
        "Seconds an ended delivery's state stays in Redis once the read model has it (not a "
        "FAILED one's).",
        field="projected_state_retention_seconds", low=0, high=_DAY,
    ),
    Variable(
        "CLARION_PARK_AFTER",
        "Seconds ahead beyond which a waiting work item (a notification sent later, a long "
        "deferral) is kept in PostgreSQL instead of Redis, put back an hour before it is due "
        "(half this when shorter); 0: never.",
        field="park_after_seconds", low=0, high=365 * _DAY,
    ),
)  # fmt: skip

TRACING = _section(
    "Tracing (OpenTelemetry)",
    Variable(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "Where the API and workers send traces over OTLP/HTTP (`/v1/traces` is added). Unset, "
        "with the next one unset too: no tracing.",
        form=_URL, default="(none)",
    ),
    Variable(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "The full URL traces are sent to, instead of the one above.",
        form=_URL, default="(none)",
    ),
    Variable(
        "OTEL_SDK_DISABLED", "`true` turns tracing off even with an endpoint set.",
        form="`true` or `false`", default="false",
    ),
    Variable(
        "OTEL_TRACES_EXPORTER",
        "`none` turns tracing off; Clarion exports over OTLP only. The SDK's other `OTEL_*` "
        "variables (service name, sampler, batching) apply as the SDK documents them.",
        form=_TEXT, default="otlp",
    ),
)  # fmt: skip

# What a deployment sets, by section, in the order the reference lists them.
VARIABLES: tuple[Variable, ...] = (
    *CONNECTIONS, *SERVICE, *API, *INBOX, *HTTP_EDGE, *DELIVERY, *RETENTION, *TRACING,
)  # fmt: skip
# The variables that set a ``Settings`` field, by field.
BY_FIELD: dict[str, Variable] = {v.field: v for v in VARIABLES if v.field}
