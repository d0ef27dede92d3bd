"""HTTP/2 flow control of the APNs client: bodies leave within the connection's window and
their stream's, in frames no larger than the server allows, in the order they came; a
closed connection window holds every body back, a closed stream window only its own; the
receive window is topped up once half of it was used."""

from __future__ import annotations

from dataclasses import dataclass

from app.providers.http2_window import RECEIVE_WINDOW, ReceiveWindow, SendQueue


@dataclass
class Stream:
    window: int


def test_a_body_within_both_windows_leaves_whole() -> None:
    queue, streams = SendQueue(), {1: Stream(65_535)}
    queue.add(1, b"x" * 1000)
    assert queue.sendable(streams, 16_384) == [(1, b"x" * 1000, True)]
    assert (queue.window, streams[1].window) == (64_535, 64_535)
    assert queue.sendable(streams, 16_384) == []


def test_a_body_is_cut_into_frames_of_the_server_s_size() -> None:
    queue, streams = SendQueue(), {1: Stream(65_535)}
    queue.add(1, bytes(range(256)) * 160)  # 40,960 bytes
    sent = queue.sendable(streams, 16_384)
    assert [(len(chunk), last) for _, chunk, last in sent] == [
        (16_384, False), (16_384, False), (8_192, True),
    ]  # fmt: skip
    assert b"".join(chunk for _, chunk, _ in sent) == bytes(range(256)) * 160


def test_a_closed_stream_window_holds_only_that_stream() -> None:
    queue, streams = SendQueue(), {1: Stream(100), 3: Stream(65_535)}
    queue.add(1, b"a" * 300)
    queue.add(3, b"b" * 50)
    assert queue.sendable(streams, 16_384) == [(1, b"a" * 100, False), (3, b"b" * 50, True)]
    streams[1].window += 500  # the server's WINDOW_UPDATE for stream 1
    assert queue.sendable(streams, 16_384) == [(1, b"a" * 200, True)]


def test_a_closed_connection_window_holds_every_body_in_order() -> None:
    queue, streams = SendQueue(), {1: Stream(65_535), 3: Stream(65_535)}
    queue.window = 150
    queue.add(1, b"a" * 200)
    queue.add(3, b"b" * 10)
    assert queue.sendable(streams, 16_384) == [(1, b"a" * 150, False)]
    queue.window += 100
    assert queue.sendable(streams, 16_384) == [(1, b"a" * 50, True), (3, b"b" * 10, True)]
    assert queue.window == 40


def test_a_dropped_body_or_a_stream_that_is_over_sends_nothing() -> None:
    queue, streams = SendQueue(), {1: Stream(0), 3: Stream(65_535)}
    queue.add(1, b"a")
    queue.add(3, b"b")
    queue.add(5, b"c")  # its stream is over
    assert queue.drop(3)
    assert not queue.drop(3)
    assert queue.sendable(streams, 16_384) == []
    queue.clear()
    streams[1].window = 10
    assert queue.sendable(streams, 16_384) == []


def test_the_receive_window_is_topped_up_per_half() -> None:
    window = ReceiveWindow()
    assert window.opening_increment == RECEIVE_WINDOW - 65_535
    assert window.took(RECEIVE_WINDOW // 2 - 1) == 0
    assert window.took(1) == RECEIVE_WINDOW // 2
    assert window.took(10) == 0
