"""The dispatcher: wires admission, optimization, attempts and the outcome judge together.

    submit -> Admission (task matrix) -> selected -> [Optimizations: the EOS chooses -p]
           -> Attempts.launch (RUNNING) -> the child ends -> judge -> Transition -> store
           -> user log -> slot released (and the job enqueued again for a retry)

Each part lives in its own module: `admission` (task matrix, due times, resync, wait
reasons), `optimization` (the EOS phase before launch), `attempts` (start, kill, hung
kills, recovery), `judge` (pure: what an attempt's end means) and `events` (the user log).
The dispatcher decides nothing itself; it keeps the one entry point the daemon and the API
call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from stork.config import LiveSettings, Settings
from stork.eos.service import EosService
from stork.errors import HostLimitReached, JobNotFound, PermissionDenied, StoreUnavailable
from stork.job import DapType, Job, JobState
from stork.server import events, kept_tokens
from stork.server.admission import Admission
from stork.server.attempt_plan import NotLaunchable, Plan, as_ranges, plan_attempt
from stork.server.attempts import Attempts
from stork.server.flow_tuning import tunes_online
from stork.server.optimization import EstimatorFor, Optimizations
from stork.server.runner import StopReason
from stork.store.base import JobStore
from stork.transfer import destination
from stork.transfer.registry import Registry
from stork.userlog import aborted

log = logging.getLogger(__name__)

SHUTTING_DOWN = "stork_server is shutting down"
TICK_GAP_S = 0.01  # least time between two ticks of the dispatcher's thread
HOST_LOAD_S = 0.5  # a shared store: how often other nodes' load per host is read
HOST_BUSY_RETRY_S = 1.0  # a start refused by the cluster-wide host limit is tried again after


class Dispatcher:
    def __init__(self, store: JobStore, settings: Settings | LiveSettings, registry: Registry,
                 clock: Callable[[], float] = time.time,
                 estimator_for: EstimatorFor | None = None,
                 eos: EosService | None = None) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.accepting = True
        self._live = LiveSettings.of(settings)
        self.admission = Admission(self._live)
        self.optimizations = Optimizations(store, estimator_for, clock)
        self.attempts = Attempts(store, self._live, self._attempt_ended, clock)
        self._tick_lock = threading.Lock()
        self._tick_again = False
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._host_load_read = float("-inf")
        self.on_tick: Callable[[float], None] | None = None  # each tick's seconds (metrics)

    @property
    def settings(self) -> Settings:
        return self._live.current

    # -- dispatching --------------------------------------------------------------------------

    def running_count(self) -> int:
        """Attempts whose tool runs (jobs being optimized are not counted: they are IDLE)."""
        return self.attempts.count()

    def start(self) -> None:
        """Run ticks on the dispatcher's own thread: one when `wake` asks, and one every
        STORK_DISPATCH_INTERVAL anyway. Requests and attempt threads only wake it, so an
        API request never waits while a tick starts transfers."""
        self._wake.set()  # the first tick at once
        self._thread = threading.Thread(target=self._loop, name="dispatcher", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Ask for a tick soon (from any thread; returns at once)."""
        self._wake.set()

    def stop(self) -> None:
        """End the dispatcher's thread (running attempts are the caller's business)."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait(self.settings.dispatch_interval_s)
            self._wake.clear()
            if not self._stopped:
                self.tick()
                # wake-ups that come meanwhile share the next tick: under hundreds of
                # attempt ends a second, a selection over the whole queue runs at most
                # 1 / TICK_GAP_S times a second instead of once per end
                time.sleep(TICK_GAP_S)

    def tick(self) -> None:
        """Start runnable jobs while slots are free. Safe to call from any thread.

        A call that finds another tick running leaves a flag instead of waiting; the running
        tick sees it after releasing the lock and goes round again, so no wake-up is lost.
        """
        self._tick_again = True
        while self._tick_again:
            if not self._tick_lock.acquire(blocking=False):
                return
            began = time.perf_counter()
            try:
                self._tick_again = False
                self._fill_slots()
            except StoreUnavailable as exc:  # said once per outage by the store as well
                log.debug("dispatch tick: %s", exc)
            except Exception:
                log.exception("dispatch tick failed")
            finally:
                self._tick_lock.release()
            if self.on_tick is not None:
                self.on_tick(time.perf_counter() - began)

    def enqueue(self, job_ids: list[int], due: float = 0.0) -> None:
        """Make transfer jobs known to the dispatcher (runnable from `due` on)."""
        self.admission.enqueue(job_ids, due)

    def admit_new(self, jobs: list[tuple[int, str, str]]) -> None:
        """Freshly submitted transfers (id, src_url, dest_url): into the matrix at once,
        without reading them back from the store."""
        self.admission.admit_new(jobs)

    def _fill_slots(self) -> None:
        while self.accepting:
            self._admit(self.clock())
            chosen = self.admission.select()
            if not chosen:
                return
            for job_id in chosen:
                self._start(job_id)

    def _admit(self, now: float) -> None:
        """Move jobs whose time has come into the task matrix (store reads happen here,
        outside the admission lock)."""
        if self.admission.resync_due(now):
            self.admission.note_waiting(self.store.waiting_transfers())
        if self.store.shared and time.monotonic() - self._host_load_read >= HOST_LOAD_S:
            self._host_load_read = time.monotonic()
            self.admission.note_elsewhere(self.store.host_load())
        for job_id in self.admission.pop_due(now):
            try:
                job = self.store.get(job_id)
            except JobNotFound:
                continue
            if job.state is JobState.REMOVED and job_id in self.attempts:  # on another node
                self.attempts.kill(job_id, StopReason.REMOVED)
            if job.state is not JobState.IDLE or job.dap_type != DapType.TRANSFER.value:
                continue
            if job.next_attempt_at > now:
                self.admission.enqueue([job_id], job.next_attempt_at)
            else:
                self.admission.add(job.id, job.src_url, job.dest_url)

    def _start(self, job_id: int) -> None:
        """A selected job: plan its attempt, optimize it or launch it."""
        try:
            job = self.store.get(job_id)
        except JobNotFound:
            self.admission.release(job_id)
            return
        if job.state is not JobState.IDLE:
            self.admission.release(job_id)
            return
        try:
            plan = plan_attempt(job, self.registry, self.settings)
        except NotLaunchable as problem:
            self.attempts.refuse(job, problem)
            self.admission.release(job_id)
            return
        # a job tuned online is tuned while it runs (`flow_tuning`), not before
        if self.optimizations.wants(plan) and not self._tuned_on_flow(plan):
            self.optimizations.begin(plan, self._optimized)
        elif not self._launch(plan):
            self.admission.release(job_id)

    def _tuned_on_flow(self, plan: Plan) -> bool:
        """Whether a job's optimizer tunes its flow while it runs: a dataset's, and a single
        file's when it goes through the engine as ranges (`as_ranges`: not into a device or
        a FIFO, which takes no ranges; its "YES" stays the EOS's there)."""
        spec = plan.job.spec
        if not tunes_online(spec, self.settings):
            return False
        if spec.is_dataset:
            return True
        return as_ranges(plan.claimed(destination.look(plan.dest_url, plan.run_as)),
                         self.settings)

    def _launch(self, plan: Plan) -> bool:
        """Start the attempt; a start the cluster-wide host limit refused (a shared store:
        other nodes fill the host) is tried again after HOST_BUSY_RETRY_S."""
        try:
            return self.attempts.launch(plan)
        except HostLimitReached as busy:
            log.debug("%s; trying again in %g s", busy, HOST_BUSY_RETRY_S)
            self.admission.release(plan.job.id)
            self.admission.enqueue([plan.job.id], self.clock() + HOST_BUSY_RETRY_S)
            self._host_load_read = float("-inf")  # read the others' load again at once
            return True  # its place is released and its retry enqueued already

    def _optimized(self, plan: Plan, removed: bool) -> None:
        """The EOS answered (on the optimization's thread): launch, unless the job left."""
        job_id = plan.job.id
        try:
            launched = not removed and self.accepting and self._launch(plan)
        except Exception:
            log.exception("job %d: cannot start its attempt", job_id)
            launched = False
        if not launched:
            self.admission.release(job_id)
            self.wake()

    def _attempt_ended(self, job_id: int, retry_at: float | None) -> None:
        """An attempt's end is recorded: free its slot, enqueue its retry, fill the slot."""
        self.admission.release(job_id)
        if retry_at is not None:
            self.admission.enqueue([job_id], retry_at)
        self.wake()

    # -- looking ------------------------------------------------------------------------------

    def wait_reason(self, job: Job) -> str | None:
        """Why an IDLE transfer is not running yet: its retry time, its optimization, or
        what the task matrix says. Cheap and lock-free: a listing calls it for every job."""
        if job.state is not JobState.IDLE or job.dap_type != DapType.TRANSFER.value:
            return None
        now = self.clock()
        if job.next_attempt_at > now:
            return f"retry in {job.next_attempt_at - now:.0f} s (after {job.failures} failure(s))"
        if not self.accepting:
            return SHUTTING_DOWN
        phase = self.optimizations.phase(job.id)
        if phase is not None:
            return phase
        return self.admission.wait_reason(job.id)

    def matrix_snapshot(self) -> dict[str, object]:
        return self.admission.snapshot()

    # -- control ------------------------------------------------------------------------------

    def remove(self, job_id: int, caller_uid: int, caller: str) -> Job:
        """stork_rm: REMOVED in the store, then the attempt stopped (its end frees the
        slot), or the optimization abandoned (its end frees the slot), or the slot freed."""
        job = self.store.get(job_id)
        if caller_uid not in (0, job.owner_uid):
            raise PermissionDenied(f"job {job_id} belongs to {job.owner}; only its owner or root "
                                   f"may remove it")
        now = self.clock()
        _, after = self.store.remove(job_id, now, caller)
        if not (self.attempts.kill(job_id, StopReason.REMOVED)
                or self.optimizations.cancel(job_id)):
            self.admission.release(job_id)
        events.record(after, now, [aborted(f"removed by {caller} via stork_rm")])
        kept_tokens.release(self.settings.state_dir, after)
        return after

    def check_hung(self) -> list[int]:
        """Kill attempts running past STORK_MAXDELAY_INMINUTES; returns their job ids."""
        return self.attempts.check_hung()

    def stop_accepting(self) -> None:
        self.accepting = False

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no attempt runs; False on timeout."""
        return self.attempts.wait_idle(timeout_s)

    def kill_all(self, reason: StopReason = StopReason.SHUTDOWN) -> None:
        self.attempts.kill_all(reason)

    def lose(self, job_ids: list[int], started_before: float) -> list[int]:
        """Leases this node lost: stop those attempts without recording anything."""
        return [i for i in job_ids if self.attempts.lose(i, started_before)]

    def recover(self) -> list[Job]:
        """At start-up: requeue jobs a dead daemon left RUNNING, killing any leftover child."""
        return self.attempts.recover()
