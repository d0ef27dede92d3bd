-- A recipient's message log (GET /v1/recipients/{id}/deliveries) reads one recipient's
-- deliveries, newest change first, by keyset on (updated_at, id). The recipient is copied
-- from its notification into each delivery row, as producer and type are, so that the log
-- is one index range: through the notification, each of the recipient's notifications
-- would probe every daily partition of delivery, or the planner would scan them all.
ALTER TABLE delivery ADD COLUMN recipient_id text;

-- The rows already there get their notification's recipient, once.
UPDATE delivery AS d SET recipient_id = n.recipient_id
FROM notification AS n
WHERE n.id = d.notification_id AND d.recipient_id IS NULL;

CREATE INDEX delivery_by_recipient ON delivery (recipient_id, updated_at DESC, id)
    WHERE recipient_id IS NOT NULL;
