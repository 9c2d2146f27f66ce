"""The path's round trip from TCP connects (stork.transfer.rtt), against real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from stork.server.dataset_run import RTT_UNKNOWN_S, round_trip_s
from stork.transfer.rtt import connect_s, network_end, path_rtt_s


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def test_network_ends_and_default_ports() -> None:
    assert network_end("ftp://h.example/x") == ("h.example", 21)
    assert network_end("gsiftp://h.example/x") == ("h.example", 2811)
    assert network_end("root://h.example//x") == ("h.example", 1094)
    assert network_end("davs://h.example:8443/x") == ("h.example", 8443)
    assert network_end("file:///tmp/x") is None
    assert network_end("not a url") is None


def test_a_connect_to_a_listener_is_timed(listening: int) -> None:
    seconds = connect_s("127.0.0.1", listening)
    assert seconds is not None and 0 < seconds < 1
    assert connect_s("127.0.0.1", closed_port(), timeout_s=1) is None


def test_the_path_is_the_longest_connect_and_unknown_when_an_end_is_silent(
        listening: int) -> None:
    here = f"ftp://127.0.0.1:{listening}/a"
    rtt = path_rtt_s([here, "file:///tmp/b"])
    assert rtt is not None and 0 < rtt < 1
    assert path_rtt_s(["file:///tmp/a", "file:///tmp/b"]) is None  # a local copy
    silent = f"ftp://127.0.0.1:{closed_port()}/b"
    assert path_rtt_s([here, silent], timeout_s=1) is None
    # dataset passes keep their fallbacks for the size classes
    assert round_trip_s([here, silent]) == RTT_UNKNOWN_S
    assert round_trip_s(["file:///tmp/a", "file:///tmp/b"]) == 1e-4
    assert 1e-4 <= round_trip_s([here, "file:///tmp/b"]) < 1
