-- notification and delivery partitioned by day, like delivery_event, so that retention
-- drops old days whole (see projections/partitions.py). Both are partitioned by id: ids are
-- UUIDv7, whose first 48 bits are the millisecond they were made, so a day is a range of
-- ids, the primary key stays (id) and a lookup by id reads one partition.
--
-- The rows already there become each table's default partition, without being copied:
-- creating a day's partition moves that day's rows out of it, and retention deletes the
-- older ones from it as their days expire.

ALTER TABLE notification RENAME TO notification_default;
ALTER INDEX notification_pkey RENAME TO notification_default_pkey;
ALTER INDEX notification_by_producer RENAME TO notification_default_by_producer;
ALTER INDEX notification_by_recipient RENAME TO notification_default_by_recipient;

CREATE TABLE notification (LIKE notification_default INCLUDING DEFAULTS)
    PARTITION BY RANGE (id);
ALTER TABLE notification ADD PRIMARY KEY (id);
CREATE INDEX notification_by_producer ON notification (producer, created_at DESC, id);
CREATE INDEX notification_by_recipient ON notification (recipient_id);
-- The default partition's indexes match the parent's and are attached, not built again.
ALTER TABLE notification ATTACH PARTITION notification_default DEFAULT;

ALTER TABLE delivery RENAME TO delivery_default;
ALTER INDEX delivery_pkey RENAME TO delivery_default_pkey;
ALTER INDEX delivery_by_notification RENAME TO delivery_default_by_notification;
ALTER INDEX delivery_by_status RENAME TO delivery_default_by_status;
ALTER INDEX delivery_failed RENAME TO delivery_default_failed;
ALTER INDEX delivery_by_provider_message RENAME TO delivery_default_by_provider_message;
ALTER INDEX delivery_by_campaign RENAME TO delivery_default_by_campaign;

CREATE TABLE delivery (LIKE delivery_default INCLUDING DEFAULTS)
    PARTITION BY RANGE (id);
ALTER TABLE delivery ADD PRIMARY KEY (id);
CREATE INDEX delivery_by_notification ON delivery (notification_id);
CREATE INDEX delivery_by_status ON delivery (status, updated_at DESC, id);
CREATE INDEX delivery_failed ON delivery (updated_at DESC, id) WHERE status = 'FAILED';
CREATE INDEX delivery_by_provider_message ON delivery (provider_message_id, provider)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX delivery_by_campaign ON delivery (campaign_id, status)
    WHERE campaign_id IS NOT NULL;
ALTER TABLE delivery ATTACH PARTITION delivery_default DEFAULT;
