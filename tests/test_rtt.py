"""The path's round trip from TCP connects (stork.transfer.rtt), against real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence

import pytest

from stork.server.dataset_run import round_trip_s
from stork.transfer import rtt
from stork.transfer.rtt import PathRtts, connect_s, network_end, path_rtt_s


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)  # connects are never accepted: room for all of them
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
    seconds = path_rtt_s([here, "file:///tmp/b"])
    assert seconds is not None and 0 < seconds < 1
    assert path_rtt_s(["file:///tmp/a", "file:///tmp/b"]) is None  # a local copy
    silent = f"ftp://127.0.0.1:{closed_port()}/b"
    assert path_rtt_s([here, silent], timeout_s=1) is None
    # a dataset pass: unknown is None (the log gets no made-up RTT), a local copy near zero
    assert round_trip_s([here, silent]) is None
    assert round_trip_s(["file:///tmp/a", "file:///tmp/b"]) == 1e-4
    assert 1e-4 <= round_trip_s([here, "file:///tmp/b"]) < 1


def test_the_shortest_of_a_few_connects_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queueing and scheduling only add to a connect: one slow connect of three is not the
    path's round trip."""
    times = iter([0.016, 0.0102, 0.0105, 0.0401, 0.0403, 0.0402])
    monkeypatch.setattr(rtt, "connect_s", lambda host, port, timeout_s: next(times))
    # site a's own server (the daemon's end), then site b's: the longer leg's shortest
    assert path_rtt_s(["ftp://a/x", "ftp://b/y"]) == 0.0401
    times = iter([0.016, 0.0102, 0.0105])
    assert rtt.shortest_connect_s("a", 21) == 0.0102
    monkeypatch.setattr(rtt, "connect_s", lambda host, port, timeout_s: None)
    assert rtt.shortest_connect_s("a", 21) is None


def test_a_dataset_pass_takes_its_paths_shortest_connect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A connect whose SYN was lost answers after the kernel's one-second retry: on the
    lossy20 path one such connect made a pass's round trip 1046 ms (its bandwidth-delay
    product 50 times the path's), so a pass takes the shortest of a few, as the transfer
    log's do."""
    times = iter([0.0001, 0.0001, 0.0001, 1.0462, 0.0206, 0.0207])
    monkeypatch.setattr(rtt, "connect_s", lambda host, port, timeout_s: next(times))
    assert round_trip_s(["ftp://a/x", "ftp://b/y"]) == 0.0206
    times = iter([0.0001, 0.0001, 0.0001, 0.0206, None])
    assert round_trip_s(["ftp://a/x", "ftp://b/y"]) is None  # b stopped answering
    assert round_trip_s(["file:///tmp/a", "file:///tmp/b"]) == 1e-4  # no connect at all


def test_a_path_is_measured_again_only_when_its_measurement_is_old() -> None:
    now = [0.0]
    answers = iter([0.040, None, 0.041, 0.080])
    measured: list[tuple[str, ...]] = []

    def measure(urls: Sequence[str]) -> float | None:
        measured.append(tuple(urls))
        return next(answers)

    rtts = PathRtts(max_age_s=300, measure=measure, clock=lambda: now[0])
    a_b = ["ftp://a:2811/x", "ftp://b:2811/y"]
    assert rtts.of(a_b) == 0.040
    now[0] = 299
    assert rtts.of(["ftp://a:2811/other", "ftp://b:2811/file"]) == 0.040  # same servers
    assert rtts.of(["file:///tmp/x", "file:///tmp/y"]) is None  # no server: not measured
    assert len(measured) == 1
    assert rtts.of(["ftp://a:2811/x", "ftp://c:2811/y"]) is None  # c did not answer ...
    assert rtts.of(["ftp://a:2811/x", "ftp://c:2811/y"]) == 0.041  # ... so it is tried again
    now[0] = 300
    assert rtts.of(a_b) == 0.080  # old: measured again
    assert len(measured) == 4
