-- Provider feedback names the message by the provider's id: find its delivery by it.
CREATE INDEX delivery_by_provider_message ON delivery (provider_message_id, provider)
    WHERE provider_message_id IS NOT NULL;
