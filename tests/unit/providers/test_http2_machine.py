"""``h2``'s client connection as the push client configures it, on its own: the settings it
announces, a GOAWAY that leaves its state as it was, and the count of open streams it takes
from its connection. How a connection relies on them is checked in test_http2_connection.py."""

from __future__ import annotations

import h2.events
from h2.connection import ConnectionInputs, ConnectionState
from h2.settings import SettingCodes

from app.providers.http2_machine import MAX_HEADER_LIST, STREAM_WINDOW, H2Client


def test_it_announces_no_push_its_stream_window_and_its_header_list_limit() -> None:
    settings = H2Client().local_settings
    assert settings[SettingCodes.ENABLE_PUSH] == 0
    assert settings[SettingCodes.INITIAL_WINDOW_SIZE] == STREAM_WINDOW
    assert settings[SettingCodes.MAX_HEADER_LIST_SIZE] == MAX_HEADER_LIST


def test_a_goaway_received_leaves_the_state_as_it_was() -> None:
    client = H2Client()
    client.initiate_connection()
    state = client.state_machine.state
    assert state is not ConnectionState.CLOSED
    events: list[h2.events.Event] = client.state_machine.process_input(ConnectionInputs.RECV_GOAWAY)
    assert (events, client.state_machine.state) == ([], state)


def test_the_open_streams_are_the_count_it_is_given() -> None:
    client = H2Client()
    client.open = 7
    assert client.open_outbound_streams == 7
