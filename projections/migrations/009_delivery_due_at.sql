-- When a SCHEDULED delivery is due: the time a producer asked it to go (send_at, delay), the
-- end of the recipient's quiet hours, a retry's or a deferral's time. NULL once it is not
-- scheduled any more. The status API, the dashboard and the recipient's message log show it.
ALTER TABLE delivery ADD COLUMN due_at timestamptz;
