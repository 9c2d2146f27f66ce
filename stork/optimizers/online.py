"""PURE: an optimizer as a controller of a running flow (issue 28's shape).

The engine (`stork.engine`) changes its setting without stopping anything, so a setting is
tried on the flow itself: no sample, no probe, no restart. `Climb` starts at a *prior* (the
path's history or the per-class preset, `prior_from_history`) and is *stepped* with the
measured rates (Mbit/s, one per full window of the flow) at the setting in effect since it
settled. It answers a `Change` or nothing:

1. At the prior it measures `windows` windows: the reference.
2. It tries the neighbours along each axis it may move (`axes`: cc, then p), doubling
   first: a setting with more streams is kept only when its gain over the reference is
   larger than the noise (`z` standard errors of the difference of the two means, from the
   spread of the windows at each setting) and than `min_gain`; a setting with fewer streams
   is kept when it is within `min_gain` of the reference (with gains within 5%, the fewer
   streams win). A kept setting becomes the reference and the climb goes on the same way;
   a refused one sends the flow back to the reference and the other direction is tried
   (halving, only when doubling was refused at once), then the next axis.
3. When every axis is done it holds the reference and watches: when the mean of the last
   `windows` windows leaves the hold's own mean by more than `drift_z` of its spread and
   `drift_share` of its mean, twice in a row, the load changed at an unchanged setting,
   and the search starts again from the prior.

Each change carries its reason and its figures, which the job's ad records. The caller
(`stork.server.flow_tuning`) resets the rates after a change it applies, and counts a
window only once every call in flight was taken at the new setting (a change of `p`
applies to a worker's next call).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from stork.dataset.chunks import SizeClass, size_class
from stork.optimizers.base import Limits
from stork.transfer.worker import Setting
from stork.translog import COMPLETED, TransferRecord

WINDOWS = 4  # full windows measured at a setting before it is judged
MIN_GAIN = 0.05  # a gain smaller than this is no gain (and fewer streams win)
Z = 2.0  # standard errors of the difference a gain must clear
DRIFT_Z = 3.0  # a hold's drift: this many spreads of its windows,
DRIFT_SHARE = 0.15  # and this share of its mean, twice in a row
HISTORY_MIN_S = 3.0  # a transfer log row shorter than this says little of its setting
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


@dataclass(frozen=True)
class Change:
    """A new setting for the flow, why, and the figures it was judged on."""

    setting: Setting
    reason: str
    figures: dict[str, float] = field(default_factory=dict)


def streams(setting: Setting) -> int:
    return setting.cc * setting.p


def _moved(setting: Setting, axis: str, up: bool, limits: Limits) -> Setting | None:
    """`setting` with `axis` doubled (up) or halved, inside `limits`; None when it cannot
    move that way."""
    value = getattr(setting, axis)
    top = limits.max_cc if axis == "cc" else limits.max_p
    new = min(value * 2, top) if up else max(value // 2, 1)
    if new == value:
        return None
    moved = Setting(new, setting.p, setting.pp) if axis == "cc" else \
        Setting(setting.cc, new, setting.pp)
    return moved if streams(moved) <= limits.max_streams else None


class Climb:
    """A noise-aware climb over (cc, p) on a running flow; see the module."""

    name = "climb"

    def __init__(self, prior: Setting, limits: Limits, *, axes: Sequence[str] = AXES,
                 windows: int = WINDOWS, min_gain: float = MIN_GAIN, z: float = Z,
                 drift_z: float = DRIFT_Z, drift_share: float = DRIFT_SHARE) -> None:
        if windows < 2:
            raise ValueError(f"a setting is judged on 2 windows or more, not {windows}")
        unknown = set(axes) - set(AXES)
        if unknown:
            raise ValueError(f"axes are cc and p, not {sorted(unknown)}")
        self.prior = prior
        self.limits = limits
        self.axes = tuple(axes)
        self.windows = windows
        self.min_gain = min_gain
        self.z = z
        self.drift_z = drift_z
        self.drift_share = drift_share
        self.current = prior
        self.reference: Measured | None = None
        self.holding = False
        self._todo: list[tuple[str, bool]] = []
        self._trying: tuple[str, bool, bool] | None = None  # axis, up, first move that way
        self._drifts = 0
        self._restart()

    def _restart(self) -> None:
        self.current, self.reference, self.holding = self.prior, None, False
        self._todo = [(axis, up) for axis in self.axes for up in (True, False)]
        self._trying, self._drifts = None, 0

    # -- the step -------------------------------------------------------------------------

    def step(self, rates: Sequence[float]) -> Change | None:
        """`rates`: the full windows at `current` since it settled (oldest first)."""
        if self.holding:
            return self._watch(rates)
        if len(rates) < self.windows:
            return None
        measured = Measured.of(self.current, rates[-self.windows:])
        if self.reference is None:
            self.reference = measured
            return self._next(f"measured the start, {measured.label()}")
        return self._judge(measured)

    def _judge(self, tried: Measured) -> Change | None:
        assert self.reference is not None and self._trying is not None
        ref = self.reference
        axis, up, first = self._trying
        gain = tried.mean / ref.mean - 1 if ref.mean > 0 else math.inf
        noise = self.z * math.sqrt(ref.stdev ** 2 / ref.count + tried.stdev ** 2 / tried.count)
        noise_share = noise / ref.mean if ref.mean > 0 else 0.0
        figures = {"reference_mbps": round(ref.mean, 3), "tried_mbps": round(tried.mean, 3),
                   "gain": round(gain, 4), "noise": round(noise_share, 4)}
        if streams(tried.setting) > streams(ref.setting):
            kept = gain > max(noise_share, self.min_gain)
            why = (f"{tried.label()} gains {gain:+.1%} over {ref.label()}, more than the noise "
                   f"({noise_share:.1%}) and {self.min_gain:.0%}" if kept else
                   f"{tried.label()} gains {gain:+.1%} over {ref.label()}: not more than the "
                   f"noise ({noise_share:.1%}) and {self.min_gain:.0%}")
        else:
            kept = gain >= -self.min_gain
            why = (f"{tried.label()} is within {self.min_gain:.0%} of {ref.label()} or better "
                   f"({gain:+.1%}) with fewer streams" if kept else
                   f"{tried.label()} loses {-gain:.1%} against {ref.label()}")
        if kept:
            self.reference = tried
            self._todo = [(a, u) for a, u in self._todo if a != axis]
            self._todo.insert(0, (axis, up))  # go on the same way
            return self._next(f"kept: {why}", figures, first=False)
        if not (up and first):  # halving is tried only when doubling was refused at once
            self._todo = [(a, u) for a, u in self._todo if a != axis]
        return self._next(f"refused: {why}", figures)

    def _next(self, why: str, figures: dict[str, float] | None = None, *,
              first: bool = True) -> Change | None:
        """The next setting to try from the reference, or the hold at it."""
        assert self.reference is not None
        ref = self.reference.setting
        while self._todo:
            axis, up = self._todo.pop(0)
            moved = _moved(ref, axis, up, self.limits)
            if moved is not None:
                self._trying = (axis, up, first)
                return self._go(moved, f"{why}; trying {axis} {'up' if up else 'down'}",
                                figures)
            first = True
        self.holding, self._trying = True, None
        return self._go(ref, f"{why}; holding {ref.label()}", figures)

    def _go(self, setting: Setting, why: str,
            figures: dict[str, float] | None) -> Change | None:
        if setting == self.current:
            return None
        self.current = setting
        return Change(setting, why, figures or {})

    def _watch(self, rates: Sequence[float]) -> Change | None:
        """At the hold: a drift of the rate at the unchanged setting reopens the search."""
        if len(rates) < 2 * self.windows:
            return None
        before, recent = rates[:-self.windows], rates[-self.windows:]
        hold = Measured.of(self.current, before)
        now = statistics.fmean(recent)
        moved = abs(now - hold.mean)
        if moved <= max(self.drift_z * hold.stdev, self.drift_share * hold.mean):
            self._drifts = 0
            return None
        self._drifts += 1
        if self._drifts < 2:
            return None
        figures = {"hold_mbps": round(hold.mean, 3), "now_mbps": round(now, 3)}
        why = (f"the rate at {self.current.label()} went from {hold.mean:.1f} to {now:.1f} "
               f"Mbit/s with nothing changed (the load moved): searching again from the prior")
        self._restart()
        return Change(self.prior, why, figures)


# -- the prior --------------------------------------------------------------------------

def prior_from_history(history: Iterable[TransferRecord], preset: Setting, *,
                       src_host: str, dest_host: str, cls: SizeClass, bdp_bytes: float,
                       load: int, limits: Limits, min_gain: float = MIN_GAIN
                       ) -> tuple[Setting, str]:
    """Where to start: the setting that did best on this path for this size class in the
    transfer log (rows at the same known load when there are any; each setting's median
    rate; within `min_gain` of the best, the fewest streams), else `preset`; with why."""
    rows = [r for r in history
            if r.src_host == src_host and r.dest_host == dest_host
            and r.outcome == COMPLETED and r.duration_s >= HISTORY_MIN_S
            and r.throughput_mbps > 0
            and size_class(round(r.file_size_bytes), bdp_bytes) is cls]
    same_load = [r for r in rows if r.sharing == load]
    rows = same_load or rows
    rates: dict[Setting, list[float]] = {}
    for r in rows:
        setting = Setting(r.cc, r.p, r.pp)
        if setting.cc <= limits.max_cc and setting.p <= limits.max_p \
                and streams(setting) <= limits.max_streams:
            rates.setdefault(setting, []).append(r.throughput_mbps)
    if not rates:
        return preset, (f"no transfer on {src_host} -> {dest_host} for {cls.value} files "
                        f"in the log: the preset {preset.label()}")
    medians = {s: statistics.median(v) for s, v in rates.items()}
    best = max(medians.values())
    near = [s for s, m in medians.items() if m >= best * (1 - min_gain)]
    chosen = min(near, key=lambda s: (streams(s), -medians[s]))
    return chosen, (f"the path's history ({len(rows)} rows, {len(rates)} settings): "
                    f"{chosen.label()} at {medians[chosen]:.1f} Mbit/s, the fewest streams "
                    f"within {min_gain:.0%} of the best {best:.1f}")
