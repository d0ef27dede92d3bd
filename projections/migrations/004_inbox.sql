-- Recipients' inbox messages, the whole history (Redis keeps the newest of each recipient):
-- written from InboxMessageCreated, changed by InboxMessageRead and the like, each change
-- applied once and in order by the delivery's version.
CREATE TABLE inbox_message (
    id              uuid        PRIMARY KEY,
    recipient_id    text        NOT NULL,
    notification_id uuid        NOT NULL,
    type            text        NOT NULL,
    title           text        NOT NULL,
    body            text        NOT NULL,
    action_url      text        NOT NULL DEFAULT '',
    data            jsonb       NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    read_at         timestamptz,
    seen_at         timestamptz,
    archived_at     timestamptz,
    version         integer     NOT NULL
);
-- A recipient's messages newest first (ids are time-ordered UUIDv7).
CREATE INDEX inbox_message_by_recipient ON inbox_message (recipient_id, id DESC);
