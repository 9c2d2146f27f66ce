"""PURE: what a setting measured on a running flow, and the verdict on a try of another.

The vocabulary the online controllers (`stork.tuning.online`) and the path's history
(`stork.tuning.path_history`) share: a setting's windows of measured rate (`Measured`),
its neighbours along an axis (`neighbour`), a try judged against a reference within the
noise of the windows (`judge`, and `settled` at a try's last look), and measurements of
one setting pooled (`pooled`, `pooled_noise`, `trimmed`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from stork.transfer.worker import Setting
from stork.tuning.base import Limits

WINDOW_S = 2.0  # the windows a controller judges (the tools report every second or two, a list call
# of small files as each lands: rates over one second are lumpy)
WINDOWS = 3  # full windows measured at a setting before it is judged,
MAX_WINDOWS = 8  # and at most, while the difference stays within the noise
MIN_GAIN = 0.05  # a gain smaller than this is no gain (and fewer streams win)
Z = 2.0  # standard errors of the difference a gain must clear
NOISE_PRIOR = 0.10  # a window's relative spread until a job has measured its own (the
# testbed's windows at one setting spread 2.7-9.5% of their mean in BENCHMARKS 15.18-15.20:
# the noisy end), over this many degrees of freedom (two measurements of 3 windows)
NOISE_MIN_DF = 4
TRIM_FROM = 5  # windows of a setting from which `trimmed` leaves the farthest out
AXES = ("cc", "p")


@dataclass(frozen=True)
class Measured:
    """A setting's windows: their mean and spread (Mbit/s)."""

    setting: Setting
    mean: float
    stdev: float
    count: int

    @classmethod
    def of(cls, setting: Setting, rates: Sequence[float]) -> Measured:
        stdev = statistics.stdev(rates) if len(rates) > 1 else 0.0
        return cls(setting, statistics.fmean(rates), stdev, len(rates))

    def label(self) -> str:
        return f"{self.setting.label()}: {self.mean:.1f} ± {self.stdev:.1f} Mbit/s"


def streams(setting: Setting) -> int:
    return setting.cc * setting.p


def neighbour(setting: Setting, axis: str, up: bool, limits: Limits) -> Setting | None:
    """`setting` with `axis` doubled (up) or halved, inside `limits`; None when it cannot
    move that way."""
    value = getattr(setting, axis)
    top = limits.max_cc if axis == "cc" else limits.max_p
    new = min(value * 2, top) if up else max(value // 2, 1)
    if (new <= value) if up else (new >= value):  # (up from above `top` is no move up)
        return None
    moved = Setting(new, setting.p, setting.pp) if axis == "cc" else \
        Setting(setting.cc, new, setting.pp)
    return moved if streams(moved) <= limits.max_streams else None


class Verdict(Enum):
    KEPT = "kept"
    REFUSED = "refused"
    OPEN = "open"  # the difference is within the noise: more windows may tell


def judge(ref: Measured, tried: Measured, *, min_gain: float, z: float
          ) -> tuple[Verdict, str, dict[str, float]]:
    """`tried` against `ref`: more streams are kept when the gain, less the noise (`z`
    standard errors of the difference, from the spread of each one's windows), still
    reaches `min_gain`, and refused when even the gain plus the noise does not; fewer
    streams are kept when the loss, noise included, stays within `min_gain` (with gains
    within 5%, the fewer streams win), and refused when it passes it even less the noise.
    Between the two the verdict is open (a test repeated as windows come in: so strict a
    bar keeps the repeated looks from buying streams on noise)."""
    gain = tried.mean / ref.mean - 1 if ref.mean > 0 else math.inf
    noise = z * math.sqrt(ref.stdev ** 2 / ref.count + tried.stdev ** 2 / tried.count)
    share = noise / ref.mean if ref.mean > 0 else 0.0
    figures = {"reference_mbps": round(ref.mean, 3), "tried_mbps": round(tried.mean, 3),
               "gain": round(gain, 4), "noise": round(share, 4),
               "windows": float(tried.count)}
    what = f"{tried.label()} ({tried.count} windows) against {ref.label()}: {gain:+.1%}"
    if streams(tried.setting) > streams(ref.setting):
        if gain - share >= min_gain:
            return Verdict.KEPT, (f"{what}, at least {min_gain:.0%} even less the noise "
                                  f"({share:.1%})"), figures
        if gain + share < min_gain:
            return Verdict.REFUSED, (f"{what}, below {min_gain:.0%} even with the noise "
                                     f"({share:.1%})"), figures
        return Verdict.OPEN, f"{what}, within the noise ({share:.1%})", figures
    if gain - share >= -min_gain:
        return Verdict.KEPT, (f"{what} with fewer streams, within {min_gain:.0%} even less "
                              f"the noise ({share:.1%})"), figures
    if gain + share < -min_gain:
        return Verdict.REFUSED, (f"{what} with fewer streams, a loss past {min_gain:.0%} "
                                 f"even with the noise ({share:.1%})"), figures
    return Verdict.OPEN, f"{what} with fewer streams, within the noise ({share:.1%})", figures


def settled(ref: Measured, tried: Measured, *, min_gain: float, z: float,
            max_windows: int) -> tuple[Verdict, str, dict[str, float]]:
    """`judge`, with a verdict still open when `tried` has `max_windows` windows or more
    decided on the point estimate less one standard error of the difference (`judge`'s
    noise over `z`), as the climb decides a try left open that long: fewer streams are
    kept when their loss plus it stays within `min_gain`, more streams when their gain
    less it still reaches `min_gain`; else the reference is kept. While open, `judge` asks
    for `z` standard errors, so the repeated looks buy no streams on noise; at the last
    look a verdict must be given, and a try open that long has had its first and last
    windows compared for a load that moved (`Climb.step`). One standard error and not
    none: the tries that reach the last look are those whose early windows looked well (a
    poor start is refused at once), so their gain reads high, the loss of fewer streams
    low (on a flat surface with windows spread 5%, a bar of the gain alone past 5% and past
    the noise kept p 2 at +5.1% and +5.8% in
    `tests/test_online.py::test_a_load_step_reopens_the_search_from_the_prior`; on wan40 a
    4 GiB file kept cc 4 p 4 at -4.8% over 8 windows, and its 73 windows there made
    -6.8%: docs/BENCHMARKS.md 15.57). Before the last look, fewer streams whose loss is
    past `min_gain` even with one standard error are refused at once: such a try costs
    rate while it runs (on wan80, 15.57, cc 4 p 4 ran 8 windows at -20.0%, open because
    the reference's three windows spread 12%), where refusing it wrongly costs streams,
    not rate."""
    verdict, why, figures = judge(ref, tried, min_gain=min_gain, z=z)
    fewer = streams(tried.setting) < streams(ref.setting)
    gain, noise = figures["gain"], figures["noise"]
    if verdict is Verdict.OPEN and fewer and tried.count < max_windows \
            and gain + noise / z < -min_gain:
        return Verdict.REFUSED, (f"{why}; a loss past {min_gain:.0%} even with one standard "
                                 f"error ({noise / z:.1%}): kept the reference"), figures
    if verdict is Verdict.OPEN and tried.count >= max_windows:
        kept = gain - noise / z >= -min_gain if fewer else gain - noise / z >= min_gain
        verdict = Verdict.KEPT if kept else Verdict.REFUSED
        why += f"; still open after {tried.count} windows: " + (
            f"a loss within {min_gain:.0%} by one standard error ({noise / z:.1%}): the "
            f"fewer streams win" if kept and fewer else
            f"a gain past {min_gain:.0%} by one standard error ({noise / z:.1%}): kept"
            if kept else
            f"a loss of {-gain:.1%}, past {min_gain:.0%} with one standard error "
            f"({noise / z:.1%}): kept the reference" if fewer
            else "the fewer streams win: kept the reference")
    return verdict, why, figures


def against_best(verdict: Verdict, why: str, figures: dict[str, float],
                 ref: Measured, best: Measured | None, tried: Measured, *, min_gain: float,
                 z: float, max_windows: int | None = None
                 ) -> tuple[Verdict, str, dict[str, float]]:
    """`verdict` (of a try of fewer streams, `tried`, against `ref`) judged against `best`
    too, the best rate measured at this load, when that is another setting than `ref`
    with a higher rate and more streams than `tried`: with gains within `min_gain`, the
    fewer streams win, within `min_gain` of the best and not only of the last reference
    (halvings each within it of the one before would add up: on lan10 a 500 x 2 MiB job
    halved cc 8 p 2 to cc 8 p 1 at -0.2%, to cc 4 p 1 at -1.2%, and the next job started
    at cc 2 p 1 and kept it at -4.8%, 5.6% below cc 8 p 2: docs/BENCHMARKS.md 15.40). Kept
    when kept against both; refused when refused against either; open else. `settled`'s
    rules when `max_windows` is given (a try's verdict), `judge`'s else."""
    if best is None or verdict is Verdict.REFUSED or best.setting == ref.setting \
            or best.mean <= ref.mean or streams(tried.setting) >= streams(ref.setting) \
            or streams(best.setting) <= streams(tried.setting):
        return verdict, why, figures
    if max_windows is None:
        verdict_best, why_best, _ = judge(best, tried, min_gain=min_gain, z=z)
    else:
        verdict_best, why_best, _ = settled(best, tried, min_gain=min_gain, z=z,
                                            max_windows=max_windows)
    figures = {**figures, "best_mbps": round(best.mean, 3)}
    if verdict_best is Verdict.REFUSED:
        return Verdict.REFUSED, f"{why}; against the best at this load, {why_best}", figures
    if verdict_best is Verdict.OPEN and verdict is Verdict.KEPT:
        return Verdict.OPEN, f"{why}; against the best at this load, {why_best}", figures
    return verdict, why, figures


TCP_IP_HEADER_BYTES = 52  # an IPv4 packet's IP (20) and TCP (20, timestamps 12) headers


def payload_mbps(link_mbps: float, mtu: int) -> float:
    """The most data a TCP flow can carry on a link of `link_mbps` whose packets are at
    most `mtu` bytes: each packet's headers (`TCP_IP_HEADER_BYTES`) take their share of
    the rate, 3.5% at a 1500-byte MTU. Framing below IP (an Ethernet header, preamble and
    gap) is not taken off: where the link's rate counts it the flow carries less still, so
    this stays a bound no flow passes. On the testbed (whose emulator counts IP packets at
    MTU 1500: 193.1 Mbit/s of 200) the best windows measured 191.6 Mbit/s on lan10 and
    95.9 of 100 on lossy20 (docs/BENCHMARKS.md 15.35)."""
    return link_mbps * (mtu - TCP_IP_HEADER_BYTES) / mtu


def no_room(ref: Measured, moved: Setting, ceiling_mbps: float | None, *, min_gain: float,
            z: float, max_windows: int) -> str:
    """Why a try of `moved` (more streams than `ref`) could not be kept on a link of
    `ceiling_mbps`, or "" when it could (or the link's rate is not known): `settled` would
    not keep even the best it could measure, the link's rate with the least noise it could
    carry (`ref`'s spread over `max_windows`, its last look: one standard error of the
    difference)."""
    if ceiling_mbps is None or ref.mean <= 0:
        return ""
    best = Measured(moved, ceiling_mbps, ref.stdev, max_windows)
    verdict, _, figures = settled(ref, best, min_gain=min_gain, z=z, max_windows=max_windows)
    if verdict is Verdict.KEPT:
        return ""
    error = figures["noise"] / z
    return (f"the link's data rate, {ceiling_mbps:.1f} Mbit/s, is {figures['gain']:+.1%} of the "
            f"reference's {ref.mean:.1f}, not {min_gain:.0%} beyond one standard "
            f"error ({error:.1%}): {streams(moved)} streams could not be kept")


def spread_ss(m: Measured) -> float:
    """The sum of squares of `m`'s windows about their mean, as shares of it."""
    return (m.count - 1) * (m.stdev / m.mean) ** 2 if m.count > 1 and m.mean > 0 else 0.0


def trimmed(setting: Setting, rates: Sequence[float]) -> Measured:
    """`rates` measured at `setting`, from `TRIM_FROM` windows on without the one farthest
    from their median: a window across a change (a ramp, a load that came in the last
    one) would widen a setting's spread many times (see `Climb.late`)."""
    if len(rates) >= TRIM_FROM:
        middle = statistics.median(rates)
        rates = list(rates)
        rates.remove(max(rates, key=lambda r: abs(r - middle)))
    return Measured.of(setting, rates)


def pooled_noise(parts: Iterable[Measured], ss: float = 0.0, df: int = 0) -> float:
    """The spread of one window at an unchanged setting as a share of its mean, pooled over
    `parts` (each one's windows about its own mean) and `ss` over `df` degrees of freedom
    already counted; `NOISE_PRIOR` below `NOISE_MIN_DF` degrees of freedom."""
    for m in parts:
        ss, df = ss + spread_ss(m), df + max(m.count - 1, 0)
    return math.sqrt(ss / df) if df >= NOISE_MIN_DF else NOISE_PRIOR


def pooled(setting: Setting, parts: Iterable[Measured]) -> Measured | None:
    """Measurements of one setting taken apart, as one: their windows' mean and spread
    (within each and between them)."""
    parts = [m for m in parts if m.count > 0]
    count = sum(m.count for m in parts)
    if not count:
        return None
    mean = sum(m.mean * m.count for m in parts) / count
    squares = sum((m.count - 1) * m.stdev ** 2 + m.count * (m.mean - mean) ** 2
                  for m in parts)
    return Measured(setting, mean, math.sqrt(squares / (count - 1)) if count > 1 else 0.0,
                    count)
