"""HTTP/2 flow control for the APNs and FCM client (RFC 9113 section 5.2): the request bodies
waiting for the server's send windows, and the connection's receive window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from app.providers.http2_wire import DEFAULT_WINDOW

RECEIVE_WINDOW: Final = 16 << 20


class Stream(Protocol):
    window: int  # what the server lets the stream send now


class SendQueue:
    """Request bodies waiting to be sent as DATA frames, in the order they came, each within
    the connection's window (``window``) and its stream's."""

    def __init__(self) -> None:
        self.window = DEFAULT_WINDOW
        self._bodies: dict[int, memoryview] = {}

    def add(self, stream_id: int, body: bytes) -> None:
        self._bodies[stream_id] = memoryview(body)

    def drop(self, stream_id: int) -> bool:
        """Forget the stream's body; whether any of it was still unsent."""
        return self._bodies.pop(stream_id, None) is not None

    def clear(self) -> None:
        self._bodies.clear()

    def sendable(
        self, streams: Mapping[int, Stream], max_frame: int
    ) -> list[tuple[int, bytes, bool]]:
        """What the windows let out now: (stream id, chunk, whether it ends the body), the
        windows taken down by it. A body whose stream has no window left lets later ones
        pass; one that finds the connection's window closed stops them all."""
        out: list[tuple[int, bytes, bool]] = []
        for stream_id, waiting in list(self._bodies.items()):
            stream = streams.get(stream_id)
            if stream is None:
                del self._bodies[stream_id]
                continue
            body = waiting
            while body:
                size = min(len(body), self.window, stream.window, max_frame)
                if size <= 0:
                    break
                chunk, body = body[:size], body[size:]
                self.window -= size
                stream.window -= size
                out.append((stream_id, bytes(chunk), not body))
            if body:
                self._bodies[stream_id] = body
                if self.window <= 0:
                    return out
            else:
                del self._bodies[stream_id]
        return out


class ReceiveWindow:
    """The connection's receive window: opened to ``RECEIVE_WINDOW`` at the start, topped
    up by one WINDOW_UPDATE each time half of it was used."""

    opening_increment: Final = RECEIVE_WINDOW - DEFAULT_WINDOW

    def __init__(self) -> None:
        self._taken = 0

    def took(self, size: int) -> int:
        """``size`` bytes of DATA arrived: the increment to send now, or 0."""
        self._taken += size
        if self._taken < RECEIVE_WINDOW // 2:
            return 0
        increment, self._taken = self._taken, 0
        return increment
