"""``h2``'s client connection as each connection of the push client
(``app.providers.http2_connection``) uses it: its configuration and the settings it
announces, ``hpack``'s coder as ``app.providers.http2_hpack`` hands it over, a state machine
that lets the streams a server still finishes after its GOAWAY be answered, and a cheaper
count of the open streams."""

from __future__ import annotations

from typing import Final

import h2.config
import h2.connection
import h2.events
import h2.settings
from h2.connection import ConnectionInputs, H2ConnectionStateMachine

from app.providers.http2_hpack import Decoder, Encoder

STREAM_WINDOW: Final = 1 << 20  # what one answer may send us
MAX_HEADER_LIST: Final = 64 * 1024

# The fields are ours (lowercase names, values without line breaks): h2 need not check or
# rewrite them. Of an answer's fields this client reads ``:status`` (checked here) and hands
# the others on as text; h2's checks of them cost a tenth of a request.
_CONFIG: Final = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
)
_SETTINGS: Final = {
    h2.settings.SettingCodes.ENABLE_PUSH: 0,
    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
    h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
}


class _StateMachine(H2ConnectionStateMachine):
    """``h2``'s connection states but for a GOAWAY received: ``h2`` takes the connection for
    closed and then refuses every frame after it as a protocol error (python-hyper/h2
    #1199), so the streams the server still finishes, those up to its last stream id, would
    fail. Here a GOAWAY leaves the state as it was; the connection opens no stream after one
    (``Connection.usable``) and closes once its streams are over."""

    def process_input(self, input_: ConnectionInputs) -> list[h2.events.Event]:
        if input_ is ConnectionInputs.RECV_GOAWAY:
            return []
        return super().process_input(input_)


class H2Client(h2.connection.H2Connection):
    """``h2``'s client connection, configured, counting its open streams as ``Connection`` does.

    ``h2`` counts them for every new stream by walking all of its streams, which with a
    hundred in flight cost a third of a request's CPU. ``Connection`` never opens more than
    the server allows, so ``open`` (set by it) is the count; the walk, which also forgets
    the streams that are over, runs once the table has grown to twice what it was after
    the last one."""

    open = 0
    _sweep_at = 64

    def __init__(self) -> None:
        super().__init__(_CONFIG)
        self.encoder, self.decoder = Encoder(), Decoder(MAX_HEADER_LIST)
        self.local_settings = h2.settings.Settings(client=True, initial_values=_SETTINGS)
        self.state_machine = _StateMachine()

    @property
    def open_outbound_streams(self) -> int:
        if len(self.streams) >= self._sweep_at:
            self.open = self._open_streams(1)
            self._sweep_at = 2 * self.open + 64
        return self.open
