-- The read model holds only the words Clarion writes: a delivery's status, channel and
-- priority, and a notification's priority, are members of the enums in
-- streams/core/vocabulary.py (DeliveryStatus, Channel, Priority), whose values these lists are.
-- A row with any other word is refused instead of stored where no query would find it.
-- tests/integration/core/test_vocabulary.py reads the lists back from the catalog and fails when
-- they and the enums disagree: a new member comes with a migration that replaces its
-- constraint. Added to the partitioned tables, each constraint holds in every partition,
-- present and future; the rows already there are checked once, here.

ALTER TABLE notification ADD CONSTRAINT notification_priority_known
    CHECK (priority IN ('HIGH', 'NORMAL', 'LOW'));

ALTER TABLE delivery ADD CONSTRAINT delivery_status_known
    CHECK (status IN ('QUEUED', 'SCHEDULED', 'SENDING', 'SENT', 'FAILED', 'EXPIRED',
                      'SUPPRESSED', 'DELIVERED', 'READ', 'CANCELLED'));
ALTER TABLE delivery ADD CONSTRAINT delivery_channel_known
    CHECK (channel IN ('PUSH', 'EMAIL', 'SMS', 'IN_APP', 'WEBHOOK'));
ALTER TABLE delivery ADD CONSTRAINT delivery_priority_known
    CHECK (priority IN ('HIGH', 'NORMAL', 'LOW'));
