-- A campaign's deliveries (``streams.campaigns.ids``): the campaign their notification's
-- idempotency key names, NULL for every other delivery. Its progress counts them by status.
ALTER TABLE delivery ADD COLUMN campaign_id text;
CREATE INDEX delivery_by_campaign ON delivery (campaign_id, status)
    WHERE campaign_id IS NOT NULL;
