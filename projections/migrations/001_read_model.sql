-- The read model: notifications, their deliveries' current state, and every event.
-- Rows are written only by the projector; each delivery row carries the version of the
-- last event applied to it, so an event is applied once and never moves a row backwards.

CREATE TABLE notification (
    id              uuid PRIMARY KEY,
    producer        text        NOT NULL,
    idempotency_key text        NOT NULL,
    type            text        NOT NULL,
    priority        text        NOT NULL,
    recipient_id    text        NOT NULL,
    locale          text        NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL
);
CREATE INDEX notification_by_producer ON notification (producer, created_at DESC, id);

CREATE TABLE delivery (
    id                  uuid PRIMARY KEY,
    notification_id     uuid        NOT NULL,
    -- Copied from the notification so the FAILED list filters without a join.
    producer            text,
    notification_type   text,
    priority            text,
    channel             text,
    status              text        NOT NULL,
    reason              text,
    attempts            integer     NOT NULL DEFAULT 0,
    error_class         text,
    last_error          text,
    provider            text,
    provider_message_id text,
    created_at          timestamptz,
    updated_at          timestamptz NOT NULL,
    sent_at             timestamptz,
    failed_at           timestamptz,
    version             integer     NOT NULL
);
CREATE INDEX delivery_by_notification ON delivery (notification_id);
CREATE INDEX delivery_by_status ON delivery (status, updated_at DESC, id);
-- The FAILED dashboard and GET /v1/deliveries?status=FAILED read only these rows.
CREATE INDEX delivery_failed ON delivery (updated_at DESC, id) WHERE status = 'FAILED';

-- Every event, partitioned by day of its time; old partitions are dropped by retention.
-- The event id is "<shard>-<stream entry id>-<index in the entry>": unique, and the same
-- each time the same entry is projected again.
CREATE TABLE delivery_event (
    event_id        text        NOT NULL,
    at              timestamptz NOT NULL,
    type            text        NOT NULL,
    notification_id uuid,
    delivery_id     uuid,
    version         integer,
    body            jsonb       NOT NULL,
    PRIMARY KEY (at, event_id)
) PARTITION BY RANGE (at);
-- Events outside every daily partition (far past or future) still have a home.
CREATE TABLE delivery_event_default PARTITION OF delivery_event DEFAULT;
CREATE INDEX delivery_event_by_notification ON delivery_event (notification_id, at);

-- How far the projector got in each shard's events stream, saved with the rows.
CREATE TABLE projection_checkpoint (
    stream      text PRIMARY KEY,
    last_id     text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
