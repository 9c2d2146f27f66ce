"""Measurements on a running testbed: RTT, iperf3 throughput, GridFTP stream sweeps."""

from __future__ import annotations

import itertools
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from stork.eos.samplers import IPERF_BETWEEN_TESTS, IPERF_RETRY_WAIT_S, IPERF_TRIES
from tests.testbed.netns import IPERF_PORT, Testbed
from tests.testbed.topology import Link


def rtt_ms(bed: Testbed, src: str, dst: str, count: int = 10) -> float:
    """Median ping RTT from `src` to `dst` on an idle link."""
    result = bed.run(src, ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "5",
                           bed.address(dst)], timeout=count * 6 + 10)
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", result.stdout)]
    if not times:
        raise RuntimeError(f"ping {src} -> {dst} got no answer: {result.stdout}{result.stderr}")
    return statistics.median(times)


def iperf3_mbps(bed: Testbed, src: str, dst: str, streams: int, seconds: float = 5,
                omit: int = 1) -> float:
    """Received throughput of `streams` parallel iperf3 streams from `src` to `dst`."""
    argv = ["iperf3", "-c", bed.address(dst), "-p", str(IPERF_PORT), "-P", str(streams),
            "-t", f"{seconds:g}", "-O", str(omit), "-J"]
    for attempt in range(1, IPERF_TRIES + 1):
        result = bed.run(src, argv, timeout=seconds + omit + 60)
        try:
            report = json.loads(result.stdout)
        except ValueError:
            raise RuntimeError(f"iperf3 {src} -> {dst}: {result.stderr.strip()[:300]}") from None
        if "error" not in report:
            return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6
        # the server listens again only after the last test's end, which the next run can beat
        between_tests = any(text in report["error"].lower() for text in IPERF_BETWEEN_TESTS)
        if not between_tests or attempt == IPERF_TRIES:
            break
        time.sleep(IPERF_RETRY_WAIT_S)
    raise RuntimeError(f"iperf3 {src} -> {dst}: {report['error']}")


@dataclass
class LinkCheck:
    link: Link
    rtt_ms: float
    mbps: dict[int, float] = field(default_factory=dict)  # streams -> iperf3 Mbit/s

    @property
    def rtt_ok(self) -> bool:
        return abs(self.rtt_ms - self.link.rtt_ms) <= 0.1 * self.link.rtt_ms

    @property
    def rate_ok(self) -> bool:
        return max(self.mbps.values()) <= self.link.rate_mbps

    @property
    def doublings(self) -> int:
        """How many stream doublings in a row raised the throughput by at least 10%."""
        counts = sorted(self.mbps)
        grew = 0
        for low, high in itertools.pairwise(counts):
            if self.mbps[high] < 1.1 * self.mbps[low]:
                break
            grew += 1
        return grew

    def row(self) -> str:
        cells = " | ".join(f"{self.mbps[n]:.1f}" for n in sorted(self.mbps))
        verdict = "ok" if self.rtt_ok and self.rate_ok else "FAIL"
        return (f"| {self.link.label} | {self.rtt_ms:.1f} | {cells} | {max(self.mbps.values()):.1f}"
                f" | {self.doublings} | {verdict} |")


def check_link(bed: Testbed, link: Link, streams: tuple[int, ...] = (1, 2, 4, 8, 16),
               seconds: float = 5) -> LinkCheck:
    check = LinkCheck(link, rtt_ms(bed, link.a, link.b))
    for n in streams:
        check.mbps[n] = iperf3_mbps(bed, link.a, link.b, n, seconds)
    return check


def table_header(streams: tuple[int, ...]) -> str:
    cols = " | ".join(f"{n} stream{'s' if n > 1 else ''}" for n in streams)
    aligns = " | ".join("---:" for _ in streams)
    return (f"| link | RTT ms | {cols} | max | doublings that grew | check |\n"
            f"| --- | ---: | {aligns} | ---: | ---: | --- |")


def gridftp_mbps(bed: Testbed, src: str, dst: str, path: Path, streams: int,
                 size_bytes: int) -> float:
    """One third-party GridFTP transfer of `path` from `src` to `dst`: bytes over wall time."""
    target = bed.site_dir(dst) / f"sweep-{path.name}"
    argv = ["globus-url-copy", "-p", str(streams), bed.url(src, path), bed.url(dst, target)]
    start = time.monotonic()
    result = bed.run(src, argv, timeout=3600)
    elapsed = time.monotonic() - start
    target.unlink(missing_ok=True)
    if result.returncode != 0:
        raise RuntimeError(f"globus-url-copy -p {streams} {src} -> {dst}: "
                           f"{result.stderr.strip()[-300:]}")
    return size_bytes * 8 / 1e6 / elapsed


def sweep(bed: Testbed, src: str, dst: str, path: Path, streams: tuple[int, ...],
          repeat: int) -> dict[int, list[float]]:
    """Throughput of each stream count, `repeat` times, rounds interleaved (drift spreads)."""
    size = path.stat().st_size
    runs: dict[int, list[float]] = {n: [] for n in streams}
    for _ in range(repeat):
        for n in streams:
            runs[n].append(gridftp_mbps(bed, src, dst, path, n, size))
    return runs


def medians(runs: dict[int, list[float]]) -> dict[int, float]:
    return {n: statistics.median(v) for n, v in runs.items()}
