"""PURE: an optimizer as a controller of a running flow (issue 28's shape).

The engine (`stork.engine`) changes its setting without stopping anything, so a setting is
tried on the flow itself: no sample, no probe, no restart. `Climb` starts at a *prior* (the
path's history or the per-class preset, `prior_from_history`) and is *stepped* with the
measured rates (Mbit/s, one per full window of the flow) at the setting in effect since it
settled. It answers a `Change` or nothing:

1. At the prior it measures `windows` windows: the reference.
2. It tries the neighbours along each axis it may move (`axes`: cc, then p), doubling first,
   and judges each against the reference (`judge`); of two halvings still to try, small and
   medium files try p's first (`halving_order`, `_halvings_in_order`). A prior that is a
   halving (or a doubling) of a setting the history measured (`moved_start`) is itself a
   try: the start is judged against the history's measurement of the setting it came from,
   as a try of fewer (more) streams would be (a halving taken as kept, the setting it came
   from would have had to prove a gain beyond the noise of a few windows at the start: on
   wan40 a start at cc 2 p 4 measured 142.9 ± 52.0 Mbit/s against the history's 180.5 for cc
   4 p 4, and the job held cc 2 for its whole 82 s; docs/BENCHMARKS.md 15.25). A
   setting with more streams is kept only when its gain less the noise (`z` standard
   errors of the difference of the two means, from the spread of the windows at each
   setting) still reaches `min_gain`; one with fewer streams when
   its loss, noise included, stays within `min_gain` (with gains within 5%, the fewer
   streams win). While the difference is within the noise the tried
   setting is measured longer, up to `max_windows`, and then decided on the point estimate
   (`settled`): more streams are kept when their gain less one standard error of the
   difference still reaches `min_gain` (a verdict must be given then; while open, two
   standard errors keep the repeated looks from buying streams on noise), else the fewer
   streams win. A kept setting becomes the reference and the climb goes on the same way; a
   refused one sends the flow back to the reference, which is measured again (its windows
   pooled with the earlier ones), and the other direction is tried (only when the first was
   refused at once), then the next axis. The next axis starts the way the last kept move
   went: both axes multiply the same streams (cc x p), so once halving one kept the rate
   (the path does not need the streams it had), doubling the other first would ask for
   twice the streams of a setting just shown to be more than enough; it is tried only when
   halving that axis is refused at once. A refused move turns the other axes the other way
   first for the same reason (`_turn`). A doubling the link cannot pay for is not tried
   (when the link's rate is known, `ceiling_mbps`: STORK_LINK_MBPS less its packets'
   headers, `payload_mbps`): the most a try could measure is the link's data rate, and
   when that is not `min_gain` above the reference beyond one standard error of a try at
   its last look (`room`), no try could be kept, so its seconds at twice the streams are
   spared and the other way is tried. A neighbour the
   path's history (`known`, `measured_from_history`) already refuses against the reference
   is passed over without moving the flow; the reference it is judged against is the
   reference's windows now and, when the history has them, then, pooled (`pooled`): a load
   that changed between the two shows as noise instead of as a gain. A history whose
   windows of the neighbour spread more than `drift_z` times the path's noise (at least
   `NOISE_PRIOR`) refuses nothing it leaves within the noise: the flow tries it
   (`_from_history`).
   A try of fewer streams is made only when the data left would outlast it: when the
   caller says how many seconds of data are left at the reference's rate (`left_s`) and
   how long measuring the setting now in effect took (`try_s`), a halving the data would
   end before it could be judged, even left open to `max_windows`, is not made and the
   flow holds the reference. A try the job ends in is a setting no window judged: below
   the knee the rate falls steeply, past it it is flat (in the sweeps of
   docs/BENCHMARKS.md 15 a halving of cc below the best cost 14-38%, a doubling past it at
   most 8%), so only the halving waits for the time to be judged.
   A try of fewer streams is refused without waiting for its own windows when the
   windows since the flow left the reference already lose past `min_gain` even with the
   noise (`unsettled`): the calls taken at the reference end one by one, so the flow then
   carries fewer streams than the reference and more than the try, and below the knee the
   rate rises with streams. On wan40 a try of cc 2 from cc 4 (files of 64 MiB) lost 50.5%
   and was refused 25.5 s after it began, most of it the wait for the retired calls to end
   (docs/BENCHMARKS.md 15.29, run P11).
   For large files (`alike_axes`: transfers long enough that a file's own costs do not
   show, so cc and p both add whole streams) a stream count shown too few, by a halving
   refused or a doubling kept, flows or history, is not tried again along the other axis:
   no halving to that count or fewer (`too_few`), and no later job on the path starts at
   one (`prior_from_history`). On the (cc, p, pp) grids of
   ../shared/data a halving along one axis that lost more than 5% was followed by a loss
   of more than 5% along the other in 85% of the cases for large files, 92% for medium and
   38% for small ones (where cc is what counts); on the `short` testbed path a medium
   dataset lost 11% at half its cc and nothing at half its p, so medium files keep
   trying both.
   The rate rises with streams ever more slowly up to the knee, so a setting whose
   doubling still gained `KNEE_GAIN` (2.5%, on the point estimates) is at the knee or
   below it, and half its streams lose more (`past_knee`: on the grids of ../shared/data
   the halving then lost more than 5% in 79-92% of the cases, against 22-71% after a
   doubling that gained less). A large file's climb does not try such a halving, along
   either axis, when this flow or the path's history measured the doubling at this load
   (the history is dropped when the load moves; a halving kept within 5% and then halved
   again on wan80 lost 48%, and after a start kept at -3.6% 41%: docs/BENCHMARKS.md 15.26
   and 15.27); and no job on a known path starts at one (`prior_from_history`; on wan40 the
   job that started at such a halving made 0.81-0.85 of the best cell in four runs). Nor at
   a halving that the history saw lose more than `min_gain` from a setting with as many
   streams or more on the other axis (`lost_above`: with fewer there, each step of the axis
   carries more of the rate; on the grids the halving below then lost more than 5% in
   81-99% of the cases, against 22-35%); and no climb tries one, whatever its files' size
   (on wan40 a job at cc 16 p 1 tried cc 8 p 1, where the history had cc 16 p 3 -> cc 8
   p 3 lose 6.7%, and lost 31.9% for 16 s: docs/BENCHMARKS.md 15.28, run N1).
3. When every axis is done it holds the reference and watches: when the mean of the last
   `windows` windows leaves the hold's own mean by more than `drift_z` of its spread and
   `drift_share` of its mean, twice in a row (two looks with a new window each), the load
   changed at an unchanged setting, and the search starts again for the new load: from
   the prior, or, when the rate fell, from the setting held if it has more streams than
   the prior. A load that came takes a
   share of the path that the flow wins back with streams, so the best setting under it
   has as many streams as before or more (wan40's sweep under a 50% load, 1200 x 2 MiB:
   cc 8 -> 16 -> 32 gained 17% and 16%, against 6% and 2% unloaded; docs/BENCHMARKS.md
   15.27, run J5); going back to the prior's fewer streams would measure a setting
   already short and take a doubling more to leave it. Where the search starts again at
   the setting the flow is at, the windows that showed the load moved, those of them each
   past `drift_share` (the new load's alone), measure that start when there are `windows`
   of them (the hold, or the measurement again, waits a window or two more for them, the
   measurement again up to `max_windows`) and they spread no more than `drift_z` times
   the path's noise, or `NOISE_PRIOR` where that is larger (a new load's rate is held; a
   passing dip's is not: `Loads.steady`; a load makes the windows noisier, `_reopen`), and
   the first try is made at once: measured again after the change, the start took 15 s
   on wan40, settling and ramp included (docs/BENCHMARKS.md 15.28, run M4). When the
   rate fell so, that first try of cc up is as many doublings at once (at most three) as
   TCP's fair share says win back `WIN_BACK` (90%) of the rate before (`win_back`): one
   doubling at a time, each judged over 15-20 s, wan40's flow reached the best cell under
   a 50% load (cc 32, from cc 8) 39 s after the fall was seen (15.30, run Q4). The same
   model weighs the load that came in streams (`load_streams`): until the search
   reopens again, a halving it says would lose past `min_gain` under that load is not
   tried (in 15.32's runs L5 and L6 a try of p 1 at cc 64 under the load lost for 8 s
   of the 20-40 s after it came). Once the
   hold has `3 x windows` windows, they stop growing at the first look that saw such a
   drift (windows of a new load taken into the hold would widen its spread until a drift
   of 15-20% never showed; a hold of fewer windows is itself too noisy to keep).
   While it searches, two measurements of one setting are compared with the path's noise
   (`stork.tuning.loads`, which also says how often these tests reopen a search with no
   load on synthetic flows): the reference
   measured again after a refusal against the reference, and a try's first and last
   windows when its verdict stays open long enough to have both; and the measurement
   again's last window alone against the reference (a load that came in the middle of the
   measurement again leaves its mean within the test, as in 15.20's run E), and a try's
   last two windows, each alone and the same way, against its first three (on wan40 a
   load that came during a try of cc 16 left its 8 windows within the test, and was seen
   only at the measurement again after it, 23.6 s after it came: 15.31, run L2); a
   verdict due on a try whose last window alone is so apart waits for the next window,
   which tells (in 15.31's run L3 a try kept on windows mostly before a load was followed
   by one begun under it, and the load was seen 37 s after it came); and the windows of
   the setting the flow left at a change that were told only after it (`late`: a
   third-party GridFTP call tells its bytes at its server's markers, every 5 s, so a
   verdict reads windows seconds old), the last alone against what that setting measured
   when the flow left it, from five windows on without the one farthest from their median
   (`trimmed`: a ramp or a load's first window would widen the bar). In 15.33's run L7 a
   load came 4.6 s before the verdict that kept cc 16, the flow went on to try p 1, and
   the load was seen 23 s after that try ended, at the measurement again, where the
   seconds of cc 16 after the windows of its verdict had read 100-141 Mbit/s against its
   190.1. Apart that far, the load came or went, and the search reopens; when the rate
   fell, at the setting of the most streams the flow was at (the try's, or the
   reference's) if more than the prior's. A search that reopens on a window told late, or
   on a fall whose windows cannot measure its start, measures the start anew, and when
   that is the setting the fall was seen at and still below the rate before, its first
   try wins it back as a held fall's does (`win_back`). A try of more streams whose
   windows read more than `FELL_SHARE` below the reference, and apart from it so,
   reopens the search too, at the try, without going back to
   measure the reference again (in 15.31's runs that measurement waited 6-10 s for the
   calls taken at the refused setting to end, and took 19.5-22.5 s in all): twice the
   streams seldom lose that much with nothing else changed (of the doublings of cc or p
   on the grids of ../shared/data 97.5% lost less than 19.1%), a load that came does (on
   wan40 a 50% load left cc 16 p 3 at 141-143 Mbit/s, where cc 8 p 3 made 183-187
   without it: 15.31's sweeps). Pooled with its earlier windows, a reference
   measured across a load's arrival would judge the next tries against a rate of neither
   load, and its spread, the two loads' gap, would hide the next change (on the testbed a
   50% load that came during a search left the reference at 154.5 ± 35.9 Mbit/s, between
   182.4 before and 126.5 after, and no doubling was tried under the load:
   docs/BENCHMARKS.md 15.20); a try that ran across a load's end would buy streams (15.20's
   run D kept cc 64 at +17%).
   What the flow measured at each load is kept for the job (`Loads.same_load`): when the
   start measured after a reopening is where it was at an earlier load, that load's
   measurements serve as the path's history (`known`).

Each change carries its reason and its figures, which the job's ad records. The caller
(`stork.server.flow_tuning`) resets the rates after a change it applies, and counts a
window only once every call in flight was taken at the new setting (a change of `p`
applies to a worker's next call).

A setting's windows and the verdict on a try (`judge`, `settled`, `pooled`, `trimmed`)
are in `stork.tuning.verdicts`; what the transfer log says of the path
(`measured_from_history`, `prior_from_history`, `past_knee`, `lost_above`) in
`stork.tuning.path_history`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stork.transfer.worker import Setting
from stork.tuning.base import Limits
from stork.tuning.load_share import WIN_BACK, jumped, load_streams, win_back
from stork.tuning.loads import DRIFT_SHARE, DRIFT_Z, Loads
from stork.tuning.path_history import lost_above, moved_start, past_knee
from stork.tuning.verdicts import (
    AXES,
    MAX_WINDOWS,
    MIN_GAIN,
    NOISE_PRIOR,
    WINDOW_S,
    WINDOWS,
    Measured,
    Verdict,
    Z,
    halving_order,
    judge,
    neighbour,
    no_room,
    pooled,
    settled,
    streams,
    trimmed,
)

FELL_SHARE = 0.20  # a try of more streams this far below the reference: a load came (see
# the module; of 1080 doublings of cc or p on the (cc, p, pp) grids of ../shared/data, 97.5%
# lost less than 19.1%: `bench/bench_layout.py`'s last table)


@dataclass(frozen=True)
class Change:
    """A new setting for the flow, why, and the figures it was judged on."""

    setting: Setting
    reason: str
    figures: dict[str, float] = field(default_factory=dict)


class Climb:
    """A noise-aware climb over (cc, p) on a running flow; see the module."""

    name = "climb"

    def __init__(self, prior: Setting, limits: Limits, *, axes: Sequence[str] = AXES,
                 windows: int = WINDOWS, max_windows: int = MAX_WINDOWS,
                 min_gain: float = MIN_GAIN, z: float = Z, drift_z: float = DRIFT_Z,
                 drift_share: float = DRIFT_SHARE,
                 known: Mapping[Setting, Measured] | None = None,
                 ceiling_mbps: float | None = None, name: str = "climb",
                 alike_axes: bool = False) -> None:
        if windows < 2 or max_windows < windows:
            raise ValueError(f"a setting is judged on 2 windows or more (and at most "
                             f"max_windows), not {windows} (max {max_windows})")
        unknown = set(axes) - set(AXES)
        if unknown:
            raise ValueError(f"axes are cc and p, not {sorted(unknown)}")
        self.name = name  # as CONTROLLERS names it (where its prior came from)
        self.prior = prior
        self.limits = limits
        self.axes = tuple(axes)
        self.halving = halving_order(self.axes, alike_axes)  # the order it halves them in
        self.windows = windows
        self.max_windows = max_windows
        self.min_gain = min_gain
        self.z = z
        self.known = dict(known or {})  # the path's history at this load
        self.ceiling_mbps = ceiling_mbps  # the link's rate, when known
        self.alike_axes = alike_axes  # cc and p both add whole streams (large files)
        self.too_few = 0  # the most streams shown to lose at this load (see the module)
        self.current = prior
        self.reference: Measured | None = None
        self._ref_known = False  # the reference holds the history's windows of its setting
        self.holding = False
        self._todo: list[tuple[str, bool]] = []
        self._trying: tuple[str, bool, bool] | None = None  # axis, up, first move that way
        self._drifts = 0
        self._looked = 0  # the windows the hold last looked at (a drift counts once a window)
        self._again = False
        self._time: tuple[float | None, float | None] = (None, None)  # left_s, try_s
        self.loads = Loads(drift_z=drift_z, drift_share=drift_share, windows=windows)
        self._left: Measured | None = None  # the setting the flow left, as measured (`late`)
        self._restart()

    @property
    def measuring_again(self) -> bool:
        """Whether the flow is back at the reference after a refused try, measuring it
        again (its windows then join the reference's)."""
        return self._again

    def _restart(self, start: Setting | None = None) -> None:
        """The search from `start` (default the prior), nothing measured yet."""
        self.current, self.reference, self.holding = start or self.prior, None, False
        self._jump = 1  # the first try of cc up, this many times the streams (`win_back`)
        self._load_streams = 0.0  # the weight of a load that came, in streams (`_shared`)
        self._fell: tuple[Setting, float] | None = None  # a fall seen there, from (`_start`)
        self._ref_known, self.too_few = False, 0
        self._todo = self._halvings_in_order(
            [(axis, up) for axis in self.axes for up in (True, False)])
        self._trying, self._drifts, self._again = None, 0, False
        self._waited = 0  # windows a verdict on the try in flight waited (`step`)
        self._came_from: Setting | None = None  # the history's setting a start moved from
        moved = moved_start(self.prior, self.known, self.axes, self.limits, self.windows)
        if moved is not None:  # the start is a try of that move (see the module)
            axis, up, self._came_from = moved
            self.reference, self._ref_known = self.known[self._came_from], True
            self._todo.remove((axis, up))
            self._trying = (axis, up, True)
        self._drift_base = 0  # the hold's windows a drift is judged against (`_watch`)

    # -- the step -------------------------------------------------------------------------

    def step(self, rates: Sequence[float], *, left_s: float | None = None,
             try_s: float | None = None) -> Change | None:
        """`rates`: the full windows at `current` since it settled (oldest first); `left_s`,
        `try_s`: the seconds of data left and those measuring `current` took, when known
        (see the module)."""
        at = self.current
        change = self._step(rates, left_s=left_s, try_s=try_s)
        if change is not None:  # the setting left, as measured: what `late` compares with
            self._left = trimmed(at, rates) \
                if change.setting != at and len(rates) >= self.windows else None
            if self._left is not None:
                self.loads.left(self._left)
        return change

    def late(self, rates: Sequence[float]) -> Change | None:
        """`rates`: the windows of the setting the flow left at the last change `step`
        answered, that the tools told only after it (oldest first): a GridFTP third-party
        call tells its bytes at its server's markers, every 5 s, so the last windows a
        verdict reads are seconds old. Where the flow left the reference, the last of them
        alone is tested against what the reference measured (`trimmed`): past
        `FELL_SHARE` and `drift_z` standard errors (one window, often early in a job: the
        spread of the settings left, each `trimmed`, with `NOISE_PRIOR` counted as
        `NOISE_MIN_DF` degrees of freedom), the load moved while the verdict was given,
        and the search reopens at once (see the module), without waiting for the
        measurement the flow is in now. A refused try's are not tested: the reference
        measured again tells. In 15.33's run L10 the start's first window (a ramp) and the
        try's last (the load's first) made the path's noise read 9.5% where the try's
        other windows spread 2.8%, and the bar 30.2%; the load took 29.3%."""
        left = self._left
        if left is None or not rates or self._again or self.reference is None \
                or self.reference.setting != left.setting:
            return None
        last = Measured.of(left.setting, rates[-1:])
        noise = self.loads.late_noise()
        moved = abs(last.mean / left.mean - 1) if left.mean > 0 else 0.0
        if moved <= max(self.loads.drift_z * noise * math.sqrt(1 / left.count + 1),
                        FELL_SHARE):
            return None
        self._left = None
        return self._reopen(left.mean, last.mean, "", seen_at=left.setting, said=(
            f"a window at {left.setting.label()} told after the flow left it, "
            f"{last.mean:.1f} Mbit/s, left its {left.label()} (the load moved)"))

    def _step(self, rates: Sequence[float], *, left_s: float | None,
              try_s: float | None) -> Change | None:
        self._time = (left_s, try_s)
        if self.holding:
            if len(rates) == self._looked:
                return None  # no new window since the last look
            self._looked = len(rates)
            return self._watch(rates)
        if len(rates) < self.windows:
            return None
        if self.reference is None:
            return self._start(Measured.of(self.current, rates), "measured the start")
        if self._again:  # back at the reference after a refusal: its windows join it
            again = Measured.of(self.current, rates)
            last = Measured.of(self.current, rates[-1:])  # or began to, in the last window
            for now, what, new in ((again, "measured again at", (again,)),
                                   (last, "the last window at", ())):
                if self.loads.apart(self.reference, now, new):  # the load moved
                    if self._wait_for_moved(self.reference.mean, now.mean, rates,
                                            room=len(rates) < self.max_windows):
                        return None
                    self._again = False
                    return self._reopen(self.reference.mean, now.mean, what, rates)
            self._again = False
            self.loads.saw(again)
            self.reference = pooled(self.current, [self.reference, again]) or again
            return self._next(f"measured {again.label()} again ({again.count} windows), "
                              f"{self.reference.mean:.1f} Mbit/s over "
                              f"{self.reference.count}")
        first = Measured.of(self.current, rates[:self.windows])  # the try's first windows
        lasts = [Measured.of(self.current, [r]) for r in rates[self.windows:][-2:]]
        if len(lasts) == 2 and all(self.loads.apart(first, w, (first,)) for w in lasts) \
                and (lasts[0].mean > first.mean) == (lasts[1].mean > first.mean):
            # its last two windows each apart from its first, the same way: the load moved
            last = lasts[-1]
            if self._wait_for_moved(first.mean, last.mean, rates, room=True):
                return None
            return self._reopen(first.mean, last.mean, "the last windows while trying", rates)
        ref = self.reference
        recent = rates[-self.max_windows:]
        tried = Measured.of(self.current, recent)
        if streams(self.current) > streams(ref.setting) \
                and tried.mean < (1 - FELL_SHARE) * ref.mean \
                and self.loads.apart(ref, tried, (tried,)):
            # more streams far below the reference: not the streams, a load that came
            if self._wait_for_moved(ref.mean, tried.mean, rates, room=True):
                return None
            return self._reopen(ref.mean, tried.mean, "", rates, said=(
                f"a try of more streams, {tried.label()}, fell from the reference's "
                f"{ref.label()} by more than the noise and {FELL_SHARE:.0%} "
                f"(the load moved)"))
        if len(recent) >= 2 * self.windows:  # a try left open long: did the load move?
            early = Measured.of(self.current, recent[:self.windows])
            late = Measured.of(self.current, recent[-self.windows:])
            if self.loads.apart(early, late, (early, late)):
                return self._reopen(early.mean, late.mean, "the rate while trying")
        last_apart = bool(lasts) and len(rates) <= self.max_windows \
            and self.loads.apart(first, lasts[-1], (first,))
        return self._judge(tried, wait=last_apart)

    def unsettled(self, rates: Sequence[float]) -> Change | None:
        """A try of fewer streams judged on `rates`, the full windows since the flow left
        the reference for it, while the calls taken at the reference still end (before
        `step` has its windows): refused when they already lose past `min_gain` even with
        the noise (`judge`), else nothing. Those windows carried fewer streams than the
        reference and more than the try, and below the knee the rate rises with streams,
        so the try itself would lose more. A lower cc waits for its retired calls to end
        and a lower p for every call in flight: on wan40 a try of cc 2 from cc 4 (20 files
        of 64 MiB) lost 50.5% and was refused 25.5 s after it began, most of it that wait
        (docs/BENCHMARKS.md 15.29, run P11). Not for a start at a halving (`moved_start`: the
        flow never ran at the setting it halves), nor a measurement again; these windows
        join no measurement (their setting was in no call throughout)."""
        ref = self.reference
        if self.holding or self._again or self._trying is None or ref is None \
                or self._came_from is not None or len(rates) < self.windows \
                or streams(self.current) >= streams(ref.setting):
            return None
        tried = Measured.of(self.current, rates[-self.max_windows:])
        verdict, why, figures = judge(ref, tried, min_gain=self.min_gain, z=self.z)
        if verdict is not Verdict.REFUSED:
            return None
        self._left = None  # (the windows it judged carried both settings)
        return self._after(verdict, tried, f"while its calls settled, with more streams in "
                                           f"flight than it has: {why}", figures, saw=False)

    def _judge(self, tried: Measured, *, wait: bool = False) -> Change | None:
        """The verdict on the try, or None while it is open; with `wait` (the try's last
        window left its first: the load may have moved in it) a verdict due waits for the
        next window, which tells (see the module)."""
        assert self.reference is not None and self._trying is not None
        verdict, why, figures = settled(self.reference, tried, min_gain=self.min_gain,
                                        z=self.z, max_windows=self.max_windows)
        if verdict is Verdict.OPEN:  # (open only below max_windows)
            return None  # more windows at the tried setting
        if wait:
            self._waited += 1
            return None
        if self._waited:
            figures["waited_windows"] = float(self._waited)
            why += (f" (after {self._waited} window{'s' if self._waited > 1 else ''} more: "
                    f"the last one had left the try's first)")
        return self._after(verdict, tried, why, figures)

    def _after(self, verdict: Verdict, tried: Measured, why: str,
               figures: dict[str, float], *, saw: bool = True) -> Change | None:
        assert self._trying is not None and self.reference is not None
        axis, up, first = self._trying
        if self._came_from is not None:
            why = (f"the start, {'twice' if up else 'half'} the history's "
                   f"{self._came_from.label()}: {why}")
            self._came_from = None
        if saw:  # `tried` measured its setting (not so the windows `unsettled` judges)
            self.loads.saw(tried)
        self._learn(verdict, self.reference.setting, tried.setting)
        if verdict is Verdict.KEPT:
            self.reference, self._ref_known = tried, False
            self._went(axis, up)
            return self._next(f"kept: {why}", figures, first=False)
        if not first:  # the other way is tried only when the first was refused at once
            self._todo = [(a, u) for a, u in self._todo if a != axis]
        self._turn(axis, up)
        # back to the reference, measured again before the next try: a reference measured
        # high by chance would refuse every neighbour, and the path may have moved since
        self._again, self._trying = True, None
        ref = self.reference.setting
        return self._go(ref, f"refused: {why}; back to {ref.label()} to measure it again",
                        figures)

    def _next(self, why: str, figures: dict[str, float] | None = None, *,
              first: bool = True) -> Change | None:
        """The next setting to try from the reference (a neighbour the history already
        refuses is passed over without moving the flow), or the hold at it."""
        assert self.reference is not None
        ref = self.reference.setting
        passed: list[str] = []
        while self._todo:
            axis, up = self._todo.pop(0)
            moved = neighbour(ref, axis, up, self.limits)
            jump, self._jump = self._jump, 1  # the start's first move only
            if jump > 1 and axis == "cc" and up and moved is not None:
                moved = jumped(ref, jump, self.limits) or moved
                if moved.cc > 2 * ref.cc:
                    why += (f"; cc x{moved.cc // ref.cc} at once: a load that shares the "
                            f"path by streams takes that many to win back "
                            f"{WIN_BACK:.0%} of the rate before it")
            if moved is None:
                first = True
                continue
            if self.alike_axes and not up and streams(moved) <= self.too_few:
                passed.append(f"{moved.label()} not tried: {streams(moved)} streams, where "
                              f"{self.too_few} already lost")
                first = True
                continue
            # the history's verdict first: the ceiling spares a try on the flow, and a
            # setting the history measured needs none
            verdict, known_why = self._from_history(moved)
            knee = (self._past_shape(axis) or self._shared(moved)) \
                if not up and verdict is Verdict.OPEN else ""
            if knee:  # a halving the shape of the rate refuses, as the history would
                verdict = Verdict.REFUSED
            if verdict is Verdict.OPEN and up and (full := self.room(moved)):
                passed.append(f"{moved.label()} not tried: {full}")
                first = True
                continue
            self._trying = (axis, up, first)
            self._learn(verdict, ref, moved)
            if verdict is Verdict.REFUSED:
                passed.append(f"{moved.label()} not tried: {knee}" if knee else
                              f"{moved.label()} refused from the history: {known_why}")
                if not first:
                    self._todo = [(a, u) for a, u in self._todo if a != axis]
                self._turn(axis, up)
                first = True
                continue
            if verdict is Verdict.KEPT:  # taken on the history's word, measured on arrival
                self.reference, self._ref_known = self.known[moved], True
                self._went(axis, up)
                self._again, self._trying = True, None
                if passed:
                    why += "; " + "; ".join(passed)
                return self._go(moved, f"{why}; {moved.label()} kept from the history: "
                                       f"{known_why}; measuring it", figures)
            if not up and (short := self._short_of_time()):  # a halving it could not judge
                passed.append(f"{moved.label()} not tried: {short}")
                break
            if passed:
                why += "; " + "; ".join(passed)
            return self._go(moved, f"{why}; trying {axis} {'up' if up else 'down'}",
                            figures)
        if passed:
            why += "; " + "; ".join(passed)
        self.holding, self._trying, self._looked = True, None, 0
        return self._go(ref, f"{why}; holding {ref.label()}", figures, always=True)

    def _past_shape(self, axis: str) -> str:
        """Why halving the reference along `axis` would lose past `min_gain` without a try,
        from what this flow and the path's history measured at this load (see the module),
        or "": past the knee (large files only), or below a halving that lost
        (`lost_above`)."""
        assert self.reference is not None
        seen = {**self.known, **self.loads.now}
        knee = past_knee(self.reference, seen, axis, self.limits, alike=True,
                         windows=self.windows) if self.alike_axes else ""
        return knee or lost_above(self.reference.setting, seen, axis, self.limits,
                                  min_gain=self.min_gain, windows=self.windows)

    def _shared(self, moved: Setting) -> str:
        """Why a try of `moved` (fewer streams than the reference) under a load that came
        would lose past `min_gain` without a try, or "": a load of `_load_streams` streams
        (`load_streams`, from the fall the search reopened on) that shares the path by
        streams leaves a flow of N streams N / (N + k) of it, so the try would make
        (N' / (N' + k)) / (N / (N + k)) of the reference (see the module)."""
        k = self._load_streams
        if k <= 0 or self.reference is None:
            return ""
        n, fewer = streams(self.reference.setting), streams(moved)
        kept = fewer / (fewer + k) * (n + k) / n
        if kept >= 1 - self.min_gain:
            return ""
        return (f"under the load that came (about {k:.0f} streams' worth, from the fall "
                f"the search reopened on), {fewer} streams would make {kept:.0%} of "
                f"{n}'s rate by TCP's fair share: a loss past {self.min_gain:.0%}")

    def room(self, moved: Setting) -> str:
        """Why a try of `moved` (more streams) could not be kept on a link of
        `ceiling_mbps`, or "" when it could (`no_room`, against the reference)."""
        if self.reference is None:
            return ""
        return no_room(self.reference, moved, self.ceiling_mbps, min_gain=self.min_gain,
                       z=self.z, max_windows=self.max_windows)

    def _short_of_time(self) -> str:
        """Why a try cannot be judged before the data runs out, or "" (see the module): it
        needs what measuring the setting in effect took, and the windows it may add while
        its verdict stays open."""
        left_s, try_s = self._time
        if left_s is None or try_s is None:
            return ""
        need = try_s + (self.max_windows - self.windows) * WINDOW_S
        if left_s >= need:
            return ""
        return (f"the data left (about {left_s:.0f} s) would run out before a try of fewer "
                f"streams could be judged (about {need:.0f} s: {try_s:.0f} s to measure this "
                f"setting, and up to {self.max_windows - self.windows} more windows)")

    def _learn(self, verdict: Verdict, ref: Setting, tried: Setting) -> None:
        """A stream count shown too few (see the module): a try of fewer streams refused,
        or one of more kept (the reference's count then lost to it)."""
        if verdict is Verdict.REFUSED and streams(tried) < streams(ref):
            self.too_few = max(self.too_few, streams(tried))
        elif verdict is Verdict.KEPT and streams(tried) > streams(ref):
            self.too_few = max(self.too_few, streams(ref))

    def _went(self, axis: str, up: bool) -> None:
        """A move along `axis` was kept: go on the same way, and start the axes still to
        try the same way (see the module)."""
        rest = [(a, u) for a, u in self._todo if a != axis]
        rest.sort(key=lambda e: (self.axes.index(e[0]), e[1] != up))
        self._todo = [(axis, up), *rest]

    def _turn(self, axis: str, up: bool) -> None:
        """What is left of `axis` first, then the other axes the other way than `up` first:
        after a refused move (both axes multiply the same streams: once twice the streams
        along one axis bought nothing, twice the streams along the other would ask for the
        same count; once half lost the rate, so would half along the other), and at a prior
        that halves a setting the history holds (`moved_start`). The halvings then go in
        `halving` order (`_halvings_in_order`): for small and medium files, after a refused
        doubling of cc, half the p comes before half the cc."""
        same = [(a, u) for a, u in self._todo if a == axis]
        rest = [(a, u) for a, u in self._todo if a != axis]
        rest.sort(key=lambda e: (self.axes.index(e[0]), e[1] == up))
        self._todo = self._halvings_in_order(same + rest)

    def _halvings_in_order(self, todo: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
        """`todo` with its halvings in `halving` order, each in the place of one of them
        (p before cc for small and medium files: `halving_order`), the doublings where
        they were."""
        downs = iter(sorted((e for e in todo if not e[1]),
                            key=lambda e: self.halving.index(e[0])))
        return [e if e[1] else next(downs) for e in todo]

    def _from_history(self, setting: Setting) -> tuple[Verdict, str]:
        """What the path's history says of `setting` against the reference: the verdict of
        `judge` on its pooled windows (OPEN when it knows too little), and with as many
        windows as a try may take (`max_windows`) an open one decided as a try's would be
        (the fewer streams win), unless the history's windows of `setting` spread more than
        `drift_z` times the path's noise, and at least `NOISE_PRIOR`: a history pooled over
        datasets or loads that far apart decides nothing the flow can measure itself, and
        the neighbour is tried (on the grids of ../shared/data the 1.074 GB files of
        Stampede->Gordon held cc 8 p 32 at 0.74 of the best cell, the other datasets'
        cc 16 p 32 passed over at +0.3% with windows spread 46%; docs/BENCHMARKS.md 15.34).
        The floor keeps a quiet path from trying again what its last job left open after
        `max_windows` (on wan40 cc 4 p 4 at -5.1%, its windows spread 10.2% against the
        start's 0.4%: 15.34's run D64)."""
        known = self.known.get(setting)
        if known is None or known.count < self.windows or self.reference is None:
            return Verdict.OPEN, ""
        ref = self.reference
        then = None if self._ref_known else self.known.get(ref.setting)
        if then is not None:  # the reference then and now: a load that moved is noise
            ref = pooled(ref.setting, [ref, then]) or ref
        verdict, why, _ = judge(ref, known, min_gain=self.min_gain, z=self.z)
        if verdict is Verdict.OPEN and not self.loads.steady(known, floor=NOISE_PRIOR):
            return verdict, why  # too noisy to decide
        verdict, why, _ = settled(ref, known, min_gain=self.min_gain, z=self.z,
                                  max_windows=self.max_windows)
        return verdict, why

    def _go(self, setting: Setting, why: str, figures: dict[str, float] | None, *,
            always: bool = False) -> Change | None:
        """The change to `setting` (None when the flow is there already, unless `always`:
        the hold is said once even where it moves nothing)."""
        if setting == self.current and not always:
            return None
        self.current, self._waited = setting, 0
        return Change(setting, why, figures or {})

    def _watch(self, rates: Sequence[float]) -> Change | None:
        """At the hold: a drift of the rate at the unchanged setting reopens the search
        (without the history's figures: they were of the load before)."""
        if len(rates) < 2 * self.windows:
            return None
        # the hold's windows up to the first look that saw a drift: windows of a new load
        # taken into the hold would widen its spread until the drift no longer showed
        base = self._drift_base or len(rates) - self.windows
        before, recent = rates[:base], rates[-self.windows:]
        hold = Measured.of(self.current, before)
        now = statistics.fmean(recent)
        if not self.loads.load_moved(hold, now):
            self._drifts = 0
            return None
        if base >= 3 * self.windows:  # a base of a few windows is itself noise
            self._drift_base = base
        self._drifts += 1
        if self._drifts < 2:
            return None
        if self._wait_for_moved(hold.mean, now, rates, room=True):
            return None
        return self._reopen(hold.mean, now, "the rate at", rates)

    def _wait_for_moved(self, before_mbps: float, now_mbps: float,
                        rates: Sequence[float], *, room: bool) -> bool:
        """Whether a search that would start again at this setting waits a window or two
        more (when it has `room` for them), for `windows` windows of the new load to
        measure its start (`_reopen`): sooner than a change would settle again and be
        measured."""
        moved = len(self.loads.moved_since(before_mbps, now_mbps, rates))
        return (room and 0 < moved < self.windows
                and self._reopen_at(fell=now_mbps < before_mbps)[0] == self.current)

    def _start(self, measured: Measured, what: str) -> Change | None:
        """`measured`, at the start of a search, is its reference; the first try from it."""
        self.reference = measured
        why = f"{what}, {measured.label()}"
        fell, self._fell = self._fell, None
        if fell is not None and fell[0] == measured.setting:
            # the search reopened on a fall at this setting, its start measured (by the
            # new load's windows, or anew): it weighs the load, and under it the first try
            # wins the rate back (`_reopen`)
            self._load_streams = load_streams(streams(measured.setting), fell[1],
                                              measured.mean)
            self._jump = win_back(fell[1], measured.mean)
        if (earlier := self.loads.same_load(measured)) is not None:
            self.known = dict(earlier)
            why += (f"; as at an earlier load of this job ({earlier[self.current].label()}"
                    f"): what the flow measured then counts as the path's history")
        self.loads.saw(measured)
        return self._next(why)

    def _reopen(self, before_mbps: float, now_mbps: float, what: str,
                rates: Sequence[float] = (), *, said: str = "",
                seen_at: Setting | None = None) -> Change:
        """The search again for the new load (see the module), from the prior, or when
        the rate fell from the reference's setting if it has more streams; without the
        history's figures (they were of the load before). `rates`: the windows at the
        setting in effect that showed the load moved; when the search starts from that
        setting, the last of them that each moved past `drift_share` the same way (the
        new load's alone: not a window across its arrival), if there are `windows` of
        them, are its start's measurement, and the first try is made at once (on wan40,
        measuring the start again took 15 s under a load that had come 40 s before:
        docs/BENCHMARKS.md 15.28, run M4), when they are `Loads.steady` against the path's noise
        or `NOISE_PRIOR`, the larger: a load that came makes the windows noisier than the
        flow's were without it (in 15.37's run L14 the new load's three windows spread
        10.9%, the flow's before it 1.0-3.4%, and the start was measured anew for 14 s).
        Else the change is said even where the flow is
        at its start already, so the windows of the old load are not counted for the
        new. A fall is weighed (`load_streams`, `win_back`) on the start's measurement,
        by those windows or anew, when the start is the setting it was seen at (`seen_at`:
        where a window told late fell, `late`; else the setting in effect); a start
        elsewhere weighs it on `now_mbps`, but for a window told late."""
        figures = {"hold_mbps": round(before_mbps, 3), "now_mbps": round(now_mbps, 3)}
        start, whence = self._reopen_at(fell=now_mbps < before_mbps)
        said = said or (f"{what} {self.current.label()} went from {before_mbps:.1f} to "
                        f"{now_mbps:.1f} Mbit/s with nothing changed (the load moved)")
        why = f"{said}: searching again from {whence}"
        self.known.clear()
        self.loads.new_load()
        moved = self.loads.moved_since(before_mbps, now_mbps, rates) \
            if start == self.current else []
        new = Measured.of(start, moved) if len(moved) >= self.windows else None
        seen = seen_at or self.current
        self._restart(start)
        if now_mbps < before_mbps:  # weighed where its start is measured (`_start`), or
            self._fell = (seen, before_mbps)  # when that is elsewhere, on what fell there
            if start != seen and seen_at is None:
                self._load_streams = load_streams(streams(seen), before_mbps, now_mbps)
        if new is not None and self.loads.steady(new, floor=NOISE_PRIOR):
            first = self._start(new, f"{why}; its last {new.count} windows measured the start")
            if first is not None:
                return Change(first.setting, first.reason, {**figures, **first.figures})
        return Change(start, why, figures)

    def _reopen_at(self, *, fell: bool) -> tuple[Setting, str]:
        """Where `_reopen` starts the search again, and how it says so: when the rate fell,
        the setting of the most streams the flow was at (the reference, or a try of more
        streams) if more than the prior's, else the prior."""
        held = max([self.current, *([self.reference.setting] if self.reference else [])],
                   key=streams)
        if fell and streams(held) > streams(self.prior):
            return held, f"{held.label()}, more streams than the prior's"
        return self.prior, "the prior"
