-- Work items due far ahead (a notification sent days later), kept here instead of in Redis's
-- `delayed` set until they are due soon (projections/parking.py): a waiting work item holds
-- no Redis memory. A delivery has at most one waiting work item.
CREATE TABLE parked_work (
    shard        integer NOT NULL,
    delivery_id  uuid    NOT NULL,
    due_ms       bigint  NOT NULL,
    member       bytea   NOT NULL,
    PRIMARY KEY (shard, delivery_id)
);
CREATE INDEX parked_work_by_due ON parked_work (shard, due_ms);
