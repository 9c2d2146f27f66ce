"""The valley figure of a transfer: how far its rate falls between its start and its end.

    found = valley([(0.0, 0), (0.25, 1_000_000), ...], tail_bytes=8 * mean_size_bytes)
    found.lowest_share    # lowest 2-s window / the median 2-s window, None with a note

Engine-neutral: the input is bytes at the destination over time (a directory polled every
0.25-0.5 s), whatever moved them. Bytes are made non-decreasing first (a file sent again
and truncated does not take bytes back). A 2-s window starts at every `step_s` from the
first byte: its rate is the bytes that landed in it (linear between samples) over 2 s. The
median is over every window from the first byte to the last; the lowest is over the windows
after the first `skip_s` seconds (from the first byte) and before the moment the bytes still
to land fall below `tail_bytes` (the caller's "last cc items": cc x the mean file size).
Pure: no clock, no files; bench/bench_dataset.py polls and calls it.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

WINDOW_S = 2.0
STEP_S = 0.25
SKIP_S = 10.0


@dataclass(frozen=True)
class Valley:
    """A run's 2-s windows: the median over the run, the lowest in its middle (None, with
    `note` saying why, when the series is too short to judge). Times in seconds after the
    first byte landed."""

    landed_bytes: int
    start_s: float  # the first byte, on the series' clock (the last sample without bytes)
    span_s: float  # first byte to last byte
    median_mbps: float | None
    lowest_mbps: float | None
    lowest_at_s: float | None  # where the lowest window starts
    judged_from_s: float | None  # the middle of the run: windows starting at or after this
    judged_to_s: float | None  # ... and ending at or before this
    windows: int  # windows judged (one every step)
    note: str = ""

    @property
    def lowest_share(self) -> float | None:
        if self.lowest_mbps is None or not self.median_mbps:
            return None
        return self.lowest_mbps / self.median_mbps


def _monotone(series: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Times and bytes sorted by time, bytes never decreasing (a running maximum)."""
    times: list[float] = []
    landed: list[float] = []
    high = 0.0
    for t, b in sorted(series):
        high = max(high, float(b))
        if times and t == times[-1]:
            landed[-1] = high
            continue
        times.append(float(t))
        landed.append(high)
    return times, landed


def _at(times: list[float], landed: list[float], t: float) -> float:
    """Bytes landed at `t`, linear between the samples around it."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return landed[0]
    if i == len(times):
        return landed[-1]
    t0, t1 = times[i - 1], times[i]
    return landed[i - 1] + (landed[i] - landed[i - 1]) * (t - t0) / (t1 - t0)


def _when(times: list[float], landed: list[float], level: float) -> float:
    """The first time the bytes landed reach `level` (linear between samples)."""
    i = bisect.bisect_left(landed, level)
    if i == 0:
        return times[0]
    if i == len(times):
        return times[-1]
    b0, b1 = landed[i - 1], landed[i]
    return times[i - 1] + (times[i] - times[i - 1]) * (level - b0) / (b1 - b0)


def _rates(times: list[float], landed: list[float], starts: list[float],
           window_s: float) -> list[float]:
    """Mbit/s of the windows starting at `starts`."""
    return [(_at(times, landed, t + window_s) - _at(times, landed, t)) * 8 / window_s / 1e6
            for t in starts]


def window_rates(series: Sequence[tuple[float, float]], window_s: float = WINDOW_S,
                 step_s: float = STEP_S) -> list[tuple[float, float]]:
    """(start, Mbit/s) of the windows starting every `step_s` from the series' first
    sample to its last (for a plot)."""
    times, landed = _monotone(series)
    if len(times) < 2:
        return []
    count = int((times[-1] - times[0] - window_s) / step_s + 1e-9) + 1
    starts = [times[0] + k * step_s for k in range(max(count, 0))]
    return list(zip(starts, _rates(times, landed, starts, window_s), strict=True))


def valley(series: Sequence[tuple[float, float]], tail_bytes: float,
           window_s: float = WINDOW_S, step_s: float = STEP_S,
           skip_s: float = SKIP_S) -> Valley:
    """The valley figure of `series`, (seconds, bytes at the destination) samples."""
    times, landed = _monotone(series)
    total = landed[-1] if landed else 0.0
    empty = Valley(int(total), times[0] if times else 0.0, 0.0, None, None, None, None, None,
                   0)
    if len(times) < 2 or total <= 0:
        return replace(empty, note=f"too little data: {len(times)} samples, "
                                   f"{int(total)} bytes landed")
    first = bisect.bisect_right(landed, 0.0)  # the first sample with bytes
    start = times[max(first - 1, 0)]  # the last sample before any byte (or the first)
    end = _when(times, landed, total)
    span = end - start
    starts = [start + k * step_s for k in range(int((span - window_s) / step_s + 1e-9) + 1)] \
        if span >= window_s else []
    if not starts:
        return replace(empty, start_s=start, span_s=span,
                       note=f"too little data: {span:.1f} s from the first byte to the last, "
                            f"shorter than one {window_s:g} s window")

    rates = _rates(times, landed, starts, window_s)
    median = statistics.median(rates)
    tail_at = _when(times, landed, total - tail_bytes) if tail_bytes < total else start
    lo, hi = start + skip_s, tail_at
    middle = [(r, t) for r, t in zip(rates, starts, strict=True)
              if t >= lo - 1e-9 and t + window_s <= hi + 1e-9]
    base = Valley(int(total), start, span, median, None, None, lo - start, hi - start, 0)
    if not middle:
        return replace(base, note=f"too little data: no {window_s:g} s window between "
                                  f"{skip_s:g} s after the first byte and the last "
                                  f"{tail_bytes / 1e6:.1f} MB ({hi - start:.1f} s after it)")
    if median <= 0:
        return replace(base, note="no bytes landed in the median window")
    lowest, at = min(middle)
    return Valley(int(total), start, span, median, lowest, at - start, lo - start, hi - start,
                  len(middle))
