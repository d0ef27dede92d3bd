"""The shared words: members equal the texts already stored, the delivery status sets nest as
the state machine says, and campaigns move only as their transition table allows."""

from __future__ import annotations

import msgspec
import pytest

from streams.core.vocabulary import (
    CAMPAIGN_TRANSITIONS,
    CONFIRMED,
    ENDED_UNSENT,
    PROVIDER_ACCEPTED,
    TERMINAL,
    CampaignState,
    Channel,
    DeliveryStatus,
    Priority,
)


def test_members_are_the_texts_stored_and_sent() -> None:
    assert DeliveryStatus.SENT == "SENT"
    assert Channel("IN_APP") is Channel.IN_APP
    assert CampaignState("running") is CampaignState.RUNNING
    assert msgspec.json.encode([CampaignState.PAUSED, Priority.HIGH]) == b'["paused","HIGH"]'
    assert msgspec.json.decode(b'"draft"', type=CampaignState) is CampaignState.DRAFT


def test_the_delivery_sets_nest() -> None:
    assert CONFIRMED < PROVIDER_ACCEPTED <= TERMINAL
    assert ENDED_UNSENT <= TERMINAL
    assert not PROVIDER_ACCEPTED & ENDED_UNSENT


def test_every_campaign_state_has_its_moves() -> None:
    assert set(CAMPAIGN_TRANSITIONS) == set(CampaignState)
    # Every state but the first is reached from some other one.
    reached = set().union(*CAMPAIGN_TRANSITIONS.values())
    assert reached == set(CampaignState) - {CampaignState.DRAFT}


@pytest.mark.parametrize(
    ("before", "after", "allowed"),
    [
        (CampaignState.DRAFT, CampaignState.RUNNING, True),
        (CampaignState.DRAFT, CampaignState.SCHEDULED, True),
        (CampaignState.SCHEDULED, CampaignState.RUNNING, True),
        (CampaignState.RUNNING, CampaignState.PAUSED, True),
        (CampaignState.PAUSED, CampaignState.RUNNING, True),
        (CampaignState.RUNNING, CampaignState.COMPLETED, True),
        (CampaignState.PAUSED, CampaignState.CANCELLED, True),
        (CampaignState.DRAFT, CampaignState.PAUSED, False),
        (CampaignState.DRAFT, CampaignState.COMPLETED, False),
        (CampaignState.PAUSED, CampaignState.COMPLETED, False),
        (CampaignState.COMPLETED, CampaignState.RUNNING, False),
        (CampaignState.CANCELLED, CampaignState.DRAFT, False),
    ],
)
def test_a_campaign_moves_only_as_the_table_allows(
    before: CampaignState, after: CampaignState, allowed: bool
) -> None:
    assert before.may_become(after) is allowed


def test_only_completed_and_cancelled_campaigns_have_ended() -> None:
    ended = {state for state in CampaignState if state.ended}
    assert ended == {CampaignState.COMPLETED, CampaignState.CANCELLED}
