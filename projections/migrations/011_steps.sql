-- Escalation steps (``steps`` in the catalog) and channel fallbacks: a step that was not
-- needed ends SKIPPED, and a delivery row says which step of its notification's chain it is
-- (0: none) and which delivery's permanent failure made it (a fallback; NULL: none).

ALTER TABLE delivery DROP CONSTRAINT delivery_status_known;
ALTER TABLE delivery ADD CONSTRAINT delivery_status_known
    CHECK (status IN ('QUEUED', 'SCHEDULED', 'SENDING', 'SENT', 'FAILED', 'EXPIRED',
                      'SUPPRESSED', 'DELIVERED', 'READ', 'CANCELLED', 'SKIPPED'));

ALTER TABLE delivery ADD COLUMN step smallint NOT NULL DEFAULT 0;
ALTER TABLE delivery ADD COLUMN fallback_of uuid;
