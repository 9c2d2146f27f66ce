"""An online controller at work on a running engine: the optimizer `climb`.

A `FlowTuner` steps a controller (`stork.tuning.online.Climb`) with the engine's measured
windows while the engine runs, on a thread of its own, and applies what it answers with
`Engine.set`: nothing stops, nothing is sent again. A window counts for a setting only once
every call in flight was taken at it (a change of `p` or `pp` applies to each worker's next
call; a lower `cc` retires workers as their calls end), every call in flight then has told
its first bytes, and `RAMP_S` after that (new connections start slow); at the flow's
first setting, where every connection is new, `COLD_S` (one window) more. On wan80 a fixed
cell's flow rose from 232 to 277 Mbit/s over its first 8 s (docs/BENCHMARKS.md 15.42's
cells), and in 15.43's load runs on wan40 the start's first window read 132.6-154.6 Mbit/s
where its next two read 155.7-183.3: the start measured 152.7-167.9 with a spread of 7.7 to
23.8, which made the path's noise hide a load that came during the first try, and a
doubling look 10-25% better where the fixed cells differ by 2%. A call's first report
is spread back to the end of its set-up as the engine knows it (half a second until a call
has told its own), and a third-party call reports only at its server's markers, every 5 s:
counted before them, the windows of a job's start held the set-ups of all its calls at
once, each a share of the same first reports (on wan80 a 4 GiB file's start read cc 16
p 4 at 241.5 ± 2.6 Mbit/s, where the job before had held it at 290.0 ± 11.6 over 46
windows, and a doubling was kept at +23.0% on that; docs/BENCHMARKS.md 15.27, run K2).
Calls taken after that moment (a slot's next call, set up while its last one ends) are not
waited for: with many workers one of them would be setting up at almost any moment.
A change that moves nothing (the hold, said once where the last try left the flow; a
search that starts again where the flow is) waits for none of this: its windows count at
once (in docs/BENCHMARKS.md 15.43's runs the hold's first window came 8 to 16 s after it,
which a load that left had to wait out before a recheck).
Once a worker finds nothing left to take, the tail of the flow says nothing of a setting
and the tuner stops stepping. Before a try of fewer streams has its own windows, the
windows since it was set (the calls taken at the reference ending one by one) may already
refuse it (`Climb.unsettled`); its change then carries no `settled_after_s`. The windows
of the setting a change left that become final only after it (the calls tell them late)
go to the controller as they come (`Climb.late`): a load that came while a verdict was
due shows there first.

A change of `p` waits for the calls in flight to end, and a range or a large file is
taken as a piece of `SEARCH_PIECE_S` (8 s) of a worker's rate while the controller searches
(`Engine.cut_s`, where the engine cuts items at all): on wan80 a try of fewer streams waited
about 30 s for the 64 MiB ranges in flight, and was judged 45-48 s after it began
(docs/BENCHMARKS.md 15.28, run N2). Not shorter: a third-party call tells its bytes at its
server's markers, every 5 s, and calls of 2-6 s (16 MiB ranges on wan40) made windows far
noisier (15.25, run A).

The engine's list calls keep their length (`call_s`, 4 s) while the controller searches,
for files of every size class. Shorter calls cost a flow of fewer workers more, so a try of
fewer streams on them read low: on wan80 a flow of small files at cc 32 ran at 137-215
Mbit/s from its 6th to its 13th second on 2-s calls, where the preset's 4-s calls at the
same cc ran at 178-277 (15.34, run W80), and the climb's measurement of cc 32 read 181.9
Mbit/s against 237.5 on 4-s calls (15.36's run W80b against 15.37's W80), so that cc 64
looked 48.7% better where the fixed cells differ by 2-7%. Files of the other classes (p
searched too) were searched on 2-s calls until 2026-11-30, for the wait of a change of `p`
(on wan40 the measurement at p 3 after a refused try of p 1 came 24-25 s after the change
back, most of it the wait for the calls taken at p 1: 15.28, runs M1-M2); under wan40's
load the halving a jump skipped, cc 32, then read 0.77-0.81 of cc 64's windows in a try
where the same runs' cells (4-s calls) put it at 0.99-1.01 of cc 64 (15.46's W3, 15.47's
W). A likely cause: a call that ends before its server's first marker tells nothing until
its end, so its slot cannot set the next call up while it ends (`Engine._plan_hand_over`),
and each such call costs the slot a set-up (0.7-0.9 s at 40 ms) with nothing moving.

A flow that shares the path with other flows of its own job (a dataset's chunks of other
size classes, `shared`; not a chunk that ends in its first round of calls: `shares_path`)
holds a setting given for it (`hold`: its class's preset) and is not
stepped until it runs alone: each window it would judge moves with what the other chunks do
and when they end (in 15.15 and 15.18 of docs/BENCHMARKS.md three controllers at once on
the mix made 0.67-1.01 of the preset, and the end of the small files' chunk read as a change
of load). Once alone, the flow goes to the controller's prior and the climb starts there.
One of them may *lead* meanwhile (`Lead`: a dataset's chunk of the most bytes): its setting
is tuned on the job's total, its own windows with the bytes the others moved in each
(`with_company`), by a controller of the same rules started at the setting in effect with
no history (`joint_climb`: the transfer log's rows are of a flow's own rate, not of a
job's total), while the others hold. What the job gains is the total: a lead that takes
bytes from the others gains nothing. When the flows it counts change (one ended), a new
controller starts at the setting the last one judged (a try it had not judged is left),
measuring the new total; the windows of a total go to no transfer log row. Held without
a lead, the mix on wan40 made 0.98-1.01 of the preset runs and no chunk changed its
setting (15.19). With one, on that mix of 33 s the first measurement of the total is
final 16-20 s in (the large files' third-party calls tell their bytes every 5 s), as the
small files' chunk ends; on a mix twice as long the total read the link's data rate,
where no doubling has room (docs/BENCHMARKS.md 15.41).

Each change is kept on the job's ad (`optimizer_<what>`: the prior and why, every change
with its reason and figures, the setting held at the end) as it is made, so `stork_q -l`
shows a running job's tuning. The transfer log gets what the controller measured at each
setting it settled at (`stretches`: its windows only, no change-over, slow start or tail;
`Flows._log_flow`, `FileRun`), and each try refused while its calls settled, on the windows
that refused it (at most what the try makes: `_unsettled`): the next job on the path starts
from the best of them (`prior_from_history`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from stork.config import ONLINE_OPTIMIZERS, Settings
from stork.engine import Engine
from stork.engine.flow import Flow, Stretch, Window
from stork.job import JobSpec
from stork.transfer.options import MAX_CONCURRENCY
from stork.transfer.worker import Setting
from stork.tuning.base import Limits
from stork.urls import parse_url

if TYPE_CHECKING:  # the optimizers load scikit-learn: only jobs that are tuned need them
    from stork.dataset.chunks import Chunk, SizeClass
    from stork.translog import TransferRecord
    from stork.tuning.base import DatasetDescription
    from stork.tuning.online import Change, Climb

log = logging.getLogger(__name__)

HISTORY_ROWS = 100_000  # newest transfer log rows an optimizer learns from
MAX_TUNED_STREAMS = 32  # limits of an optimizer's choice: streams per file,
MAX_TUNED_PIPELINING = 32  # pipelining depth,
MAX_TUNED_TOTAL_STREAMS = 256  # and cc * p
STEP_S = 0.5  # how often the controller looks at the flow
RAMP_S = 1.0  # after a setting is in effect in every call, its first windows are slow start
COLD_S = 2.0  # and at a flow's first setting (every connection new) one window more
STRAGGLER_CC = 8  # from this cc a measurement again counts with one call of the try left
SEARCH_PIECE_S = 8.0  # a piece of a range or large file while the controller searches (see
# the module)
PRIOR_SOURCES = ((True, True), (False, True), (True, False), (False, False))  # where a
# climb's prior comes from, first first: (this path, files of about the job's size only)
CHANGES_KEPT = 40  # changes listed on the job's ad (the count is of all of them)


def tuning_limits() -> Limits:
    """What an optimizer may choose for a chunk (or a file's ranges)."""
    return Limits(max_cc=MAX_CONCURRENCY, max_p=MAX_TUNED_STREAMS, max_pp=MAX_TUNED_PIPELINING,
                  max_streams=MAX_TUNED_TOTAL_STREAMS)


def optimizer_of(spec: JobSpec, settings: Settings) -> str | None:
    """The optimizer a job asks for: the one its `optimization` names, else, for
    `optimization = "YES"`, EOS_OPTIMIZER: for a dataset always; for a single file without a
    stream count of its own when EOS_OPTIMIZER tunes a running flow and STORK_ENGINE is flow
    (its ranges are tuned while they move). None: a single file's YES is the EOS's (its
    samples, then its streams), or the job asks for no optimizer."""
    if not spec.optimization:
        return None
    if spec.optimizer or spec.is_dataset:
        return spec.optimizer or settings.eos_optimizer
    online = settings.eos_optimizer in ONLINE_OPTIMIZERS and settings.engine == "flow"
    return settings.eos_optimizer if online and spec.options.streams is None else None


def tunes_online(spec: JobSpec, settings: Settings) -> bool:
    """Whether a job's flow is tuned while it runs: the optimizer it asks for
    (`optimizer_of`) is an online one and it runs on the engine."""
    return optimizer_of(spec, settings) in ONLINE_OPTIMIZERS and settings.engine == "flow"


def shortest_tuned_s(budget: float) -> float:
    """The shortest predicted transfer of a single file worth tuning while it moves: one
    judged try (RAMP_S, then WINDOWS windows) must fit in `budget` (EOS_SAMPLING_BUDGET) of
    it, as two EOS samples must; a shorter file runs untouched (`untuned_setting`), as the
    EOS answers one without sampling (`FileRun`). 0 with no budget: every file is tuned."""
    from stork.tuning.verdicts import WINDOW_S, WINDOWS

    return (RAMP_S + WINDOWS * WINDOW_S) / budget if budget > 0 else 0.0


def untuned_setting(climb: Climb, preset: Setting) -> tuple[Setting, str]:
    """Where a flow too short to be tuned (`shortest_tuned_s`) runs to its end, with why:
    the setting of `climb`'s history of the path that `prior_from_history` chooses (the
    fewest streams within 5% of the best measured), or, where the link's rate is known
    (EOS_LINK_IS_TRUE) and leaves room for it to be kept, the doubling of it that the
    history has not measured, so the path's next jobs know whether more streams pay:
    without it a path whose files are all too short to tune holds its first setting for
    good (on wan80 each 1 GiB job held the preset's 32 streams, 0.87-0.96 of the best cell,
    where 64 and 128 made 0.98-1.01: docs/BENCHMARKS.md 15.56). Not where the link's rate
    is a guess: replayed with history on the parallelism curves of ../shared/data, whose
    links' rates are not known to be true, doublings started that way took loni's mean
    share from 0.893 to 0.849 (15.57). Never the halving a tuned job may start at: an
    untuned flow has no verdict to go back on, and a halving costs where a doubling pays
    (on the grids of ../shared/data a halving made 0.851 of its cell on average, a doubling
    1.260: 15.35). The next job's prior judges the doubling (kept only past 5%). `preset`
    where the path has no row. The EOS answers a file too short to sample from its history
    alike."""
    from stork.tuning.path_history import prior_from_history

    axes = climb.axes if climb.ceiling_mbps is not None else ()
    setting, why = prior_from_history(climb.known, preset, limits=climb.limits, axes=axes,
                                      alike_axes=climb.alike_axes,
                                      ceiling_mbps=climb.ceiling_mbps, halve=False)
    return Setting(min(setting.cc, climb.limits.max_cc), setting.p, setting.pp), why


def shares_path(chunk: Chunk, link_mbps: float) -> bool:
    """Whether `chunk`, moving beside a tuned flow of its job, shares the path with it (the
    flow then holds its preset: see the module). A chunk whose files all go in its first
    round of calls (no more of them than its cc) and hold less than one controller window
    at `link_mbps` ends about when its calls have set up: it can move one window, not the
    windows a setting is judged on. Held for such a chunk (a 240-byte manifest beside 20
    files of 64 MiB), a chunk at its preset cc 8 went to a prior of cc 2 a second in, and
    the prior took effect only as the 64 MiB calls taken at cc 8 ended: its start was
    measured 37 s in (docs/BENCHMARKS.md 15.25)."""
    from stork.tuning.verdicts import WINDOW_S

    window_bytes = WINDOW_S * link_mbps * 1e6 / 8
    return len(chunk.indexes) > chunk.params.cc or chunk.total_bytes >= window_bytes


def climb_for(history: Sequence[TransferRecord], preset: Setting, *, src_url: str,
              dest_url: str, cls: SizeClass, bdp_bytes: float, load: int,
              items: int, name: str = "climb", dataset: DatasetDescription | None = None,
              settings: Settings | None = None, limits: Limits | None = None
              ) -> tuple[Climb, str]:
    """The controller `name` (`stork.tuning.CONTROLLERS`) of a flow of `items` items of
    size class `cls` on the path between the hosts of `src_url` and `dest_url`, and why its
    prior: "climb" starts from the transfer log's measurements (`history`, newest first)
    pooled per setting, the first there are of `PRIOR_SOURCES`: this path's files of about
    the job's size, other paths' (on the grids of ../shared/data the replay's mean share
    rose from 0.782 to 0.827 with them; docs/BENCHMARKS.md 15.30), this path's size class,
    other paths' size class; else `preset`. The climb passes neighbours over on this path's
    measurements alone; "harp-climb" and "asm-climb" from HARP's or
    ASM's choice from the log alone for `dataset` (ASM with the model its scheduled analysis
    kept in the state directory). STORK_LINK_MBPS is the climb's ceiling when the operator
    says it is the path's true rate (EOS_LINK_IS_TRUE; a guessed rate must not stop a
    climb), less its packets' headers at STORK_LINK_MTU (`payload_mbps`). Small files
    climb on cc alone (more streams per small file buy nothing), unless where they may
    start (the preset, the rows of the prior's history) has more than one stream per
    file: then on p too, as the others (a chunk's class follows the round trip measured at
    its attempt's start, so files near the bandwidth-delay product are small in one job
    and medium in the next, and take the prior the medium ones measured: on lan10 and
    `short` such small chunks held p 2 and p 4 to their end, docs/BENCHMARKS.md 15.36).
    The others climb on cc, then p, large files with the two axes alike (a stream count
    lost along one is not tried along the other: `Climb`). `limits`: what it may choose
    (default `tuning_limits`; a replay passes the levels its table measured), cc at
    most `items` either way."""
    from stork.dataset.chunks import SizeClass
    from stork.tuning.online import Climb
    from stork.tuning.path_history import measured_from_history, prior_from_history
    from stork.tuning.verdicts import Measured, payload_mbps

    limits = (limits or tuning_limits()).at_most_cc(items)

    def axes_from(starts: Iterable[Setting]) -> tuple[str, ...]:
        small = cls is SizeClass.SMALL and all(s.p == 1 for s in starts)
        return ("cc",) if small else ("cc", "p")

    src_host, dest_host = (parse_url(u).host or "localhost" for u in (src_url, dest_url))
    size = dataset.avg_file_bytes if dataset else None

    @functools.cache  # (the path's own rows are both `known` and one of PRIOR_SOURCES)
    def measured(path: bool, near_only: bool) -> dict[Setting, Measured]:
        return measured_from_history(history, src_host=src_host if path else None,
                                     dest_host=dest_host if path else None, cls=cls,
                                     bdp_bytes=bdp_bytes, load=load, limits=limits,
                                     file_bytes=size, near_only=near_only)

    known = measured(True, False)
    ceiling = payload_mbps(settings.link_mbps, settings.link_mtu) \
        if settings is not None and settings.eos_link_is_true else None
    by = None
    if name != Climb.name:  # another optimizer's prior: only then its numerics (and
        from stork.tuning import CONTROLLERS  # scikit-learn, 0.8 s to load) are loaded

        by = CONTROLLERS.get(name)
    if by is not None and dataset is not None and settings is not None:
        from stork.server.tuning import optimizer_named
        from stork.tuning.path_history import prior_from_optimizer

        prior, why = prior_from_optimizer(optimizer_named(by, settings)[0],
                                          list(reversed(history)), dataset, limits)
        axes = axes_from([prior])
    else:
        rows, on_path = next(((m, path) for path, near_only in PRIOR_SOURCES
                              if (m := measured(path, near_only))), ({}, True))
        axes = axes_from([preset, *rows])
        if on_path:
            prior, why = prior_from_history(rows, preset, limits=limits, axes=axes,
                                            alike_axes=cls is SizeClass.LARGE,
                                            ceiling_mbps=ceiling)
        else:
            prior, why = prior_from_history(rows, preset, limits=limits,
                                            whose="other paths' history")
            why = "no transfer of files of about this size on this path in the log: " + why
    prior = Setting(min(prior.cc, limits.max_cc), prior.p, prior.pp)
    return Climb(prior, limits, axes=axes, known=known, ceiling_mbps=ceiling, name=name,
                 alike_axes=cls is SizeClass.LARGE), why


def blocks(windows: list[Window]) -> list[Window]:
    """The flow's windows joined into the controller's (`WINDOW_S`, whole ones only)."""
    from stork.tuning.verdicts import WINDOW_S

    out: list[Window] = []
    group: list[Window] = []
    for window in windows:
        group.append(window)
        seconds = sum(w.seconds for w in group)
        if seconds >= WINDOW_S * (1 - 1e-9):
            out.append(Window(group[0].start_s, seconds, sum(w.bytes for w in group),
                              group[0].setting, group[-1].load))
            group = []
    return out


def span(windows: list[Window]) -> Stretch | None:
    """Full windows at one setting as a stretch: its spread the stdev of the controller's
    windows (`blocks`), which it counts (None: not one whole)."""
    joined = blocks(windows)
    if not joined:
        return None
    seconds = sum(w.seconds for w in joined)
    nbytes = sum(w.bytes for w in joined)
    rates = [w.rate_mbps for w in joined]
    return Stretch(joined[0].setting, joined[-1].load, joined[0].start_s, seconds, nbytes,
                   len(joined), nbytes * 8 / 1e6 / seconds if seconds > 0 else 0.0,
                   statistics.stdev(rates) if len(rates) > 1 else 0.0)


@dataclass(frozen=True)
class Lead:
    """How a flow that shares its job's path may lead it (see the module): whether it
    leads now, and the other flows of its job on the path, whose bytes count with its own
    while it does."""

    leads: Callable[[], bool]
    company: Callable[[], Sequence[Flow]]


def joint_climb(own: Climb, at: Setting) -> Climb:
    """The controller of a flow that leads its job's shared path: `own`'s rules, axes,
    limits and ceiling (the link's rate bounds the job's total too), started at `at`
    with no history (see the module). `at` is the setting in effect, even with a cc
    above the limits' (a chunk's hold may have more than its files): the slots beyond
    the files take pieces of the last ones (`Engine`'s straggler cuts), so a lead
    that started at the limits' cc would change the flow before it measured anything
    (on the wan40 mix, a lead started at cc 5 instead of its hold's 8 over 5 files
    made 0.99 and 0.95 of the preset runs in two runs, at cc 8 1.00 in one: no clear
    loss, docs/BENCHMARKS.md 15.41)."""
    from stork.tuning.online import Climb

    return Climb(at, own.limits, axes=own.axes, ceiling_mbps=own.ceiling_mbps,
                 name=own.name, alike_axes=own.alike_axes)


def with_company(own: list[Window], company: Sequence[Flow]) -> list[Window]:
    """`own` (a flow's whole windows, oldest first), each with the bytes the flows of
    `company` moved in its span (their final windows, pro rata of the overlap); only the
    windows their final windows all reach (a window later than that is not whole yet)."""
    if not own or not company:
        return own
    start = own[0].start_s
    theirs = [flow.windows(start - flow.window_s) for flow in company]
    reach = min((ws[-1].start_s + ws[-1].seconds if ws else -math.inf) for ws in theirs)
    moved = [_moved_by(ws) for ws in theirs]
    out = []
    for window in own:
        begin, end = window.start_s, window.start_s + window.seconds
        if end > reach + 1e-9:
            break
        extra = sum(before(end) - before(begin) for before in moved)
        out.append(replace(window, bytes=window.bytes + extra))
    return out


def _moved_by(windows: list[Window]) -> Callable[[float], float]:
    """The bytes a flow's `windows` (one after another, oldest first) moved before a
    time, pro rata inside the window that holds it."""
    starts = [w.start_s for w in windows]
    before = list(itertools.accumulate((w.bytes for w in windows), initial=0.0))

    def moved(t: float) -> float:
        i = bisect.bisect_right(starts, t) - 1
        if i < 0:
            return 0.0
        w = windows[i]
        return before[i] + w.bytes * (min(1.0, (t - w.start_s) / w.seconds)
                                      if w.seconds > 0 else 1.0)
    return moved


class FlowTuner:
    def __init__(self, engine: Engine, climb: Climb, *, what: str, prior_reason: str,
                 write_result: Callable[[dict[str, Any]], None],
                 shared: Callable[[], bool] | None = None, hold: Setting | None = None,
                 lead: Lead | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`shared`: whether other flows of the job share the path now; while they do the
        engine runs at `hold`, unless the flow leads (`lead`; see the module). The engine
        is set to where the flow starts (`start_setting`)."""
        if shared is not None and hold is None:
            raise ValueError("a flow that may share its path needs a setting to hold")
        self.engine = engine
        self.climb = climb  # the controller stepped: `own`, or while the flow leads a joint one
        self.own = climb  # the flow's own controller (alone on the path)
        self._lead = lead
        self._company: tuple[int, ...] = ()  # the flows a joint controller counts (`_leads`)
        self.key = f"optimizer_{what}"
        self.clock = clock
        self._write_result = write_result
        self._started = clock()
        self._set_at = self._started  # when the setting in effect was set
        self._measure_from: float | None = None  # when the current setting's windows count
        self._settled_at: float | None = None  # when every call ran at it (engine's clock)
        self._took: dict[str, float] = {}  # how long settling it took (`_measure_anew`)
        self._counted: list[Window] = []  # the windows that count at the current setting
        self._logged = 0  # the windows the daemon's log has said (DEBUG)
        self._left: tuple[Setting, float, float, int] | None = None  # (`_apply`)
        self._late_seen = 0  # the windows told late that the controller has read
        self.spans: list[Stretch] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes: list[dict[str, Any]] = []
        self.count = 0
        self._shared = shared
        self._hold = hold
        self._waiting = shared is not None and shared()
        self._info: dict[str, Any] = {"optimizer": climb.name,
                                      "prior": climb.prior.label(),
                                      "prior_reason": prior_reason,
                                      "start": self.start_setting().label()}
        if engine.setting != self.start_setting():  # (an engine not started yet)
            engine.set(self.start_setting())
        self._size_calls()

    def start_setting(self) -> Setting:
        """The setting the engine starts at: the hold while the path is shared, else the
        controller's prior."""
        if self._waiting:
            assert self._hold is not None
            return self._hold
        return self.climb.prior

    def start(self) -> FlowTuner:
        self._write()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"tuner-{self.key}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._close_span()
        self._write()

    def _close_span(self) -> None:
        """The windows that counted at the setting now left, as one stretch (not a job's
        total: the flow's own rate is what the transfer log holds)."""
        if self._counted and self.climb is self.own \
                and (whole := span(self._counted)) is not None:
            self.spans.append(whole)
        self._counted = []

    def stretches(self) -> list[Stretch]:
        """What the controller measured: one stretch per setting it settled at, its windows
        only (no change-over, no slow start, no tail), and per try refused before it
        settled, for the transfer log."""
        return list(self.spans)

    def _loop(self) -> None:
        while not self._stop.wait(STEP_S):
            try:
                self.tick()
            except Exception:  # a tuner's failure never stops the transfer
                log.exception("%s: the controller failed; the flow keeps its setting",
                              self.key)
                self._info["failure"] = "the controller failed (see the daemon's log)"
                return

    def tick(self) -> Change | None:
        """One look at the flow: the controller's step on the windows that count."""
        now = self.clock()
        self.engine.tick(now)
        if not self.engine.left() and self.engine.workers() < self.engine.setting.cc:
            return None  # the tail (a worker found nothing to take): nothing more to tune
        if self._waiting and not self._alone(now) and not self._leads(now):
            return None
        current = self.climb.current
        if (late := self._late()) is not None:
            return self._apply(now, late)
        if self._measure_from is None:
            if not self._settled():
                return self._apply(now, self._unsettled())
            if self._settled_at is None:
                self._settled_at = self.engine.clock()
                self._took["settled_after_s"] = round(now - self._set_at, 1)
            if self.engine.unreported(self._settled_at):
                # a call still in its set-up, or before its first marker
                return self._apply(now, self._unsettled())
            cold = COLD_S if self._set_at == self._started else 0.0  # (see the module)
            self._measure_from = now + RAMP_S + cold
            self._took["told_after_s"] = round(now - self._set_at, 1)
        own = self._own_windows(current, self._measure_from)
        self._counted = self._joined(own)
        rates = [b.rate_mbps for b in blocks(self._counted)]
        if rates and len(rates) != self._logged:  # the windows as the controller sees them
            self._logged = len(rates)  # (a late marker may still move the last ones)
            log.debug("%s: %s at %.1f s: %s Mbit/s", self.key, current.label(),
                      now - self._started, " ".join(f"{r:.1f}" for r in rates[-12:]))
        left_s = self._left_s([b.rate_mbps for b in blocks(own)])
        change = self.climb.step(rates, left_s=left_s, try_s=now - self._set_at)
        left = (current, self._measure_from, self.engine.clock(), len(rates)) \
            if change is not None and change.setting != current else None
        if change is None and len(rates) < self.climb.windows:
            change = self._unsettled()
        return self._apply(now, change, left)

    def _full_windows(self, setting: Setting, since: float,
                      until: float = math.inf) -> list[Window]:
        """The windows the controller stepped reads (`_joined`) at `setting` from
        `since`, begun before `until`."""
        return self._joined(self._own_windows(setting, since, until))

    def _own_windows(self, setting: Setting, since: float,
                     until: float = math.inf) -> list[Window]:
        """The flow's whole windows at `setting` from `since`, begun before `until`."""
        full = self.engine.flow.window_s * (1 - 1e-9)
        return [w for w in self.engine.flow.windows(since) if w.setting == setting
                and w.seconds >= full and w.start_s < until]

    def _joined(self, own: list[Window]) -> list[Window]:
        """`own` as the controller stepped reads them: with the bytes of the flows it
        leads beside (`with_company`) while a joint controller is stepped."""
        if self.climb is self.own or self._lead is None:
            return own
        return with_company(own, self._lead.company())

    def _late(self) -> Change | None:
        """The windows of the setting the flow left at the last change the controller's
        step answered, told after that change (`Climb.late`), when one more is final."""
        if self._left is None:
            return None
        setting, since, until, seen = self._left
        told = blocks(self._full_windows(setting, since, until))[seen:]
        if len(told) <= self._late_seen:
            return None
        self._late_seen = len(told)
        rates = [b.rate_mbps for b in told]
        log.debug("%s: %s told late: %s Mbit/s", self.key, setting.label(),
                  " ".join(f"{r:.1f}" for r in rates))
        return self.climb.late(rates)

    def _unsettled(self) -> Change | None:
        """A try of fewer streams refused on the windows since it was set, before its own
        count (`Climb.unsettled`: the calls taken at the reference still ending). Those
        windows, refused, go to the transfer log as the try's stretch (`_close_span`):
        what it makes at most, so the path's next job neither starts at it nor tries it
        without cause (`prior_from_history`, `history_verdict`); on lossy20 a job started
        at the p 1 its last job had refused so and lost 9.4% over 15 s again
        (docs/BENCHMARKS.md 15.50)."""
        current, ref = self.climb.current, self.climb.reference
        since = self._full_windows(current, self._set_at)
        change = self.climb.unsettled([b.rate_mbps for b in blocks(since)])
        # (not a fall seen back at the reference: `Climb._fell_back`)
        if change is not None and ref is not None \
                and current not in (ref.setting, change.setting):
            self._counted = since
        return change

    def _apply(self, now: float, change: Change | None,
               left: tuple[Setting, float, float, int] | None = None) -> Change | None:
        """`change` (when the controller answered one) set on the engine and recorded;
        `left`: the setting it leaves, from when its windows counted, until when, and how
        many of them the controller read (`_late`)."""
        self._size_calls()
        if change is None:
            return None
        self._close_span()
        # a change that moves nothing (the hold, said once; a search that starts again
        # where the flow is) needs no wait: every call in flight runs at it and told
        same = change.setting == self.engine.setting and self._measure_from is not None
        self.engine.set(change.setting)
        took = {**self._took, "judged_after_s": round(now - self._set_at, 1)}
        self._measure_anew(now)
        if same:
            self._settled_at, self._measure_from = self.engine.clock(), now
            self._took = {"settled_after_s": 0.0, "told_after_s": 0.0}
        self._left, self._late_seen = left, 0
        self._record(now, change.setting, change.reason, {**change.figures, **took})
        self._write()
        return change

    def _measure_anew(self, now: float) -> None:
        """A setting set at `now`: its windows count once it settles (see the module).
        How long that took is said with the next change: seconds from `now` until every
        call in flight ran at it, until they had all told their first bytes, and until
        the verdict."""
        self._set_at, self._measure_from, self._settled_at = now, None, None
        self._took, self._logged = {}, 0

    def _size_calls(self) -> None:
        """The engine's items cut short while the controller searches (see the module)."""
        searching = (not self._waiting or self.climb is not self.own) \
            and not self.climb.holding
        self.engine.cut_s = SEARCH_PIECE_S if searching else None

    def _alone(self, now: float) -> bool:
        """Whether the flow runs alone on its job's path; the moment it first does, it goes
        from the hold to the controller's setting, and its windows count from then. Alone
        later than one judged try into its job (`RAMP_S` and `WINDOWS` windows), it does
        not start at a halving of the history's setting (`Climb.unmoved`): such a start
        is a try made at a job's start, and late in a job it is the flow's last seconds
        that pay for it (the lossy20 mix, docs/BENCHMARKS.md 15.52: -21.4% and -42.1%,
        alone 47-53 s into jobs of 64-71 s)."""
        assert self._shared is not None and self._hold is not None
        if self._shared():
            if self.climb is self.own and self.engine.setting != self._hold:
                self.engine.set(self._hold)  # (a flow that leads is set by `_leads`)
            return False
        from stork.tuning.verdicts import WINDOW_S, WINDOWS, streams

        self._waiting = False
        self._counted, self.climb = [], self.own  # (a joint controller's windows: no row)
        self._measure_anew(now)
        self._info["alone_at_s"] = round(now - self._started, 1)
        late = now - self._started >= RAMP_S + WINDOWS * WINDOW_S
        moved = self.climb.unmoved() if late else None
        current, was = self.climb.current, self.engine.setting
        if was != current or moved is not None:
            self.engine.set(current)
            move = "halving" if moved is not None and streams(moved) < streams(current) \
                else "doubling"
            instead = "" if moved is None else (
                f", the setting the path's history measured, not its {move} "
                f"{moved.label()} (a try for a job's start; this flow is "
                f"{now - self._started:.0f} s into its job)")
            self._record(now, current, f"alone on the path (the job's other chunks ended): "
                                       f"from {was.label()} to {current.label()}{instead}",
                         {})
        self._write()
        return True

    def _leads(self, now: float) -> bool:
        """Whether the flow, sharing the path, leads it now (see the module): the first
        look it does, a joint controller (`joint_climb`) starts at the setting in effect;
        each look where the flows it counts are not those of the last, a new one starts
        at the setting the last one judged (its reference: a try it had not judged yet is
        left), measured anew. Not leading (any more), the flow holds."""
        assert self._hold is not None
        lead = self._lead
        if lead is None or not lead.leads():
            if self.climb is not self.own:
                self._counted, self.climb = [], self.own
                self.engine.set(self._hold)
                self._record(now, self._hold, "no longer leads the path its job's flows "
                                              f"share: back to {self._hold.label()}", {})
                self._write()
            return False
        company = tuple(id(flow) for flow in lead.company())
        if self.climb is not self.own and company == self._company:
            return True
        first, judged = self.climb is self.own, self.climb.reference
        self._counted, self._company = [], company
        self.climb = joint_climb(self.own, self.engine.setting if first or judged is None
                                 else judged.setting)
        at, left = self.climb.prior, self.engine.setting
        if at != left:
            self.engine.set(at)
        self._measure_anew(now)
        self._info.setdefault("led_at_s", round(now - self._started, 1))
        others = f"{len(company)} other flow{'s' if len(company) != 1 else ''}"
        self._record(now, at, (
            f"leads the path it shares with {others} of its job (they hold their "
            f"settings): tuned on the job's total from {at.label()}" if first else
            f"the flows sharing the path changed ({others} now): the job's total measured "
            f"anew at {at.label()}" + (f", the setting judged last (the try of "
                                       f"{left.label()} left unjudged)" if at != left
                                       else "")), {})
        self._write()
        return True

    def _record(self, now: float, setting: Setting, reason: str,
                figures: dict[str, float]) -> None:
        self.count += 1
        if len(self.changes) < CHANGES_KEPT:
            self.changes.append({"t_s": round(now - self._started, 1),
                                 "setting": setting.label(), "reason": reason, **figures})
        log.info("%s: %s (%s)", self.key, setting.label(), reason)

    def _left_s(self, rates: list[float]) -> float | None:
        """Seconds of windows left to judge a try in, at the recent rate: the bytes queued
        (None while a size or the rate is not known). What is in flight is left out: once
        the queue is empty and a worker idles, the tail is not tuned (`tick`), so the
        calls in flight then end in windows no verdict reads. Counted with half of them,
        a job of 500 files of 2 MiB on wan40 tried fewer streams about 26 s before its end
        and ended in that try still open after 7 windows; the next job started from it,
        the fewest streams of its history (docs/BENCHMARKS.md 15.26)."""
        queued = self.engine.left()
        if not rates or any(i.file.size_bytes is None for i in queued):
            return None
        rate = statistics.fmean(rates[-3:])
        left = sum(i.size_bytes for i in queued)
        return left * 8 / 1e6 / rate if rate > 0 else None

    def _settled(self) -> bool:
        """Whether every call in flight runs at the current setting's p and pp, and in a
        slot below its cc (a slot may have two calls: the next one setting up). Back at
        the reference after a refused try (`Climb.measuring_again`), with `STRAGGLER_CC`
        workers or more, all but one: on wan40 under a load that came during a try of
        p 1 at cc 16, the last of the try's calls ended 12.0 s after the change back,
        the one before it 5.2 s after (docs/BENCHMARKS.md 15.37's run L15, read in 15.38).
        One call moves at most an eighth of the flow; the windows that measure the
        reference again, where a load that came is seen, count a few seconds sooner."""
        setting = self.engine.setting
        off = sum(1 for t in self.engine.in_flight()
                  if not (t.slot < setting.cc and t.setting.p == setting.p
                          and t.setting.pp == setting.pp))
        straggler = self.climb.measuring_again and setting.cc >= STRAGGLER_CC
        return off <= (1 if straggler else 0)

    def _write(self) -> None:
        info = {**self._info, "changes": list(self.changes), "change_count": self.count,
                "setting": self.engine.setting.label(), "holding": self.climb.holding}
        try:
            self._write_result({self.key: info})
        except Exception:  # the record is not worth the transfer
            log.exception("%s: cannot record the tuning on the job", self.key)
