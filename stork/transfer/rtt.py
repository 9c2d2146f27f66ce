"""The round trip of a transfer's path, as the daemon can see it: TCP connects to the servers
its URLs name.

A connect is one SYN / SYN-ACK exchange, so its time is one round trip to that server plus
whatever queueing and scheduling delayed it; `path_rtt_s` takes the shortest of a few connects
per server (delays only add). The daemon usually runs at one end of a third-party path, so its
connect to the *other* end is the path's round trip and its connect to its own end is near
zero; the longer of the two is taken. With both ends remote it is an estimate from the longer
leg.

    path_rtt_s(["ftp://a:2811/x", "ftp://b:2811/y"])   # 0.0403, or None when not known

Used by dataset passes (the bandwidth-delay product of their size classes, and their transfer
log rows) and by the transfer log rows of single-file transfers (through `PathRtts`, which
measures a path again only every MAX_AGE_S).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from stork.urls import parse_url

DEFAULT_PORTS: Final = {"ftp": 21, "gsiftp": 2811, "http": 80, "https": 443, "davs": 443,
                        "dav": 80, "root": 1094, "xroot": 1094}
PROBE_TIMEOUT_S: Final = 3.0
CONNECTS: Final = 3  # connects per server for `path_rtt_s`; the shortest counts
MAX_AGE_S: Final = 300.0  # `PathRtts` measures a path again after this long
MAX_PATHS: Final = 10_000  # paths `PathRtts` remembers
FLOOR_S: Final = 1e-6  # a connect is never reported as taking no time


def network_end(url: str) -> tuple[str, int] | None:
    """(host, port) of the server `url` names; None for a local file (or a URL that cannot
    be read)."""
    try:
        u = parse_url(url)
    except ValueError:
        return None
    if u.scheme == "file" or not u.host:
        return None
    return u.host, u.port or DEFAULT_PORTS.get(u.scheme, 21)


def connect_s(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
    """Seconds one TCP connect to host:port took; None when it did not answer in time."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return max(time.monotonic() - start, FLOOR_S)
    except OSError:
        return None


def shortest_connect_s(host: str, port: int, tries: int = CONNECTS,
                       timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
    """The shortest of `tries` connects to host:port; None as soon as one does not answer."""
    best: float | None = None
    for _ in range(tries):
        seconds = connect_s(host, port, timeout_s)
        if seconds is None:
            return None
        best = seconds if best is None else min(best, seconds)
    return best


def path_rtt_s(urls: Sequence[str], tries: int = CONNECTS,
               timeout_s: float = PROBE_TIMEOUT_S) -> float | None:
    """The path's round trip: over the servers the URLs name, the longest of each one's
    shortest connect (`tries` each). None when it is not known: no URL names a server (a
    local copy), or a server did not answer (the longest leg may be the one missing)."""
    ends = [end for url in urls if (end := network_end(url)) is not None]
    times = [shortest_connect_s(host, port, tries, timeout_s)
             for host, port in dict.fromkeys(ends)]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


class PathRtts:
    """The round trips of the paths transfers took, each path measured (`path_rtt_s`) again
    only when its last measurement is older than `max_age_s`: a path's round trip seldom
    changes, and measuring after every transfer would hold each slot for three round trips
    more. Thread-safe; an unknown round trip (None) is not kept, so it is tried again."""

    def __init__(self, max_age_s: float = MAX_AGE_S,
                 measure: Callable[[Sequence[str]], float | None] = path_rtt_s,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._measure = measure
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[tuple[tuple[str, int], ...], tuple[float, float]] = {}

    def of(self, urls: Sequence[str]) -> float | None:
        """The round trip of the path between the servers `urls` name (None: not known)."""
        key = tuple(dict.fromkeys(e for url in urls if (e := network_end(url)) is not None))
        if not key:
            return None
        with self._lock:
            known = self._known.get(key)
        if known is not None and self._clock() - known[0] < self.max_age_s:
            return known[1]
        seconds = self._measure(urls)
        if seconds is not None:
            with self._lock:
                if len(self._known) >= MAX_PATHS:  # forget the oldest measurement
                    del self._known[min(self._known, key=lambda k: self._known[k][0])]
                self._known[key] = (self._clock(), seconds)
        return seconds
