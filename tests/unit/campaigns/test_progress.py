from app.campaigns import specs
from app.campaigns.progress import progress_of
from app.campaigns.specs import CampaignSpec
from streams.campaigns.store import Campaign

SPEC = specs.encode(CampaignSpec(type="marketing", name="Spring", rate=100))


def campaign(**fields: object) -> Campaign:
    base: dict[str, object] = {
        "id": "c", "producer": "orders", "state": "running", "spec": SPEC, "version": 5,
        "audience": 10_000, "chunks": 10, "cursor": 4, "accepted": 3900, "repeated": 50,
        "skipped": 50, "created_ms": 1_000, "started_ms": 10_000,
    }  # fmt: skip
    return Campaign(**(base | fields))  # type: ignore[arg-type]


def test_progress_counts_recipients_and_deliveries_and_tells_the_time_left() -> None:
    counts = {"SENT": 2000, "DELIVERED": 500, "READ": 10, "FAILED": 7, "SUPPRESSED": 90}
    shown = progress_of(campaign(), counts, now_ms=50_000)
    assert (shown.generated, shown.remaining, shown.skipped) == (3950, 6000, 50)
    assert (shown.sent, shown.delivered, shown.failed, shown.suppressed) == (2510, 510, 7, 90)
    assert shown.rate == 100.0  # 4000 recipients in 40 s
    assert shown.eta_seconds == 60.0
    assert (shown.name, shown.rate_limit, shown.deliveries) == ("Spring", 100, counts)


def test_a_campaign_not_generating_has_no_time_left_and_no_pace_before_it_starts() -> None:
    assert progress_of(campaign(state="paused"), None, 50_000).eta_seconds is None
    fresh = progress_of(campaign(started_ms=0, state="draft"), None, 50_000)
    assert (fresh.rate, fresh.eta_seconds, fresh.started_at, fresh.deliveries) == (
        0.0,
        None,
        None,
        None,
    )
    ended = progress_of(campaign(state="completed", ended_ms=20_000), {}, 99_000)
    assert ended.rate == 400.0  # measured until it ended
