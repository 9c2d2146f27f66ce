"""A node of a shared store: heartbeat, lease renewal, self-fencing, takeover.

Several stork_servers share one PostgreSQL queue. Each runs a `NodeKeeper` thread that,
every quarter of STORK_LEASE_TIME:

1. heartbeats (the `nodes` table: `stork_q -nodes`);
2. renews the leases of the attempts it runs; an attempt whose lease is not renewed (the
   job was removed elsewhere, or the lease expired and another node may run the job) is
   stopped without recording anything (`Dispatcher.lose`);
3. fences itself: when no renewal has landed for STORK_LEASE_TIME less a margin (the
   database is unreachable, the node was paused), it stops all its attempts before their
   leases can expire, so a job never runs on two nodes at once; its late writes would be
   refused by the store anyway (every write of an attempt is fenced by its lease);
4. requeues jobs whose lease expired (their node died): they run on whichever node takes
   them first, a dataset resuming from its files (those done stay done; those running
   are checked before anything is resent).

The clock that matters for leases is the database's (`claimed_until` is computed there);
a node measures its own deadline from *before* it sent a renewal, on its monotonic clock,
so it always gives up before the database says the lease is over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from stork.errors import StoreError
from stork.job import JobState
from stork.server import events
from stork.server.dispatcher import Dispatcher
from stork.server.runner import StopReason
from stork.store.base import JobStore
from stork.userlog import note

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 4
FENCE_MARGIN_S = 5.0  # at most: a node stops its attempts this long before its leases end


class NodeKeeper:
    def __init__(self, store: JobStore, dispatcher: Dispatcher, lease_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.lease_s = lease_s
        self.interval_s = lease_s / RENEWALS_PER_LEASE
        self.margin_s = min(FENCE_MARGIN_S, lease_s / RENEWALS_PER_LEASE)
        self.clock = clock
        self._last_renewal = time.monotonic()  # when the last renewal that landed was sent
        self._fenced = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fence_thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node", daemon=True)
        self._thread.start()
        # the deadline is watched apart from the renewals: a renewal may block in the
        # database client (a cut network) for longer than the lease
        self._fence_thread = threading.Thread(target=self._watch, name="node-fence",
                                              daemon=True)
        self._fence_thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._fence_thread):
            if thread is not None:
                thread.join(10)

    def _loop(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:
                log.exception("node %s: heartbeat failed", self.store.node)
            if self._stop.wait(self.interval_s):
                return

    def _watch(self) -> None:
        while not self._stop.wait(min(0.25, self.interval_s)):
            self.check_deadline()

    def beat(self) -> None:
        """One round: heartbeat, renewals, takeover of expired leases."""
        sent = time.monotonic()
        held = self.dispatcher.attempts.leased()
        try:
            self.store.heartbeat()
            kept = self.store.renew_leases(list(held))
        except StoreError as exc:
            log.warning("node %s: cannot renew leases (%s); %.1f s before this node stops its "
                        "transfers", self.store.node, exc, self._left(time.monotonic()))
            return
        with self._lock:
            self._last_renewal = max(self._last_renewal, sent)
            fenced, self._fenced = self._fenced, False
        if fenced:
            log.warning("node %s: the database answers again; dispatching", self.store.node)
        gone = sorted(set(held) - kept)
        removed = [i for i in gone if self._removed(i)]  # stork_rm on another node
        for job_id in removed:
            self.dispatcher.attempts.kill(job_id, StopReason.REMOVED)
        lost = self.dispatcher.lose([i for i in gone if i not in removed], sent)
        if lost:
            log.warning("node %s: lost the lease of job(s) %s (removed, or taken over)",
                        self.store.node, ", ".join(map(str, lost)))
        self._take_over()

    def _removed(self, job_id: int) -> bool:
        """Whether the job was removed (its attempt then ends as a removed one does: partial
        destination deleted, nothing else written)."""
        try:
            return self.store.get(job_id).state is JobState.REMOVED
        except StoreError:
            return False

    def _left(self, now: float) -> float:
        """Seconds until this node must have stopped its attempts (monotonic clock)."""
        return self._last_renewal + self.lease_s - self.margin_s - now

    def check_deadline(self) -> None:
        """No renewal landed for the lease less the margin: stop every attempt of this
        node (their leases are about to end and other nodes to take the jobs)."""
        now = time.monotonic()
        with self._lock:
            if self._left(now) > 0:
                return
            first = not self._fenced
            self._fenced = True
        # an attempt started since holds the lease its start gave it, until its own deadline
        stopped = self.dispatcher.lose(sorted(self.dispatcher.attempts.leased()),
                                       now - (self.lease_s - self.margin_s))
        if first or stopped:
            log.error("node %s: no lease renewal for %.1f s: stopped %d transfer(s); other "
                      "nodes take its jobs over", self.store.node, now - self._last_renewal,
                      len(stopped))

    def _take_over(self) -> None:
        now = self.clock()
        jobs = self.store.requeue_expired(now, "its node stopped renewing the lease")
        if not jobs:
            return
        log.warning("node %s: requeued %d job(s) whose lease expired: %s", self.store.node,
                    len(jobs), ", ".join(str(j.id) for j in jobs))
        for job in jobs:
            events.record(job, now, [note(f"attempt {job.attempts} interrupted: its node "
                                          "stopped renewing the lease; job requeued")])
        self.dispatcher.enqueue([j.id for j in jobs])
        self.dispatcher.wake()
