import msgspec
import pytest

from app.campaigns.specs import CampaignSpec, Segment, Upload, decode, encode


def test_a_segment_matches_every_attribute_by_value_or_any_of_a_list() -> None:
    segment = Segment(attributes={"plan": "pro", "country": ["DE", "AT"]})
    assert segment.matches({"plan": "pro", "country": "AT", "age": 40})
    assert not segment.matches({"plan": "pro", "country": "FR"})
    assert not segment.matches({"plan": "free", "country": "DE"})
    assert not segment.matches({"country": "DE"})  # a missing attribute never matches


def test_a_segment_tells_true_from_one() -> None:
    assert Segment(attributes={"beta": True}).matches({"beta": True})
    assert not Segment(attributes={"beta": True}).matches({"beta": 1})
    assert not Segment(attributes={"n": 1}).matches({"n": True})
    assert Segment(attributes={"n": [1, 2]}).matches({"n": 2})


def test_a_spec_makes_each_recipients_notification() -> None:
    spec = CampaignSpec(type="marketing", data={"subject": "s"}, priority="LOW", ttl_seconds=60)
    request = spec.notification("user-1")
    assert (request.recipient.id, request.type, request.data) == ("user-1", "marketing", spec.data)
    assert (request.priority, request.ttl_seconds) == ("LOW", 60)
    assert decode(encode(spec)) == spec


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"type": "m", "rate": 0}', "rate"),
        (b'{"type": "m", "start_at": "2026-06-01T12:00:00"}', "start_at"),
        (b'{"type": "m", "segment": {"attributes": {}}}', "attributes"),
        (b'{"type": "m", "segment": {"attributes": {"a": []}}}', "segment"),
        (b'{"type": "m", "data": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, "data"),
    ],
)
def test_a_wrong_spec_is_refused_naming_the_field(body: bytes, named: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=named):
        msgspec.json.decode(body, type=CampaignSpec)


def test_an_upload_holds_one_to_ten_thousand_ids() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"recipients": []}', type=Upload)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"recipients": ["a b"]}', type=Upload)
    assert msgspec.json.decode(b'{"recipients": ["a"]}', type=Upload).recipients == ["a"]
