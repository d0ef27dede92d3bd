-- Erasing a recipient finds its notifications' deliveries (to forget what a provider's
-- record of them holds): by recipient, not by scanning every notification.
CREATE INDEX notification_by_recipient ON notification (recipient_id);
