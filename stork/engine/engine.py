"""The transfer engine: `cc` workers kept busy over a job's queue of items, its setting
changed while the data flows.

Each worker (one slot, supplied by the transfer module of the URLs, `TransferModule.worker`)
takes the next call's worth of items the moment its last call ends: a byte range alone, or
whole files up to about `call_s` seconds of the worker's recent rate (`Worker.takes_lists`;
one file at a time otherwise). Nothing waits for anything else: there is no batch, so no
barrier where the flow drains to the slowest file and starts again.

A worker whose calls each set a session up again (`Worker.sets_up_per_call`: a
globus-url-copy a call, whose control and data connections took 0.7-0.9 s at 40 ms) would
leave its slot idle for that long every call. So a slot has two lanes: when its call's
bytes left would take about as long as a call's set-up at its rate, the slot's other lane
takes the next call and sets it up while the last bytes of this one move (`_handoff`;
checked at each report, and timed when that moment comes before the next report:
`_plan_hand_over`). For that moment the slot has two calls; only one of them moves data
most of the time. The set-up is measured (`_learn_setup`: the running mean, per call, of
the time from its start to its first report less what its first bytes took at its rate),
and a call's first report is spread over its time after a set-up. Taken as the time to the
first report, a third-party range's set-up read about 5 s (its server's first marker): the
next call started up to 5 s early, the slot ran two calls' streams meanwhile, and the
flow's 1-s windows at a steady 200 Mbit/s link spread 4-13% about their mean
(docs/BENCHMARKS.md 15.22).

`set(Setting)` applies at once and stops nothing: a higher `cc` starts workers now; a lower
one lets the workers above it finish their call and take no more; `p` and `pp` apply to the
next call each worker makes. Nothing in flight is killed or sent again because of a change.
The bytes the tools report go into the engine's `Flow` (windows of measured rate at each
setting, final only once every call in flight has told its bytes for them, so that a late
report lands where the bytes moved: `tick`), which the tuning layer reads, and into the
job's (`meter`: a job may run several engines), which the job keeps as its series. `stop`
ends every call in flight (their items are answered as not done: `ok` None) and takes no
more.

At the end of the queue one call may hold the job: a list taken in the middle whose single
stream met losses (on wan80 a call's rate varies fourfold, so a list sized for 4 s can take
11, docs/BENCHMARKS.md 15.10) ends alone while the other slots sit idle. Once nothing is
queued and a slot below `cc` is idle, such a call is *cut* (`Worker.cut`, for workers that
say they can) when it holds `CUT_MIN_FILES` files not yet told or more and they would take,
at its own rate, `CUT_GAIN` times as long as a set-up and those bytes spread over the idle
slots at a worker's recent rate (`_straggler`). Two files are enough: one moving and one
not begun. On wan80 the calls of small files hold 1-3 files (4 s at a worker's 8 Mbit/s),
and with three needed no call was cut in twelve runs of 500 x 2 MiB, whose last 4-6 s
ran below 50 Mbit/s; with two, 15 calls were cut in twelve runs and the runs made 2.3%
more (231.3 against 226.0 Mbit/s; Welch's p 0.09: docs/BENCHMARKS.md 15.53). The files
it did not land are queued again at once and the idle slots take them, an equal share
each; those that landed are answered as usual. A cut is the one place where the engine
ends a call it did not stop: the file or two in flight are sent again whole
(`stork.transfer.worker.cut_short`).

A lone byte range is cut too, though which of its bytes landed is not told (a range's
streams write blocks out of order): it is sent again whole, in equal pieces over the idle
slots and its own (`range_cut`: at least RANGE_PIECE_MIN_BYTES each, each at a worker's
rate while the slots were busy), so it is cut only when what it has left, at its rate as
of its last report, would take CUT_GAIN times as long as its whole range so spread. On
wan80 a 64 MiB range took 9.6 to 29.6 s at cc 8 p 4, and a 4 GiB file's last two calls
(a 64 MiB range at about 21 Mbit/s and a 29 MiB piece) ran on for 8.7 s after the other
six slots had gone idle (docs/BENCHMARKS.md 15.55). The idle slots are looked at each
time a call ends as well as at each report: a range's server marks only every 5 s, so a
range that has told its bytes once is judged by its rate up to that report, after a
set-up.

At the end of the queue an item larger than its share (the bytes queued over `cc`) is cut
as it is taken (`stork.engine.items.guided`, with pieces of at least `piece_bytes`, or
of `call_s` seconds of a worker's recent rate when that is less: `_end_piece_bytes`): the
worker takes its first share as a range and the rest goes back to the front of the queue,
for the next worker to cut again, so that the last calls end close together. A whole file
cut so is first shown to `on_split` (on the worker's thread, outside the engine's lock,
before any of its pieces is taken): the caller records it as a file sent in ranges (its
destination claimed).

While the tuning layer searches it sets `cut_s`, and an item is cut the same way into a
piece of `cut_s` to 1.5 times as many seconds of a worker's recent rate, staggered by
slot (at least `short_piece_bytes`): a lower `cc`, or a change of `p`, takes effect only
as the calls in flight end, and a 64 MiB range at a call's 18 Mbit/s (wan80, 16 calls)
lasts about 30 s, so a try of fewer streams was judged 45-48 s after it began
(docs/BENCHMARKS.md 15.28, run N2). At the hold `cut_s` is None and items are taken whole
again (fewer calls: fewer set-ups and markers). Before any rate is known (the first wave)
nothing is cut short: no change waits on the first calls but the start's measurement,
which needs them long. Cut to 22-32 MiB on wan80 they ended together about one server
marker in, their slots set up together, and the start's windows spread 18-28% of their
mean, too noisy for a doubling to have room under the link's rate (15.29, run P10).

What an answer means (done, retry alone, failed) is the caller's: `on_take` is called on the
worker's thread before each call (to mark its files in flight), `on_results` after it with
the call and its answers, so a call's files are checked while the other workers' items move.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stork.engine.flow import Flow
from stork.engine.items import guided, piece_of
from stork.transfer.worker import Item, ItemResult, Setting, Worker

log = logging.getLogger(__name__)

CALL_S = 4.0  # a list call lasts about this long at the worker's recent rate
LIST_MIN_BYTES = 4 << 20  # a list before any rate is known
LIST_MAX_FILES = 500  # globus-url-copy reads the whole list first: keep it short
RATE_WINDOWS = 5  # the recent rate: over the last windows of the flow
STAGGER = (0.5, 0.83, 1.17, 1.5)  # a slot's call, as a share of call_s
PIECE_STAGGER = (1.0, 1.17, 1.33, 1.5)  # a slot's piece, as a share of cut_s (never less:
# a call that ends before its server's first marker tells nothing until its end, so its
# slot cannot set the next call up while it ends, `_plan_hand_over`)
SETUP_S_FIRST = 0.5  # a call's set-up before any call of the engine has told its own
SETUP_WEIGHT = 0.2  # each call's set-up in the running mean
CUT_GAIN = 2.0  # a straggler is cut when keeping it takes this many times as long,
CUT_MIN_FILES = 2  # and it holds this many files not yet told (one moving, one not begun)
RANGE_PIECE_MIN_BYTES = 4 << 20  # a cut range's pieces (no more than STORK_PIECE_MIN_MB)
BUSY_WINDOWS = 20  # a worker's rate while the slots were busy: the median over these

Lane = tuple[int, int]  # (slot, 0 or 1): a slot's two lanes take its calls in turn


def _file_bytes(items: Iterable[Item]) -> int:
    """The bytes of the whole files among `items` (ranges left out)."""
    return sum(i.size_bytes for i in items if not i.is_range)


def range_cut(left_bytes: float, rate: float, range_bytes: int, slots: int, floor_bytes: int,
              setup_s: float, per_worker: float) -> tuple[float, float] | None:
    """PURE: a lone range's (keep_s, cut_s), or None when it has nothing left: what it has
    left at its own `rate` (bytes per second), against a set-up and the *whole* range sent
    again in equal pieces over `slots` (the idle ones and its own), at least `floor_bytes`
    each (0: in one piece), each at `per_worker`. Which bytes of a range landed is not told
    (its streams write blocks out of order), so a cut range is sent again whole."""
    if left_bytes <= 0 or rate <= 0 or per_worker <= 0:
        return None
    pieces = max(1, min(slots, range_bytes // floor_bytes)) if floor_bytes > 0 else 1
    return left_bytes / rate, setup_s + range_bytes / (pieces * per_worker)


def _other(lane: Lane) -> Lane:
    """The slot's other lane."""
    return lane[0], 1 - lane[1]


def _check(setting: Setting) -> None:
    if setting.cc < 1 or setting.p < 1 or setting.pp < 1:
        raise ValueError(f"not a setting (each at least 1): {setting.label()}")


@dataclass(frozen=True)
class Taken:
    """What one call took, for the record: the slot, the items, the setting, when."""

    slot: int
    items: tuple[Item, ...]
    setting: Setting
    started_s: float  # the engine's clock when the call was taken


@dataclass
class _Call:
    """A call in flight, as its reports tell it: what it moved, up to when."""

    taken: Taken
    told_s: float  # up to when it told its bytes
    total_bytes: int
    told_bytes: float = 0.0
    first_s: float | None = None  # its first report
    first_bytes: float = 0.0  # what that report told
    setup_s: float | None = None  # its set-up, known at its second report (`Engine._report`)
    handing_over: threading.Timer | None = None  # the hand-over planned before its end
    cut: bool = False  # the engine cut it (`Engine._straggler`)

    @property
    def left_bytes(self) -> float:
        return self.total_bytes - self.told_bytes

    @property
    def lone_range(self) -> bool:
        """Whether it moves one byte range alone."""
        return len(self.taken.items) == 1 and self.taken.items[0].is_range

    def files_left(self) -> int:
        """Its items not yet told whole."""
        ends = itertools.accumulate(i.size_bytes for i in self.taken.items)
        return sum(1 for end in ends if end > self.told_bytes)

    def first_rate(self, setup_s: float) -> float | None:
        """Bytes per second up to its first report, after a set-up of `setup_s` (None
        before that report, or when it came within the set-up)."""
        if self.first_s is None or self.first_s - self.taken.started_s <= setup_s:
            return None
        return self.first_bytes / (self.first_s - self.taken.started_s - setup_s)

    def rate(self, now: float | None = None) -> float | None:
        """Bytes per second since its first report, up to its last (or to `now`: a call
        silent since counts as slower); None before its second report."""
        if self.first_s is None or self.told_s <= self.first_s:
            return None
        end = self.told_s if now is None else max(now, self.told_s)
        return (self.told_bytes - self.first_bytes) / (end - self.first_s)


class Engine:
    def __init__(self, items: Iterable[Item], new_worker: Callable[[], Worker],
                 setting: Setting, on_results: Callable[[Taken, list[ItemResult]], None], *,
                 flow: Flow | None = None, meter: Flow | None = None, call_s: float = CALL_S,
                 on_take: Callable[[Taken], None] | None = None,
                 cut_stragglers: bool = True, piece_bytes: int = 0,
                 short_piece_bytes: int = 0,
                 on_split: Callable[[Item], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        _check(setting)
        self._queue: deque[Item] = deque(items)
        self._queued_files = _file_bytes(self._queue)
        self._new_worker = new_worker
        self._setting = setting
        self._on_results = on_results
        self._on_take = on_take
        self.clock = clock
        # its windows are made final by `tick` once every call told its bytes for them
        self.flow = flow if flow is not None else Flow(clock(), setting, lag_s=math.inf)
        self.meter = meter  # the job's flow over all its engines, fed the same reports
        self.call_s = call_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._lanes: dict[Lane, Worker | None] = {}  # lane -> its worker (None: starting)
        self._calls: dict[Lane, _Call] = {}  # the calls in flight
        self._handoff: set[int] = set()  # slots whose call is ending: the other lane takes
        self._setup_s = SETUP_S_FIRST
        self._stopped = False
        self._started = False
        self._cut_stragglers = cut_stragglers  # False: a destination that takes bytes once
        self._rest: set[Item] = set()  # a cut call's files queued again: spread, not listed
        self._resent: set[Item] = set()  # the pieces of a cut range: never cut again
        self._piece_bytes = piece_bytes  # 0: items are never cut at the end of the queue
        self._short_piece_bytes = short_piece_bytes  # 0: nor into short calls (`cut_s`)
        self.cut_s: float | None = None  # while set, calls of about this many seconds
        self._on_split = on_split
        self.calls = 0
        self.cuts = 0  # stragglers cut

    # -- control ---------------------------------------------------------------------------

    @property
    def setting(self) -> Setting:
        return self._setting

    def set(self, setting: Setting) -> None:
        """The new setting, applied now without stopping anything (see the module)."""
        _check(setting)
        with self._lock:
            self._setting = setting
            self.flow.set(self.clock(), setting)
            if self._started:
                self._fill()
            self._changed.notify_all()

    def add(self, items: Iterable[Item]) -> None:
        """More items at the end of the queue (a file to send again)."""
        items = list(items)
        with self._lock:
            self._queue.extend(items)
            self._queued_files += _file_bytes(items)
            if self._started:
                self._fill()

    def withdraw(self, unwanted: Callable[[Item], bool]) -> list[Item]:
        """Take back the queued items `unwanted` names (a failed file's other ranges);
        returns them. Calls in flight are not touched."""
        with self._lock:
            gone = [i for i in self._queue if unwanted(i)]
            if gone:
                self._queue = deque(i for i in self._queue if not unwanted(i))
                self._queued_files -= _file_bytes(gone)
            return gone

    def run(self) -> None:
        """Move every item; returns when the queue is empty and no call is in flight, or
        when stopped."""
        with self._lock:
            self._started = True
            self._fill()
            while self._lanes:
                self._changed.wait()
        self.flow.end(self.clock())  # every window final

    def stop(self) -> None:
        """End every call in flight and take no more items."""
        with self._lock:
            self._stopped = True
            workers = [w for w in self._lanes.values() if w is not None]
            self._changed.notify_all()
        for worker in workers:
            worker.stop()

    # -- looking ---------------------------------------------------------------------------

    def in_flight(self) -> list[Taken]:
        with self._lock:
            return [c.taken for c in self._calls.values()]

    def unreported(self, taken_by_s: float) -> int:
        """Calls in flight taken at or before `taken_by_s` (the engine's clock) that have
        not told any bytes yet: setting up, or moving until their first marker."""
        with self._lock:
            return sum(1 for c in self._calls.values()
                       if c.first_s is None and c.taken.started_s <= taken_by_s)

    def left(self) -> list[Item]:
        """Items not yet taken."""
        with self._lock:
            return list(self._queue)

    def workers(self) -> int:
        """Slots at work (a slot's two lanes count once)."""
        with self._lock:
            return len({slot for slot, _ in self._lanes})

    @property
    def setup_s(self) -> float:
        """A call's set-up as measured (the running mean: `_learn_setup`)."""
        return self._setup_s

    # -- the workers -----------------------------------------------------------------------

    def _fill(self) -> None:
        """Start a worker for every free slot below cc while there is work (in the lock)."""
        if self._stopped or not self._queue:
            return
        busy = {slot for slot, _ in self._lanes}
        for slot in range(self._setting.cc):
            if slot not in busy:
                self._start_lane((slot, 0))

    def _start_lane(self, lane: Lane) -> None:
        self._lanes[lane] = None
        threading.Thread(target=self._work, args=(lane,), daemon=True,
                         name=f"engine-worker-{lane[0]}.{lane[1]}").start()

    def _work(self, lane: Lane) -> None:
        slot = lane[0]
        worker: Worker | None = None
        try:
            worker = self._new_worker()
            with self._lock:
                if self._stopped:
                    return
                self._lanes[lane] = worker
            while True:
                with self._lock:
                    while self._waits(lane):
                        self._changed.wait()
                    taken, split = self._take(slot, worker.takes_lists)
                    if taken is None:
                        return
                    self._handoff.discard(slot)
                    self._calls[lane] = _Call(taken, taken.started_s,
                                              sum(i.size_bytes for i in taken.items))
                    self.calls += 1
                if split is not None:
                    self._split(*split)
                try:
                    if self._on_take is not None:
                        self._on_take(taken)
                    results = worker.run(taken.items, taken.setting,
                                         functools.partial(self._report, lane))
                finally:
                    with self._lock:
                        call = self._calls.pop(lane, None)
                        if call is not None and call.handing_over is not None:
                            call.handing_over.cancel()
                        self._changed.notify_all()
                        # a slot is idle now (a cut call's rest is not queued yet)
                        straggler = None if call is None or call.cut else self._straggler()
                    if straggler is not None:
                        straggler.cut()
                with self._lock:  # a cut call's rest, queued again (unless stopped since:
                    # then the caller has them, as any stopped call's, as not answered)
                    unsent = [] if self._stopped else [r.item for r in results if r.unsent]
                    self._rest.update(unsent)
                if unsent:
                    self.add(unsent)
                    results = [r for r in results if not r.unsent]
                if call is not None and log.isEnabledFor(logging.DEBUG):
                    log.debug("engine call %d.%d: %d items, %d bytes, first report after "
                              "%s, ended after %.3f s", *lane, len(taken.items),
                              call.total_bytes, "none" if call.first_s is None else
                              f"{call.first_s - taken.started_s:.3f} s",
                              self.clock() - taken.started_s)
                self._on_results(taken, results)
        except Exception:
            log.exception("engine worker %d.%d failed", *lane)
        finally:
            if worker is not None:
                worker.close()
            with self._lock:
                self._lanes.pop(lane, None)
                self._handoff.discard(slot)
                self._changed.notify_all()

    def _waits(self, lane: Lane) -> bool:
        """A lane waits while the slot's other lane has a call that has not handed over
        (in the lock); it goes on to `_take` (which may retire it) otherwise."""
        other = _other(lane)
        return (not self._stopped and lane[0] < self._setting.cc and bool(self._queue)
                and other in self._calls and lane[0] not in self._handoff)

    def _report(self, lane: Lane, t0: float, t1: float, nbytes: float) -> None:
        with self._lock:
            call = self._calls.get(lane)
            if call is not None:
                last_s = call.told_s
                call.told_s = max(call.told_s, t1)
                call.told_bytes += nbytes
                if call.first_s is None:  # its first bytes moved after its set-up
                    t0 = max(t0, min(t1, call.taken.started_s + self._setup_s))
                    call.first_s, call.first_bytes = t1, call.told_bytes
                else:
                    self._learn_setup(call)
                    self._plan_hand_over(lane, call, t1 - last_s)
            straggler = self._straggler()
        if straggler is not None:
            straggler.cut()
        self.flow.add(t0, t1, nbytes)
        if self.meter is not None:
            self.meter.add(t0, t1, nbytes)
        self.tick(t1)

    def _learn_setup(self, call: _Call) -> None:
        """At a call's second report, its set-up: the time from its start to its first
        report less what its first bytes took at its rate since (a third-party transfer's
        first report is its server's first marker, 5 s in: most of that moved data), into
        the running mean (in the lock)."""
        rate = call.rate()
        if call.setup_s is not None or call.first_s is None or not rate:
            return
        call.setup_s = max(0.0, call.first_s - call.taken.started_s - call.first_bytes / rate)
        self._setup_s += SETUP_WEIGHT * (call.setup_s - self._setup_s)

    def _plan_hand_over(self, lane: Lane, call: _Call, every_s: float) -> None:
        """The slot's next call to start a set-up before this one ends, at its own rate:
        now, or at that moment when it comes before the call's next report would (its
        reports come `every_s` apart: a third-party transfer's every 5 s, more than a
        set-up), so the two calls of a slot overlap by a set-up, not by up to 5 s (in the
        lock)."""
        rate = call.rate()
        if not rate or call.handing_over is not None:
            return
        wait_s = call.left_bytes / rate - self._setup_s
        if wait_s <= 0:
            self._hand_over(lane)
        elif wait_s < every_s:
            call.handing_over = threading.Timer(wait_s, self._hand_over_timed, (lane, call))
            call.handing_over.daemon = True
            call.handing_over.start()

    def _hand_over_timed(self, lane: Lane, call: _Call) -> None:
        """The timer of `_plan_hand_over`: the hand-over, if the call still runs."""
        with self._lock:
            if self._calls.get(lane) is call:
                self._hand_over(lane)

    def _hand_over(self, lane: Lane) -> None:
        """Let the slot's other lane take the next call now, when the lane's worker sets
        up per call (in the lock)."""
        slot, other = lane[0], _other(lane)
        worker = self._lanes.get(lane)
        if (worker is None or not worker.sets_up_per_call or slot in self._handoff
                or other in self._calls or self._stopped or slot >= self._setting.cc
                or not self._queue):
            return
        self._handoff.add(slot)
        if other in self._lanes:
            self._changed.notify_all()
        else:
            self._start_lane(other)

    def _straggler(self) -> Worker | None:
        """The worker of a call to cut now, or None (in the lock; see the module): nothing
        is queued, a slot below cc has no call, and of the calls whose worker `cuts`, the
        one whose bytes left would take longest at its own rate, when that is CUT_GAIN
        times what sending them again over the idle slots would take (at a worker's recent
        rate): a list call's files not yet told (`_list_cut`), a lone range's whole range
        (`_range_cut`)."""
        if not self._cut_stragglers or self._stopped or self._queue:
            return None
        idle = self._idle_slots()
        if idle < 1:
            return None
        per_worker = self._worker_rate()  # the flow's windows read only once a slot idles
        if not per_worker:
            return None
        worst: tuple[float, float, Lane, _Call, Worker] | None = None
        now, busy = self.clock(), self._busy_worker_rate()
        for lane, call in self._calls.items():
            worker = self._lanes.get(lane)
            if call.cut or worker is None or not worker.cuts:
                continue
            costs = self._range_cut(call, idle, busy, now) if call.lone_range \
                else self._list_cut(call, idle, per_worker, now)
            if costs is not None and costs[0] > CUT_GAIN * costs[1] \
                    and (worst is None or costs[0] > worst[0]):
                worst = (*costs, lane, call, worker)
        if worst is None:
            return None
        keep_s, cut_s, lane, call, worker = worst
        call.cut = True
        self.cuts += 1
        what = "a range of" if call.lone_range else f"{call.files_left()} files and"
        rate, since = call.rate(now), ""
        if rate is None:  # a range told once (`_range_cut`)
            rate, since = call.first_rate(self._setup_s), " up to its first report"
        log.info("engine: call %d.%d cut with %s %.0f bytes not told: about %.1f s at its "
                 "%.2f Mbit/s%s, about %.1f s on %d idle slots", *lane, what,
                 call.left_bytes, keep_s, (rate or 0) * 8e-6, since, cut_s, idle)
        return worker

    def _list_cut(self, call: _Call, idle: int, per_worker: float, now: float
                  ) -> tuple[float, float] | None:
        """A list call's (keep_s, cut_s): its files not yet told at its own rate up to now,
        against a set-up and those bytes over the idle slots; None when it holds fewer than
        CUT_MIN_FILES such files (in the lock)."""
        rate, files = call.rate(now), call.files_left()
        if not rate or files < CUT_MIN_FILES:
            return None
        return (call.left_bytes / rate,
                self._setup_s + call.left_bytes / (min(idle, files) * per_worker))

    def _range_cut(self, call: _Call, idle: int, busy: float | None, now: float
                   ) -> tuple[float, float] | None:
        """`range_cut` of a lone range in flight, its rate as of its last report (a range's
        server marks every 5 s: a call silent since then has moved on, not stalled), or up
        to its first after a set-up when it has made only one; its pieces at `busy`, a
        worker's rate while every slot was busy; None for a piece of a range cut before (a
        range is cut once, so a path slow for every call cannot send it again and again).
        In the lock.

        On wan80 the last call of a 1 GiB file, a 26 MiB piece, told its first bytes 6.5 s
        in (2.3 s after the other slots went idle) and ended 10.3 s after them: with one
        report it could not be judged, and its second came 5 s later, near its end
        (docs/BENCHMARKS.md 15.55, job 2 of run G1)."""
        rate = call.rate() or call.first_rate(self._setup_s)
        if not rate or not busy or call.taken.items[0] in self._resent:
            return None
        return range_cut(call.left_bytes - rate * max(0.0, now - call.told_s), rate,
                         call.total_bytes, idle + 1,
                         min(self._short_piece_bytes, RANGE_PIECE_MIN_BYTES),
                         self._setup_s, busy)

    def _busy_worker_rate(self) -> float | None:
        """A worker's rate, bytes per second, while the slots were busy: the median over
        the flow's last BUSY_WINDOWS windows of each one's bytes over its cc (None before
        any window). Not `_worker_rate`: that is the recent windows', which at the end of
        the queue are the idle slots' and the straggler's own."""
        rates = [w.bytes / w.seconds / max(w.setting.cc, 1)
                 for w in self.flow.windows()[-BUSY_WINDOWS:] if w.seconds > 0]
        return statistics.median(rates) if rates else None

    def _idle_slots(self, taking: int | None = None) -> int:
        """Slots below cc with no call in flight, the slot `taking` a call counted idle (in
        the lock)."""
        return self._setting.cc - len({s for s, _ in self._calls if s != taking})

    def _worker_rate(self) -> float | None:
        """One worker's recent share of the flow at the setting now, bytes per second: its
        bytes over the cc of each window's setting, and of a window at more streams a file
        (`p`) than now, the share of them a worker has now (None before any window).

        A worker with fewer streams moves less: on wan40, 16 workers made 192.3 Mbit/s at
        p 3 and 112.3 at p 1 under a load (docs/BENCHMARKS.md 15.27, run J5), so a list
        sized from the windows before that change of `p` would take 1.7 times its `call_s`,
        and a change back would wait for it to end. With more streams than before it is sized as
        before: streams share the path, so a worker's rate does not grow with them."""
        recent = self.flow.windows()[-RATE_WINDOWS:]
        seconds = sum(w.seconds for w in recent)
        if seconds <= 0:
            return None
        p = self._setting.p
        return sum(w.bytes / max(w.setting.cc, 1) * min(1.0, p / max(w.setting.p, 1))
                   for w in recent) / seconds

    def tick(self, now: float) -> None:
        """Close the flow's windows up to `now`, and make final those every call in flight
        has told its bytes for (a call says what it moved up to its last report: a
        list call of globus-url-copy file by file), so a window is read only once whole."""
        with self._lock:
            told = min((c.told_s for c in self._calls.values()), default=now)
        self.flow.tick(now)
        self.flow.settle(min(told, now))

    def _split(self, whole: Item, rest: Item) -> None:
        """The rest of an item cut as it was taken back at the front of the queue, for the
        next worker; a whole file first shown to `on_split` (outside the lock, before any
        of its pieces is sent)."""
        if not whole.is_range and self._on_split is not None:
            try:
                self._on_split(whole)
            except Exception:
                log.exception("engine: the caller failed on %s cut into ranges", whole.label())
        with self._lock:
            self._queue.appendleft(rest)
            if self._started:
                self._fill()
            self._changed.notify_all()

    def _take(self, slot: int, lists: bool) -> tuple[Taken | None, tuple[Item, Item] | None]:
        """The next call's items for `slot`, and when its item was cut (`guided`), the item
        and its rest, to queue again (`_split`); (None, None): the slot retires (stopped,
        above cc, or nothing left). In the lock."""
        setting = self._setting
        if self._stopped or slot >= setting.cc or not self._queue:
            return None, None
        first = self._queue.popleft()
        items = [first]
        resent = first.is_range and first in self._rest  # a piece of a cut range
        piece, rest = self._guided(first, setting, slot)
        if rest is not None:
            self._queued_files -= _file_bytes([first])
            items = [piece]
            if resent:  # its rest is spread as it was
                self._rest.discard(first)
                self._rest.add(rest)
        elif first in self._rest:  # a cut call's rest: an equal share for each idle slot
            share = 1 if first.is_range else \
                math.ceil((len(self._queue) + 1) / max(self._idle_slots(slot), 1))
            while (self._queue and len(items) < share and self._queue[0] in self._rest
                   and not self._queue[0].is_range):
                items.append(self._queue.popleft())
            self._rest.difference_update(items)
        elif lists and not first.is_range:
            budget = self._list_bytes(setting, slot) - first.size_bytes
            while (self._queue and not self._queue[0].is_range and budget > 0
                   and len(items) < LIST_MAX_FILES):
                item = self._queue.popleft()
                items.append(item)
                budget -= item.size_bytes
        if resent:
            self._resent.add(items[0])
        self._queued_files -= _file_bytes(items)
        return (Taken(slot, tuple(items), setting, self.clock()),
                None if rest is None else (first, rest))

    def _guided(self, first: Item, setting: Setting, slot: int = 0
                ) -> tuple[Item, Item | None]:
        """`first` as `guided` cuts it for the bytes queued, or into a piece of about
        `cut_s` seconds of a worker's recent rate while that is set, whichever piece is
        smaller (in the lock): a cut call's files, already spread, are taken whole, and a
        cut range in equal pieces, one for each idle slot (`range_cut`).
        Pieces are staggered by slot (`PIECE_STAGGER`: 1 to 1.5 times), so the calls do
        not all end together; before any rate is known nothing is cut short (see the
        module)."""
        if first in self._rest:
            if not first.is_range:
                return first, None
            return piece_of(first, first.size_bytes / max(self._idle_slots(slot), 1),
                            min(self._short_piece_bytes, RANGE_PIECE_MIN_BYTES))
        cuts = []
        rate = self._worker_rate() if self._short_piece_bytes else None
        floor = self._end_piece_bytes(rate)
        if floor and first.size_bytes >= 2 * floor:
            queued = first.size_bytes + sum(i.size_bytes for i in self._queue)
            cuts.append(guided(first, queued, setting.cc, floor))
        if self.cut_s and rate:
            stagger = PIECE_STAGGER[slot % len(PIECE_STAGGER)]
            cuts.append(piece_of(first, rate * self.cut_s * stagger,
                                 self._short_piece_bytes))
        return min(cuts, key=lambda c: c[0].size_bytes, default=(first, None))

    def _end_piece_bytes(self, rate: float | None) -> int:
        """The least piece the end of the queue cuts an item into (`guided`; 0: never):
        `piece_bytes`, or `call_s` seconds of a worker's recent `rate` (bytes per second)
        when that is less, at least `short_piece_bytes`. `piece_bytes` is 16 BDPs of the
        whole path, and a call carries 1/cc of it: on wan80 (a BDP of 3 MB) the floor read
        46 MiB against ranges of 64 MiB, so no range was ever cut, the last ones (15 s each
        at a worker's 35 Mbit/s) ended one by one, and under YES a 4 GiB file's last 3-13 s
        ran below 80% of its median rate (its pieces cut while searching had spread the
        calls' ends), against 0-3 s on wan40, where the floor is 16 MiB
        (docs/BENCHMARKS.md 15.31). A list call lasts `call_s` at that rate, so a piece
        does too."""
        if not self._piece_bytes or not rate or not self._short_piece_bytes:
            return self._piece_bytes
        return min(self._piece_bytes,
                   max(self._short_piece_bytes, math.ceil(rate * self.call_s)))

    def _list_bytes(self, setting: Setting, slot: int) -> float:
        """About `call_s` seconds of one worker's recent share of the flow, staggered by
        slot (half to one and a half times), so that the workers' calls do not all end,
        and start again, together. A worker's share of a window is its bytes over the cc
        of that window's setting: right after a change of cc the new workers' lists are
        sized from what one worker moved before it, not from the old rate split among the
        new number of workers (which made them the floor, and their sessions set up
        every second or two until the windows at the new cc came in).

        Towards the end a list is at most an equal share of the whole files left (1/cc):
        a call taken then ends about when the queue runs dry, so the last calls end close
        together instead of one staggered long list running alone after the others. It
        is never less than a set-up's worth of the worker's rate, so the slot's next
        call can still be set up while it runs (`_handoff`). LIST_MIN_BYTES is the list
        before any rate is known, not a floor after: with a worker at 3-4 Mbit/s (p 1
        under a load on wan40) a list of 4 MiB at the stagger's 1.5 took 12-16 s where the
        controller asked for 2, and a change back to more streams waited 14 s for such
        lists to end (docs/BENCHMARKS.md 15.29, run P4)."""
        stagger = STAGGER[slot % len(STAGGER)]
        per_worker = self._worker_rate()
        if per_worker is None:
            return LIST_MIN_BYTES * stagger
        usual = per_worker * max(self.call_s * stagger, self._setup_s)
        return min(usual, max(self._queued_files / setting.cc, per_worker * self._setup_s))
