from streams.campaigns.ids import campaign_of, notification_key


def test_a_campaign_key_names_its_campaign() -> None:
    key = notification_key("c0ffee", "user-1:with:colons")
    assert key == "campaign:c0ffee:user-1:with:colons"
    assert campaign_of(key) == "c0ffee"


def test_other_keys_name_no_campaign() -> None:
    assert campaign_of("order-42") == ""
    assert campaign_of("campaign:") == ""
    assert campaign_of("campaign:no-recipient") == ""
    assert campaign_of("Campaign:x:y") == ""
