"""PURE: what a climb measured at each load of its path, and the tests that say the load
moved (`stork.tuning.online.Climb` keeps one `Loads`).

A flow's windows at one setting spread about their mean; that spread, as a share of the
mean and pooled over every measurement of the job (each about its own mean), is the path's
*noise* (`Loads.noise`; until it has `NOISE_MIN_DF` degrees of freedom, `NOISE_PRIOR`).
Three windows say little of a spread, and a reference pooled over a load that came has
the two loads' gap as its spread, which would hide the next change: so two measurements of
one setting are compared with the path's noise, not with their own spreads (`apart`:
more than `drift_z` standard errors of their difference and `drift_share` of the first).
On synthetic flows with no load and windows spread 5% (10%, 15%) about the rate, the climb's
tests reopen 3 (9, 16) of 200 jobs of 120 s; judged by the two measurements' own spreads,
without the test of a measurement's last window alone, they reopened 0 (38, 89).

A hold's drift is judged on the hold's own spread instead (`load_moved`): a hold has
windows enough to measure it. A measurement taken as the start of a new load must be
*steady* (`steady`): a new load's rate is held, a passing dip's is not. The windows that
left a rate, the last of them each past `drift_share` the same way (`moved_since`), are the
new load's alone, not a window across its arrival.

What the flow measured at each load is kept for the job (`saw`, `new_load`): when the
search, reopened, measures its start where it was at an earlier load (not `apart`), that
load's measurements serve again as the path's history (`same_load`), so the tries it
refused then are passed over instead of made again (in docs/BENCHMARKS.md 15.20's run A
the halving of cc lost 25% at the start and 29% once more when the load had gone). A try
refused on the windows while its calls settled (`Climb.unsettled`: more streams in flight
than it has) has no measurement of its own; those windows are kept with the load apart
(`lost`), and serve as that history too, where the load measured nothing else of the
setting: the try would make no more (in 15.49's wan80 run, job 2 refused cc 2 p 8 so at
-31.4%, and tried it again at -35.7% when the search reopened at the same load).

The settings a flow left at a change are measured again by the windows told after it
(`Climb.late`); their spread, pooled apart from the path's noise (`left`, `late_noise`),
is the bar of that test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stork.transfer.worker import Setting
from stork.tuning.verdicts import (
    NOISE_MIN_DF,
    NOISE_PRIOR,
    WINDOWS,
    Measured,
    pooled,
    pooled_noise,
    spread_ss,
)

DRIFT_Z = 3.0  # a hold's drift: this many spreads of its windows,
DRIFT_SHARE = 0.15  # and this share of its mean, twice in a row


@dataclass(frozen=True)
class Load:
    """What a flow measured at one load (`measured`), and the tries it refused on windows
    that carried more streams than they have (`lost`)."""

    measured: dict[Setting, Measured]
    lost: dict[Setting, Measured]

    @property
    def history(self) -> dict[Setting, Measured]:
        """The load's measurements, and its lost tries where it measured nothing else."""
        return {**self.lost, **self.measured}


class Loads:
    """A climb's measurements by load, the path's noise, and the tests of a load that
    moved (see the module)."""

    def __init__(self, *, drift_z: float = DRIFT_Z, drift_share: float = DRIFT_SHARE,
                 windows: int = WINDOWS) -> None:
        self.drift_z = drift_z
        self.drift_share = drift_share
        self.windows = windows  # a measurement of fewer windows is no load's
        self.now: dict[Setting, Measured] = {}  # what the flow measured at this load
        self._lost: dict[Setting, Measured] = {}  # the tries it refused unsettled (`lost`)
        self._before: list[Load] = []  # and at the loads before
        self._noise_ss, self._noise_df = 0.0, 0  # the windows' relative spread (`noise`)
        self._late_ss, self._late_df = 0.0, 0  # the spread of the settings left (`late`)

    def saw(self, measured: Measured) -> None:
        """The flow measured `measured` at the load of now (and its spread is the path's
        noise: `noise`)."""
        self._noise_ss += spread_ss(measured)
        self._noise_df += max(measured.count - 1, 0)
        before = self.now.get(measured.setting)
        self.now[measured.setting] = \
            measured if before is None else pooled(measured.setting, [before, measured]) \
            or measured

    def lost(self, windows: Measured) -> None:
        """A try refused at this load on `windows` that carried more streams than it has
        (`Climb.unsettled`): what it would make at most. Not the path's noise (the windows
        span a change of setting), nor a measurement of the setting (`now`)."""
        self._lost[windows.setting] = windows

    def new_load(self) -> None:
        """The load moved: what the flow measured so far was at the load before."""
        if self.now or self._lost:
            self._before.append(Load(self.now, self._lost))
            self.now, self._lost = {}, {}

    def same_load(self, start: Measured) -> Load | None:
        """The newest earlier load at which the flow measured `start`'s setting where it is
        now (not `apart`: the load came back, what was measured then holds again), or
        None."""
        for load in reversed(self._before):
            then = load.measured.get(start.setting)
            if then is not None and then.count >= self.windows \
                    and not self.apart(then, start, (start,)):
                return load
        return None

    def again(self, load: Load) -> None:
        """The load of now is `load` again (`same_load`): what the flow measured then
        counts as measured now, so a later return to this load finds all of it."""
        self.now = {**load.measured, **self.now}
        self._lost = {**load.lost, **self._lost}

    def noise(self, new: Sequence[Measured] = ()) -> float:
        """The spread of one window at an unchanged setting, as a share of its mean: pooled
        over every setting this job measured and `new` (each measurement's windows about
        their own mean); until it has `NOISE_MIN_DF` degrees of freedom, `NOISE_PRIOR`."""
        return pooled_noise(new, self._noise_ss, self._noise_df)

    def apart(self, before: Measured, now: Measured, new: Sequence[Measured]) -> bool:
        """Whether two measurements of one setting differ by more than `drift_z` standard
        errors of their difference and `drift_share` of the first: the load moved between
        them. The error is from the path's noise (`noise`), not from the two measurements'
        own spreads (see the module). `new`: measurements whose spread the noise has not
        counted yet."""
        if before.mean <= 0:
            return False
        moved = abs(now.mean - before.mean) / before.mean
        error = self.noise(new) * math.sqrt(1 / before.count + 1 / now.count)
        return moved > max(self.drift_z * error, self.drift_share)

    def load_moved(self, before: Measured, now_mbps: float) -> bool:
        """Whether `now_mbps` at `before`'s setting left its mean by more than `drift_z`
        of its spread and `drift_share` of it: the load moved, not the noise."""
        moved = abs(now_mbps - before.mean)
        return moved > max(self.drift_z * before.stdev, self.drift_share * before.mean)

    def steady(self, measured: Measured, floor: float = 0.0) -> bool:
        """Whether `measured`'s windows spread no more than `drift_z` times the path's
        noise (a window's relative spread, `noise`; at least `floor`, the bar of
        `history_verdict` and of `Climb._reopen`): a rate held, as under a new load,
        and not a passing dip (on wan80 six of eight 64 MiB ranges ended within 4 s at a
        hold, the rate read 69-127 Mbit/s for 6 s, 131.0 ± 51.8 over three windows, and
        taken as a start it kept cc 16 at +112.9% and then cc 32: docs/BENCHMARKS.md
        15.29, run P5). The sample spread of three windows of a steady rate passes three
        times its true spread about once in 10,000 (chi-square, 2 degrees of freedom);
        the path's noise is itself an estimate: at twice, the start of the synthetic load
        step in `tests/test_online.py` (windows spread 5%, the pooled noise read 3.9%)
        was refused."""
        if measured.mean <= 0:
            return False
        return measured.stdev / measured.mean <= self.drift_z * max(self.noise(), floor)

    def moved_since(self, before_mbps: float, now_mbps: float,
                    rates: Sequence[float]) -> list[float]:
        """The last of `rates` that each left `before_mbps` by more than `drift_share` of
        it, the way the rate went to `now_mbps` (see the module)."""
        sign = 1.0 if now_mbps > before_mbps else -1.0
        out: list[float] = []
        for rate in reversed(rates):
            if sign * (rate - before_mbps) <= self.drift_share * before_mbps:
                break
            out.append(rate)
        return out[::-1]

    def left(self, measured: Measured) -> None:
        """The flow left `measured`'s setting at a change (`Climb.late`)."""
        self._late_ss += spread_ss(measured)
        self._late_df += measured.count - 1

    def late_noise(self) -> float:
        """The spread of the settings the flow left, each `trimmed`, with `NOISE_PRIOR`
        counted as `NOISE_MIN_DF` degrees of freedom (`Climb.late`)."""
        return pooled_noise((), self._late_ss + NOISE_MIN_DF * NOISE_PRIOR ** 2,
                            self._late_df + NOISE_MIN_DF)
