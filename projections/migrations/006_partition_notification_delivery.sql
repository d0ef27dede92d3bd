-- notification and delivery partitioned by day, like delivery_event, so that retention
-- drops old days whole (see projections/partitions.py). Both are partitioned by id: ids are
-- UUIDv7, whose first 48 bits are the millisecond they were made, so a day is a range of
-- ids, the primary key stays (id) and a lookup by id reads one partition.
--
-- Rows already there are not copied: the old table becomes the partition of every id made
-- before yesterday (UTC), named after its last day (notification_YYYYMMDD, two days ago), so
-- retention drops it whole once that day expires. Only yesterday's and today's rows move,
-- into the daily partitions made for them here. (Kept as the default partition instead, the
-- old rows would be scanned, the tables locked meanwhile, each time a day's partition is
-- made.)

ALTER TABLE notification RENAME TO notification_legacy;
ALTER INDEX notification_pkey RENAME TO notification_legacy_pkey;
ALTER INDEX notification_by_producer RENAME TO notification_legacy_by_producer;
ALTER INDEX notification_by_recipient RENAME TO notification_legacy_by_recipient;

CREATE TABLE notification (LIKE notification_legacy INCLUDING DEFAULTS)
    PARTITION BY RANGE (id);
ALTER TABLE notification ADD PRIMARY KEY (id);
CREATE INDEX notification_by_producer ON notification (producer, created_at DESC, id);
CREATE INDEX notification_by_recipient ON notification (recipient_id);
CREATE TABLE notification_default PARTITION OF notification DEFAULT;

ALTER TABLE delivery RENAME TO delivery_legacy;
ALTER INDEX delivery_pkey RENAME TO delivery_legacy_pkey;
ALTER INDEX delivery_by_notification RENAME TO delivery_legacy_by_notification;
ALTER INDEX delivery_by_status RENAME TO delivery_legacy_by_status;
ALTER INDEX delivery_failed RENAME TO delivery_legacy_failed;
ALTER INDEX delivery_by_provider_message RENAME TO delivery_legacy_by_provider_message;
ALTER INDEX delivery_by_campaign RENAME TO delivery_legacy_by_campaign;

CREATE TABLE delivery (LIKE delivery_legacy INCLUDING DEFAULTS)
    PARTITION BY RANGE (id);
ALTER TABLE delivery ADD PRIMARY KEY (id);
CREATE INDEX delivery_by_notification ON delivery (notification_id);
CREATE INDEX delivery_by_status ON delivery (status, updated_at DESC, id);
CREATE INDEX delivery_failed ON delivery (updated_at DESC, id) WHERE status = 'FAILED';
CREATE INDEX delivery_by_provider_message ON delivery (provider_message_id, provider)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX delivery_by_campaign ON delivery (campaign_id, status)
    WHERE campaign_id IS NOT NULL;
CREATE TABLE delivery_default PARTITION OF delivery DEFAULT;

-- The first id made at or after a UTC day's start: its milliseconds, then zeros.
CREATE FUNCTION pg_temp.first_id_of(day date) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT (lpad(to_hex((extract(epoch FROM day::timestamp) * 1000)::bigint), 12, '0')
            || repeat('0', 20))::uuid
$$;

DO $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    cut uuid := pg_temp.first_id_of(today - 1);
    parent text;
    legacy text;
    empty boolean;
    day date;
BEGIN
    FOREACH parent IN ARRAY ARRAY['notification', 'delivery'] LOOP
        legacy := parent || '_legacy';
        EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I)', legacy) INTO empty;
        IF empty THEN  -- a new installation: nothing to keep
            EXECUTE format('DROP TABLE %I', legacy);
            CONTINUE;
        END IF;
        FOREACH day IN ARRAY ARRAY[today - 1, today] LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           parent || '_' || to_char(day, 'YYYYMMDD'), parent,
                           pg_temp.first_id_of(day), pg_temp.first_id_of(day + 1));
        END LOOP;
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE id >= %L RETURNING *) '
                       'INSERT INTO %I SELECT * FROM moved', legacy, cut, parent);
        -- A constraint equal to the partition bound lets ATTACH skip a second scan.
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (id IS NOT NULL AND id < %L)',
                       legacy, legacy || '_bound', cut);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                       parent, legacy, cut);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', legacy, legacy || '_bound');
        EXECUTE format('ALTER TABLE %I RENAME TO %I',
                       legacy, parent || '_' || to_char(today - 2, 'YYYYMMDD'));
    END LOOP;
END $$;

DROP FUNCTION pg_temp.first_id_of(date);
