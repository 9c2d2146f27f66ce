"""The transfer engine: `cc` workers kept busy over a job's queue of items, its setting
changed while the data flows.

Each worker (one slot, supplied by the transfer module of the URLs, `TransferModule.worker`)
takes the next call's worth of items the moment its last call ends: a byte range alone, or
whole files up to about `call_s` seconds of the worker's recent rate (`Worker.takes_lists`;
one file at a time otherwise). Nothing waits for anything else: there is no batch, so no
barrier where the flow drains to the slowest file and starts again.

`set(Setting)` applies at once and stops nothing: a higher `cc` starts workers now; a lower
one lets the workers above it finish their call and take no more; `p` and `pp` apply to the
next call each worker makes. Nothing in flight is killed or sent again because of a change.
The bytes the tools report go into the engine's `Flow` (windows of measured rate at each
setting, final only once every call in flight has told its bytes for them, so that a late
report lands where the bytes moved: `tick`), which the tuning layer reads, and into the
job's (`meter`: a job may run several engines), which the job keeps as its series. `stop`
ends every call in flight (their items are answered as not done: `ok` None) and takes no
more.

What an answer means (done, retry alone, failed) is the caller's: `on_take` is called on the
worker's thread before each call (to mark its files in flight), `on_results` after it with
the call and its answers, so a call's files are checked while the other workers' items move.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stork.engine.flow import Flow
from stork.transfer.worker import Item, ItemResult, Setting, Worker

log = logging.getLogger(__name__)

CALL_S = 4.0  # a list call lasts about this long at the worker's recent rate
LIST_MIN_BYTES = 4 << 20  # before any rate is known, and at least
LIST_MAX_FILES = 500  # globus-url-copy reads the whole list first: keep it short
RATE_WINDOWS = 5  # the recent rate: over the last windows of the flow
STAGGER = (0.5, 0.83, 1.17, 1.5)  # a slot's call, as a share of call_s



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


class Engine:
    def __init__(self, items: Iterable[Item], new_worker: Callable[[], Worker],
                 setting: Setting, on_results: Callable[[Taken, list[ItemResult]], None], *,
                 flow: Flow | None = None, meter: Flow | None = None, call_s: float = CALL_S,
                 on_take: Callable[[Taken], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        _check(setting)
        self._queue: deque[Item] = deque(items)
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
        self._slots: dict[int, Worker | None] = {}  # slot -> its worker (None: starting)
        self._in_flight: dict[int, Taken] = {}
        self._told: dict[int, float] = {}  # slot -> up to when its call told its bytes
        self._stopped = False
        self._started = False
        self.calls = 0

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
        with self._lock:
            self._queue.extend(items)
            if self._started:
                self._fill()

    def withdraw(self, unwanted: Callable[[Item], bool]) -> list[Item]:
        """Take back the queued items `unwanted` names (a failed file's other ranges);
        returns them. Calls in flight are not touched."""
        with self._lock:
            gone = [i for i in self._queue if unwanted(i)]
            if gone:
                self._queue = deque(i for i in self._queue if not unwanted(i))
            return gone

    def run(self) -> None:
        """Move every item; returns when the queue is empty and no call is in flight, or
        when stopped."""
        with self._lock:
            self._started = True
            self._fill()
            while self._slots:
                self._changed.wait()
        self.flow.end(self.clock())  # every window final

    def stop(self) -> None:
        """End every call in flight and take no more items."""
        with self._lock:
            self._stopped = True
            workers = [w for w in self._slots.values() if w is not None]
            self._changed.notify_all()
        for worker in workers:
            worker.stop()

    # -- looking ---------------------------------------------------------------------------

    def in_flight(self) -> list[Taken]:
        with self._lock:
            return list(self._in_flight.values())

    def left(self) -> list[Item]:
        """Items not yet taken."""
        with self._lock:
            return list(self._queue)

    def workers(self) -> int:
        with self._lock:
            return len(self._slots)

    # -- the workers -----------------------------------------------------------------------

    def _fill(self) -> None:
        """Start a worker for every free slot below cc while there is work (in the lock)."""
        if self._stopped or not self._queue:
            return
        for slot in range(self._setting.cc):
            if slot not in self._slots:
                self._slots[slot] = None
                threading.Thread(target=self._work, args=(slot,), daemon=True,
                                 name=f"engine-worker-{slot}").start()

    def _work(self, slot: int) -> None:
        worker: Worker | None = None
        try:
            worker = self._new_worker()
            with self._lock:
                if self._stopped:
                    return
                self._slots[slot] = worker
            while True:
                with self._lock:
                    taken = self._take(slot, worker.takes_lists)
                    if taken is None:
                        return
                    self._in_flight[slot] = taken
                    self._told[slot] = taken.started_s
                    self.calls += 1
                try:
                    if self._on_take is not None:
                        self._on_take(taken)
                    results = worker.run(taken.items, taken.setting,
                                         functools.partial(self._report, slot))
                finally:
                    with self._lock:
                        self._in_flight.pop(slot, None)
                        self._told.pop(slot, None)
                self._on_results(taken, results)
        except Exception:
            log.exception("engine worker %d failed", slot)
        finally:
            if worker is not None:
                worker.close()
            with self._lock:
                self._slots.pop(slot, None)
                self._changed.notify_all()

    def _report(self, slot: int, t0: float, t1: float, nbytes: float) -> None:
        with self._lock:
            self._told[slot] = max(self._told.get(slot, t1), t1)
        self.flow.add(t0, t1, nbytes)
        if self.meter is not None:
            self.meter.add(t0, t1, nbytes)
        self.tick(t1)

    def tick(self, now: float) -> None:
        """Close the flow's windows up to `now`, and make final those every call in flight
        has told its bytes for (a call says what it moved up to its last report: a
        list call of globus-url-copy file by file), so a window is read only once whole."""
        with self._lock:
            told = min(self._told.values(), default=now)
        self.flow.tick(now)
        self.flow.settle(min(told, now))

    def _take(self, slot: int, lists: bool) -> Taken | None:
        """The next call's items for `slot` (in the lock); None: the slot retires (stopped,
        above cc, or nothing left)."""
        setting = self._setting
        if self._stopped or slot >= setting.cc or not self._queue:
            return None
        first = self._queue.popleft()
        items = [first]
        if lists and not first.is_range:
            budget = self._list_bytes(setting, slot) - first.size_bytes
            while (self._queue and not self._queue[0].is_range and budget > 0
                   and len(items) < LIST_MAX_FILES):
                item = self._queue.popleft()
                items.append(item)
                budget -= item.size_bytes
        return Taken(slot, tuple(items), setting, self.clock())

    def _list_bytes(self, setting: Setting, slot: int) -> float:
        """About `call_s` seconds of one worker's recent share of the flow, staggered by
        slot (half to one and a half times), so that the workers' calls do not all end,
        and start again, together. A worker's share of a window is its bytes over the cc
        of that window's setting: right after a change of cc the new workers' lists are
        sized from what one worker moved before it, not from the old rate split among the
        new number of workers (which made them the floor, and their sessions set up
        every second or two until the windows at the new cc came in)."""
        stagger = STAGGER[slot % len(STAGGER)]
        recent = self.flow.windows()[-RATE_WINDOWS:]
        seconds = sum(w.seconds for w in recent)
        if seconds <= 0:
            return LIST_MIN_BYTES * stagger
        per_worker = sum(w.bytes / max(w.setting.cc, 1) for w in recent) / seconds
        return max(per_worker * self.call_s, LIST_MIN_BYTES) * stagger
