"""PURE: an optimizer as a controller of a running flow (issue 28's shape).

The engine (`stork.engine`) changes its setting without stopping anything, so a setting is
tried on the flow itself: no sample, no probe, no restart. `Climb` starts at a *prior* (the
path's history or the per-class preset, `prior_from_history`) and is *stepped* with the
measured rates (Mbit/s, one per full window of the flow) at the setting in effect since it
settled. It answers a `Change` or nothing:

1. At the prior it measures `windows` windows: the reference.
2. It tries the neighbours along each axis it may move (`axes`: cc, then p), doubling first,
   and judges each against the reference (`judge`): more streams are kept when their gain
   less `z` standard errors of the difference still reaches `min_gain`, fewer when their
   loss, noise included, stays within it, against the reference and against the best rate
   measured at this load (by the flow or the history: `against_best`), so halvings each
   within `min_gain` of the last do not add up past it. A try within the noise is measured
   longer, up to `max_windows`, then decided (`settled`): more streams are kept when their
   gain less one standard error still reaches `min_gain`, fewer when their loss plus one
   standard error stays within it, else the reference is kept; a try of fewer streams
   whose loss is past `min_gain` even with one standard error is refused before the last
   look. A kept setting becomes the reference; a refused one sends the flow back to the
   reference, measured again and pooled (a try of fewer streams refused at the last look is then
   judged again against it: `_judged_again`), and the other direction is tried only when the
   first was refused at once. The next axis starts the way the last kept move went; a refused
   move turns the other axes the other way first; of two halvings still to try, small and medium
   files try p's first (`stork.tuning.moves`: `went`, `turned`, `halving_order`). A prior that is
   a halving (or a doubling) of a setting the history measured (`moved_start`) is itself a try,
   judged against the history's measurement of the setting it came from.
   A neighbour the path's history (`known`, `measured_from_history`) already refuses is
   passed over without moving the flow, judged against the reference's windows now and,
   when the history has them, then (`pooled`); a history whose windows of it spread more
   than `drift_z` times the path's noise (at least `NOISE_PRIOR`) refuses nothing it leaves
   within the noise (`history_verdict`). For large files (`alike_axes`) a stream count shown
   too few is not tried again along the other axis (`too_few`), nor a halving of a setting
   whose doubling, measured at this load, still gained `KNEE_GAIN` (`past_knee`); no climb
   tries a halving the history saw lose past `min_gain` from a setting with as many streams
   or more on the other axis (`lost_above`), and no job starts at one of these
   (`prior_from_history`). A doubling is not tried when even the link's data rate
   (`ceiling_mbps`, `payload_mbps`) leaves no `room` for it to be kept. A halving the data
   left would end before it could be judged (`left_s`, `try_s`) is not made: the flow holds
   the reference. A try of fewer streams is refused early when the windows since the flow
   left the reference already lose past `min_gain`, noise included (`unsettled`).
3. When every axis is done it holds the reference and watches: when the mean of the last
   `windows` windows leaves the hold's mean by more than `drift_z` of its spread and
   `drift_share` of it, twice in a row, the load changed, and the search starts again
   without the history's figures: when the rate fell, from the setting held if it has more
   streams than the prior (a load that came is won back with streams); when it rose, from
   where the first fall since the last rise found the flow (`_before_load`: the load that
   went left the path as it was then; a try in flight when the load came counts there
   when its windows before the fall won, `_kept_before`); else from the prior. Where it starts
   at the setting the flow is at, the new load's own windows measure that start when there
   are `windows` of them and they are steady (`Loads.steady`, `_reopen`), and the first try
   is made at once. When the rate fell, that try of cc up is as many doublings at once (at
   most three) as TCP's fair share says win back `WIN_BACK` of the rate before (`win_back`);
   the same model weighs the load in streams (`load_streams`), and until the search reopens
   again no halving it says would lose past `min_gain` is tried, but for those a jump
   kept skipped, tried first (`_skipped`): the model measured none of them, and with
   gains within `min_gain` the fewer streams win (on wan40 under its 50% load cc 32
   made 0.94-1.05 of cc 64 over cells of 800 files, and without the load 0.96-1.00 of
   the best where cc 64 made 0.86-0.92: docs/BENCHMARKS.md 15.44-15.46). Once the hold has
   `3 x windows` windows, they stop growing at the first look that saw a drift.
   While it searches, two measurements of one setting are compared with the path's noise
   (`stork.tuning.loads`): the reference measured again (and its last window alone) against
   the reference, a try's first and last windows (a verdict due on a try whose last window
   alone is apart waits for the next), and the windows of the setting a change left, told
   only after it (`late`), against what it measured then (`trimmed`). Apart, the load came
   or went, and the search reopens (when the rate fell, at the setting of the most streams
   the flow was at); a try of more streams more than `FELL_SHARE` below the reference, and
   apart from it, reopens it at the try (once per try and reference in a job: the same try
   falling again from the same reference is its own loss, judged as any try; on the
   engin-losf curves of ../shared/data a climb went 32, 64, 32, 64 and on, docs/BENCHMARKS.md
   15.51), and the windows back at the reference after a
   refused try of more streams, before the reference's own count, reopen it there when
   they fall that far (`_fell_back`: more streams were in flight in them). A start
   measured anew at the setting a fall was seen at, still below the rate before, is won
   back the same way (`win_back`). What the
   flow measured at each load is kept for the job (`Loads.same_load`) and serves as the
   history (`known`) when a start is where it was at an earlier load, with the tries
   refused there on the windows of their settling (`Loads.lost`).
4. A hold won back under a load that came (the search reopened on a fall, so the load is
   weighed in streams) may outlast the load without a drift to show it: where something
   else than the link bounds the flow at that many streams, the rate reads the same with
   the load and without it (docs/BENCHMARKS.md 15.42, run L24: 64 calls made about 150
   Mbit/s under the load and after it, 8 calls 179.5 after it). So such a hold rechecks
   (`_recheck`): after `RECHECK_WINDOWS` windows it tries half its cc (or its one axis),
   judged as any try against the hold's windows, without the load's weight or this
   load's measurements refusing it first. Where the flow measured that setting under the
   load (a jump's start, or the halving it skipped), the try's windows are compared with
   that measurement too: above it and apart from it (`Loads.apart`), the load has gone
   (`_gone`), on the try's first windows; against the hold alone, fewer streams within
   the noise take up to `max_windows`. Kept, the load has gone, and the search starts
   again as when the rate rose at a hold: where the flow was before the load came, which,
   measured as it was then (`same_load`), takes that load's measurements as its history
   (`Loads.again`) and holds without trying again what they refused (in
   docs/BENCHMARKS.md 15.44's run W, from the prior: cc 8 for 15 s at 0.93 of the cc 16
   the flow had kept before the load, then cc 16 from the history).
   Refused, the flow goes back to the hold, which rechecks again as long as it holds:
   issue 28 asks for the flow to be back within 20 s of a load that goes, and nothing
   else tells it went. Under a load that stays, each recheck costs a try that loses (in
   the pure tests, 8-16% for 3 to 8 windows of every 17 or so).

The evidence for each rule (the runs of docs/BENCHMARKS.md and the figures on the grids of
../shared/data that chose it) is in docs/OPTIMIZERS.md, "climb".

Each change carries its reason and its figures, which the job's ad records. The caller
(`stork.server.flow_tuning`) resets the rates after a change it applies, and counts a
window only once every call in flight was taken at the new setting (a change of `p`
applies to a worker's next call).

A setting's windows and the verdict on a try (`judge`, `settled`, `pooled`, `trimmed`)
are in `stork.tuning.verdicts`; what the transfer log says of the path
(`measured_from_history`, `prior_from_history`, `past_knee`, `lost_above`) in
`stork.tuning.path_history`; the loads a flow measured and the tests that say the load
moved (`Loads`) in `stork.tuning.loads`.
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
from stork.tuning.moves import Move, halving_order, in_halving_order, turned, went
from stork.tuning.path_history import history_verdict, lost_above, moved_start, past_knee
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
    against_best,
    judge,
    neighbour,
    no_room,
    pooled,
    settled,
    streams,
    trimmed,
)

RECHECK_WINDOWS = 10  # a hold won back under a load tries fewer streams after this many
# windows (20 s: issue 28's bar for being back at 0.9 of the best after a load moves)
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
        self._todo: list[Move] = []
        self._trying: tuple[str, bool, bool] | None = None  # axis, up, first move that way
        self._drifts = 0
        self._looked = 0  # the windows the hold last looked at (a drift counts once a window)
        self._again = False
        self._time: tuple[float | None, float | None] = (None, None)  # left_s, try_s
        self.loads = Loads(drift_z=drift_z, drift_share=drift_share, windows=windows)
        self._left: Measured | None = None  # the setting the flow left, as measured (`late`)
        self._before_load: Setting | None = None  # where a load that came found the flow
        self._fell_from: set[tuple[Setting, Setting]] = set()  # (reference, try): `_step`
        self._steps = 0  # the calls of `step` (`unmoved`)
        self._restart()

    def unmoved(self) -> Setting | None:
        """A start that was a try of a move from a setting the history measured
        (`moved_start`), given up before the climb was stepped: the search starts at that
        setting instead, as a prior the history measured; it answers the start given up,
        or None when the start was no such try or the climb has been stepped since. A
        flow that first runs alone in the middle of its job (`stork.server.flow_tuning`)
        is not at the start a job too short to judge a halving can still measure one at."""
        if self._came_from is None or self.current != self.prior or self._steps:
            return None
        moved, self.prior = self.prior, self._came_from
        self._restart()
        return moved

    @property
    def measuring_again(self) -> bool:
        """Whether the flow is back at the reference after a refused try, measuring it
        again (its windows then join the reference's)."""
        return self._again

    def _restart(self, start: Setting | None = None) -> None:
        """The search from `start` (default the prior), nothing measured yet."""
        self.current, self.reference, self.holding = start or self.prior, None, False
        self._jump = 1  # the first try of cc up, this many times the streams (`win_back`)
        self._skipped: Setting | None = None  # where a jump of cc went from (`_after`)
        self._refused_open: Measured | None = None  # judged again (`_judged_again`)
        self._load_streams = 0.0  # the weight of a load that came, in streams (`_shared`)
        self._fell: tuple[Setting, float] | None = None  # a fall seen there, from (`_start`)
        self._ref_known, self.too_few = False, 0
        self._todo = in_halving_order(
            [(axis, up) for axis in self.axes for up in (True, False)], self.halving)
        self._trying, self._drifts, self._again = None, 0, False
        self._back_from: Setting | None = None  # a refused try the flow is back from
        self._rechecking: float | None = None  # the load's weight while a recheck tries
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
        self._steps += 1
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
            said = (f"measured {again.label()} again ({again.count} windows), "
                    f"{self.reference.mean:.1f} Mbit/s over {self.reference.count}")
            return self._judged_again(said) or self._next(said)
        first = Measured.of(self.current, rates[:self.windows])  # the try's first windows
        lasts = [Measured.of(self.current, [r]) for r in rates[self.windows:][-2:]]
        if len(lasts) == 2 and all(self.loads.apart(first, w, (first,)) for w in lasts) \
                and (lasts[0].mean > first.mean) == (lasts[1].mean > first.mean):
            # its last two windows each apart from its first, the same way: the load moved
            last = lasts[-1]
            if self._wait_for_moved(first.mean, last.mean, rates, room=True):
                return None
            return self._reopen(first.mean, last.mean, "the last windows while trying", rates,
                                tried_before=first)
        ref = self.reference
        recent = rates[-self.max_windows:]
        tried = Measured.of(self.current, recent)
        if self._rechecking is not None and (gone := self._gone(tried)) is not None:
            return gone
        if streams(self.current) > streams(ref.setting) \
                and (ref.setting, self.current) not in self._fell_from \
                and self._fell_far(ref, tried, (tried,)):
            # more streams far below the reference: not the streams, a load that came;
            # unless this try fell from this reference before in this job, the search
            # since back where it was (a load that comes with each try is the try's own):
            # judged then as any try
            if self._wait_for_moved(ref.mean, tried.mean, rates, room=True):
                return None
            self._fell_from.add((ref.setting, self.current))
            return self._reopen(ref.mean, tried.mean, "", rates, said=(
                f"a try of more streams, {tried.label()}, fell from the reference's "
                f"{ref.label()} by more than the noise and {FELL_SHARE:.0%} "
                f"(the load moved)"))
        if len(recent) >= 2 * self.windows:  # a try left open long: did the load move?
            early = Measured.of(self.current, recent[:self.windows])
            late = Measured.of(self.current, recent[-self.windows:])
            if self.loads.apart(early, late, (early, late)):
                return self._reopen(early.mean, late.mean, "the rate while trying",
                                    tried_before=early)
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
        flow never ran at the setting it halves); these windows join no measurement
        (their setting was in no call throughout). Back at the reference after a refused
        try, the windows say whether a load came instead (`_fell_back`)."""
        if self._again:
            return self._fell_back(rates)
        ref = self.reference
        if self.holding or self._trying is None or ref is None \
                or self._came_from is not None or len(rates) < self.windows \
                or streams(self.current) >= streams(ref.setting):
            return None
        tried = Measured.of(self.current, rates[-self.max_windows:])
        verdict, why, figures = judge(ref, tried, min_gain=self.min_gain, z=self.z)
        verdict, why, figures = against_best(verdict, why, figures, ref, self._best(), tried,
                                             min_gain=self.min_gain, z=self.z)
        if verdict is not Verdict.REFUSED:
            return None
        self._left = None  # (the windows it judged carried both settings)
        return self._after(verdict, tried, f"while its calls settled, with more streams in "
                                           f"flight than it has: {why}", figures, saw=False)

    def _fell_back(self, rates: Sequence[float]) -> Change | None:
        """Back at the reference after a refused try of more streams, judged on `rates`,
        the full windows since the flow went back (before the reference's own count: the
        calls taken at the try still ending): when the last `windows` of them, with more
        streams in flight than the reference, already read more than `FELL_SHARE` below
        it and apart from it (the path's noise), a load came, as when a try of more
        streams falls that far (`step`), and the search reopens at once instead of after
        the reference's own windows. Those windows are the new load's start at the
        reference's setting (`_reopen`); the flow ran with more streams in them, so the
        setting itself would read no more, and a try of more streams judged against them
        is kept only on a gain still larger. In docs/BENCHMARKS.md 15.43's runs L3 and L5
        the load came in the last windows of a try of cc 16 refused within the noise;
        back at cc 8 the windows read 80-116 Mbit/s against the start's 157.8-158.8 from
        its third second, and the search reopened 14.2 s after the refusal, when cc 8's
        own three windows had counted."""
        ref, back = self.reference, self._back_from
        if ref is None or back is None or streams(back) <= streams(ref.setting) \
                or len(rates) < self.windows:
            return None
        now = Measured.of(self.current, rates[-self.windows:])
        if not self._fell_far(ref, now, ()):
            return None
        if self._wait_for_moved(ref.mean, now.mean, rates, room=True):
            return None
        self._again, self._left = False, None  # (its windows carried both settings)
        return self._reopen(ref.mean, now.mean, "", rates, said=(
            f"back at {ref.setting.label()} from {back.label()}, with more streams in "
            f"flight than it has, the flow read {now.mean:.1f} Mbit/s over "
            f"{now.count} windows, more than the noise and {FELL_SHARE:.0%} below its "
            f"{ref.label()} (the load moved)"))

    def _fell_far(self, ref: Measured, now: Measured, new: Sequence[Measured]) -> bool:
        """Whether `now`, measured with more streams than `ref`, fell more than
        `FELL_SHARE` below it and apart from it (`Loads.apart`; `new`: measurements the
        noise has not counted yet): not the streams, a load that came."""
        return now.mean < (1 - FELL_SHARE) * ref.mean and self.loads.apart(ref, now, new)

    def _judge(self, tried: Measured, *, wait: bool = False) -> Change | None:
        """The verdict on the try, or None while it is open; with `wait` (the try's last
        window left its first: the load may have moved in it) a verdict due waits for the
        next window, which tells (see the module)."""
        assert self._trying is not None
        verdict, why, figures = self._verdict(tried, self.max_windows)
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
        recheck, self._rechecking = self._rechecking, None
        gone = None
        if recheck is not None and verdict is Verdict.KEPT:  # (`_recheck`) the load went,
            hold = self.reference  # as when the rate rose at a hold
            gone = self._reopen(hold.mean, tried.mean, "", went=True, said=(
                f"rechecking {hold.setting.label()}: {why}: the load that came has gone "
                f"(the load moved)"))
            gone = Change(gone.setting, gone.reason, {**figures, **gone.figures})
        if saw:  # `tried` measured its setting (not so the windows `unsettled` judges),
            self.loads.saw(tried)  # at the load of now (a recheck kept: the new load's)
        elif verdict is Verdict.REFUSED:  # at most what those windows made
            self.loads.lost(tried)
        if gone is not None:
            return gone
        if recheck is not None:
            self._load_streams = recheck
            why = f"{why}: the load is still there"
        self._learn(verdict, self.reference.setting, tried.setting)
        if verdict is Verdict.KEPT:
            jump = axis == "cc" and up and self.reference.setting == self._skipped
            self.reference, self._ref_known = tried, False
            self._todo = went(self._todo, axis, up, self.axes)
            if jump:  # a jump kept: the halving it skipped, first (`_shared`)
                self._todo.insert(0, ("cc", False))
            return self._next(f"kept: {why}", figures, first=False)
        if saw and recheck is None and tried.count >= self.max_windows \
                and streams(tried.setting) < streams(self.reference.setting):
            self._refused_open = tried  # refused at the last look: judged again (`step`)
        if not first:  # the other way is tried only when the first was refused at once
            self._todo = [(a, u) for a, u in self._todo if a != axis]
        self._todo = turned(self._todo, axis, up, self.axes, self.halving)
        # back to the reference, measured again before the next try: a reference measured
        # high by chance would refuse every neighbour, and the path may have moved since
        self._again, self._trying, self._back_from = True, None, tried.setting
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
                    self._skipped = ref
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
            verdict, known_why = history_verdict(
                self.reference, self.known, moved, ref_known=self._ref_known,
                loads=self.loads, windows=self.windows, min_gain=self.min_gain, z=self.z,
                max_windows=self.max_windows, best=self._best())
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
                self._todo = turned(self._todo, axis, up, self.axes, self.halving)
                first = True
                continue
            if verdict is Verdict.KEPT:  # taken on the history's word, measured on arrival
                if passed:
                    why += "; " + "; ".join(passed)
                return self._arrive(self.known[moved], axis, up, f"{why}; {moved.label()} "
                                    f"kept from the history: {known_why}; measuring it",
                                    figures, ref_known=True)
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

    def _judged_again(self, said: str) -> Change | None:
        """Back at the reference after a try of fewer streams refused at the last look, on
        the point estimate (`_refused_open`), with the reference measured again and pooled:
        the try judged again against it (`_verdict`); kept, the flow goes to it and
        measures it on arrival, as a setting the history keeps. Else None. The first
        verdict read a reference of `windows` windows, the try `max_windows`: within the
        noise, a reference measured high by chance refuses fewer streams that would win
        against it measured longer (a jump's first windows read high: in all five runs of
        docs/BENCHMARKS.md 15.44-15.47 that made one, 163.3-177.3 Mbit/s against
        146.4-159.0 for the cells of cc 64 under the load; in 15.47's run W2 the halving
        the jump skipped, cc 32, read 167.7 against the jump's 177.3 and was refused at
        -5.4%, and cc 64 measured again read 150.6, 163.9 pooled). Not a recheck's try
        (`_recheck`): that asks whether the load went, and its refusal says it is there."""
        tried, self._refused_open = self._refused_open, None
        if tried is None or self.reference is None:
            return None
        verdict, why, figures = self._verdict(tried, self.max_windows)
        if verdict is not Verdict.KEPT:
            return None
        if self.too_few >= streams(tried.setting):  # its refusal's count, not too few after all
            self.too_few = 0
        axis = "cc" if tried.setting.cc != self.reference.setting.cc else "p"
        return self._arrive(tried, axis, False, f"{said}; {tried.setting.label()}, refused "
                            f"at the last look, judged again against it: {why}; measuring it",
                            figures, ref_known=False)

    def _arrive(self, kept: Measured, axis: str, up: bool, reason: str,
                figures: dict[str, float] | None, *, ref_known: bool) -> Change | None:
        """The flow to `kept`, a move along `axis` kept without a try of its own (on the
        history's word, or a refused try judged again), as the reference: it is measured
        on arrival (`_again`), and the search goes on from it (`went`)."""
        self.reference, self._ref_known = kept, ref_known
        self._todo = went(self._todo, axis, up, self.axes)
        self._again, self._trying, self._back_from = True, None, None
        return self._go(kept.setting, reason, figures)

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
        (N' / (N' + k)) / (N / (N + k)) of the reference (see the module). Not for a
        setting between a jump of cc and where it went from (`_skipped`: more cc, the same
        p): the jump measured none of them. A halving of p is judged by the model as
        before (in docs/BENCHMARKS.md 15.46's run W3, exempt too, p 1 at cc 64 was tried
        for 37 s after the skipped cc 32 was refused)."""
        k = self._load_streams
        skipped = self._skipped
        if k <= 0 or self.reference is None or (
                skipped is not None and moved.p == skipped.p and moved.cc > skipped.cc):
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

    def _short_of_time(self, *, extra_windows: int = 0) -> str:
        """Why a try cannot be judged before the data runs out, or "" (see the module): it
        needs what measuring the setting in effect took (less its `extra_windows` past
        the first `windows`, at a hold), and the windows it may add while its verdict
        stays open."""
        left_s, try_s = self._time
        if left_s is None or try_s is None:
            return ""
        try_s = max(try_s - extra_windows * WINDOW_S, 0.0)
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

    def _best(self) -> Measured | None:
        """The best rate measured at this load, by this flow or the path's history (each
        over `windows` windows or more): a try of fewer streams keeps within `min_gain`
        of it too (`against_best`)."""
        seen = [m for m in (*self.known.values(), *self.loads.now.values())
                if m.count >= self.windows]
        return max(seen, key=lambda m: m.mean, default=None)

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
            return self._recheck(rates)
        if base >= 3 * self.windows:  # a base of a few windows is itself noise
            self._drift_base = base
        self._drifts += 1
        if self._drifts < 2:
            return None
        if self._wait_for_moved(hold.mean, now, rates, room=True):
            return None
        return self._reopen(hold.mean, now, "the rate at", rates)

    def _recheck(self, rates: Sequence[float]) -> Change | None:
        """At a hold won back under a load (`_load_streams`), after `RECHECK_WINDOWS`
        windows: a try of half the cc (or the one axis), to see whether the load has gone
        (see the module), or nothing. The hold's windows are the reference; neither the
        load's weight nor what the flow measured under it refuses the try first (they are
        what it checks); the data left must still allow a verdict, on what measuring the
        hold's first `windows` windows took (its windows since are not a try's)."""
        if self._load_streams <= 0 or len(rates) < RECHECK_WINDOWS:
            return None
        axis = "cc" if "cc" in self.axes else self.axes[0]
        hold = Measured.of(self.current, rates)
        moved = neighbour(self.current, axis, False, self.limits)
        if moved is None:
            self._load_streams = 0.0  # nothing left to check
            return None
        if self._short_of_time(extra_windows=len(rates) - self.windows):
            return None
        self.holding, self.reference, self._ref_known = False, hold, False
        self._rechecking, self._load_streams = self._load_streams, 0.0
        self._trying, self._todo = (axis, False, True), []
        return self._go(moved, (
            f"held {hold.label()} for {len(rates)} windows since a load came: rechecking "
            f"whether it has gone; trying {axis} down"), {"hold_mbps": round(hold.mean, 3)})

    def _gone(self, tried: Measured) -> Change | None:
        """A recheck's try (`_recheck`) at a setting the flow measured under the load it
        checks (`Loads.now`: a jump's start, or the halving it skipped): when the try's
        windows read above that measurement and apart from it (`Loads.apart`, on the
        path's noise), the load has gone, as when a recheck is kept. The same setting
        measured twice tells on its first `windows` windows; judged against the hold, a
        setting of fewer streams needs the windows a gain within the noise takes (in
        docs/BENCHMARKS.md 15.46's runs W and W2 the recheck of cc 32 against cc 64's
        windows spread 13% took 8 windows, 34-36 s from the change)."""
        under = self.loads.now.get(tried.setting)
        if under is None or under.count < self.windows or tried.mean <= under.mean \
                or not self.loads.apart(under, tried, (tried,)):
            return None
        why = (f"{tried.label()} ({tried.count} windows) against its {under.label()} "
               f"under the load: {tried.mean / under.mean - 1:+.1%}, apart by more than "
               f"the noise")
        return self._after(Verdict.KEPT, tried, why, {
            "under_mbps": round(under.mean, 3), "tried_mbps": round(tried.mean, 3),
            "windows": float(tried.count)})

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
            self.known = earlier.history
            self.loads.again(earlier)
            why += (f"; as at an earlier load of this job "
                    f"({earlier.measured[self.current].label()}): what the flow measured "
                    f"then counts as the path's history")
        self.loads.saw(measured)
        return self._next(why)

    def _reopen(self, before_mbps: float, now_mbps: float, what: str,
                rates: Sequence[float] = (), *, said: str = "",
                seen_at: Setting | None = None, went: bool = False,
                tried_before: Measured | None = None) -> Change:
        """The search again for the new load (see the module), from where `_reopen_at`
        says (when the rate fell, the setting of the most streams the flow was at; when
        it rose, where the flow was before the load came; else the prior); without the
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
        elsewhere weighs it on `now_mbps`, but for a window told late. `went`: a recheck
        (`_recheck`) found the load gone, whichever way the rate read. `tried_before`: the
        first windows of a try the load moved under, measured at the load before
        (`_kept_before`)."""
        figures = {"hold_mbps": round(before_mbps, 3), "now_mbps": round(now_mbps, 3)}
        fell = now_mbps < before_mbps and not went
        if fell and self._before_load is None and self.reference is not None:
            self._before_load = self._kept_before(tried_before)
        if tried_before is not None:  # measured at the load before, filed with it
            self.loads.saw(tried_before)
        start, whence = self._reopen_at(fell=fell)
        if not fell:
            self._before_load = None
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
        if fell:  # weighed where its start is measured (`_start`), or
            self._fell = (seen, before_mbps)  # when that is elsewhere, on what fell there
            if start != seen and seen_at is None:
                self._load_streams = load_streams(streams(seen), before_mbps, now_mbps)
        if new is not None and self.loads.steady(new, floor=NOISE_PRIOR):
            first = self._start(new, f"{why}; its last {new.count} windows measured the start")
            if first is not None:
                return Change(first.setting, first.reason, {**figures, **first.figures})
        return Change(start, why, figures)

    def _kept_before(self, tried: Measured | None) -> Setting:
        """Where a load that came found the flow (`_before_load`): the reference, or the
        try in flight when it came, when the try's windows before it (`tried`) win as at a
        try's last look (`settled`; the try cannot go on, the load moved). In
        docs/BENCHMARKS.md 15.45's runs W4 and W5 the load came during the try of cc 16
        from cc 8 (its first windows 193.3 and 179.3 Mbit/s against 169.2 and 162.3); with
        the reference as where the flow was, the search went back to cc 8 when the load
        went and climbed to cc 16 again."""
        assert self.reference is not None
        ref = self.reference
        if tried is None or tried.count < self.windows or tried.setting == ref.setting:
            return ref.setting
        verdict, _, _ = self._verdict(tried, tried.count)
        return tried.setting if verdict is Verdict.KEPT else ref.setting

    def _verdict(self, tried: Measured, max_windows: int
                 ) -> tuple[Verdict, str, dict[str, float]]:
        """`tried` against the reference and the best rate at this load (`settled`,
        `against_best`), decided on the point estimate from `max_windows` windows."""
        assert self.reference is not None
        verdict, why, figures = settled(self.reference, tried, min_gain=self.min_gain,
                                        z=self.z, max_windows=max_windows)
        return against_best(verdict, why, figures, self.reference, self._best(), tried,
                            min_gain=self.min_gain, z=self.z, max_windows=max_windows)

    def _reopen_at(self, *, fell: bool) -> tuple[Setting, str]:
        """Where `_reopen` starts the search again, and how it says so: when the rate fell,
        the setting of the most streams the flow was at (the reference, or a try of more
        streams) if more than the prior's, else the prior; when it rose (or a recheck
        found the load gone), the reference the first fall since the last rise found the
        flow at (`_before_load`), else the prior."""
        held = max([self.current, *([self.reference.setting] if self.reference else [])],
                   key=streams)
        if fell and streams(held) > streams(self.prior):
            return held, f"{held.label()}, more streams than the prior's"
        if not fell and self._before_load is not None:
            return self._before_load, (f"{self._before_load.label()}, where the flow was "
                                       f"before the load came")
        return self.prior, "the prior"
