-- Digests (``digest`` in the catalog): the deliveries of a notification that joined one end
-- DIGESTED; which digest each notification joined, and each digest's life (opened, when it
-- closes, closed, its items, the notification made of them).

ALTER TABLE delivery DROP CONSTRAINT delivery_status_known;
ALTER TABLE delivery ADD CONSTRAINT delivery_status_known
    CHECK (status IN ('QUEUED', 'SCHEDULED', 'SENDING', 'SENT', 'FAILED', 'EXPIRED',
                      'SUPPRESSED', 'DELIVERED', 'READ', 'CANCELLED', 'SKIPPED', 'DIGESTED'));

CREATE TABLE digest (
    id                 text PRIMARY KEY,
    recipient_id       text        NOT NULL,
    notification_type  text        NOT NULL,
    opened_at          timestamptz NOT NULL,
    closes_at          timestamptz NOT NULL,
    items              integer     NOT NULL DEFAULT 0,
    closed_at          timestamptz,
    notification_id    uuid
);
CREATE INDEX digest_by_recipient ON digest (recipient_id, opened_at DESC);

CREATE TABLE digest_member (
    notification_id  uuid PRIMARY KEY,
    digest_id        text        NOT NULL,
    joined_at        timestamptz NOT NULL
);
CREATE INDEX digest_member_by_digest ON digest_member (digest_id);
