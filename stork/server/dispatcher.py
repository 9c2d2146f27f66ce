"""The dispatcher: starts IDLE jobs in free slots and judges each attempt when it ends.

It decides; the store applies. Every state change is one store call (state + event in one
transaction), followed by the matching HTCondor user log event.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from stork.config import Settings
from stork.errors import JobNotFound, PermissionDenied, StorkError
from stork.eos.client import Estimator
from stork.eos.service import EosService, EstimateRequest
from stork.job import DapType, Job, JobSpec, JobState
from stork.sched import Task, TaskMatrix
from stork.identity import IdentityError, RunAs, open_as, unlink_as
from stork.server.runner import AttemptProcess, AttemptResult
from stork.store.base import JobStore, Transition
from stork.transfer import verify
from stork.transfer.base import (FailureKind, Progress, TransferModule, TransferRequest,
                                 summarize_error)
from stork.transfer.options import TransferOptions
from stork.transfer.registry import Registry
from stork.urls import parse_url, with_scheme
from stork.userlog import UserLog

log = logging.getLogger(__name__)

RESYNC_S = 10.0  # how often the dispatcher re-reads the runnable jobs as a safety net
KILL_TIMEOUT = "timeout"
KILL_REMOVED = "removed"
KILL_SHUTDOWN = "shutdown"


@dataclass
class _Running:
    job: Job  # as it was when the attempt started
    attempt_no: int
    src_url: str
    dest_url: str
    module: TransferModule
    process: AttemptProcess
    last_progress_write: float = 0.0


def urls_for_attempt(job: Job, attempt_no: int) -> tuple[str, str]:
    """The URLs of attempt `attempt_no` (1-based): alt_protocols cycle after the original."""
    pairs = job.spec.alt_protocols
    index = (attempt_no - 1) % (len(pairs) + 1)
    if index == 0:
        return job.spec.src_url, job.spec.dest_url
    src_scheme, dest_scheme = pairs[index - 1]
    return with_scheme(job.spec.src_url, src_scheme), with_scheme(job.spec.dest_url, dest_scheme)


def retry_delay_s(settings: Settings, failures: int) -> float:
    """Delay before the retry that follows the `failures`-th failure (doubling, capped)."""
    return float(min(settings.retry_delay_s * 2 ** max(failures - 1, 0), settings.retry_delay_max_s))


def userlog_for(job: Job) -> UserLog | None:
    """The job's user log, written with its owner's rights."""
    if not job.spec.log:
        return None
    return UserLog(job.spec.log, job.id, opener=lambda path, flags, mode: open_as(
        RunAs.for_owner(job.owner_uid), path, flags, mode))


def write_userlog(job: Job, action: Callable[[UserLog], None]) -> None:
    """Append to the job's user log; a log that cannot be written never stops the job."""
    ulog = userlog_for(job)
    if ulog is None:
        return
    try:
        action(ulog)
    except (OSError, StorkError) as exc:
        log.warning("job %d: cannot write user log %s: %s", job.id, job.spec.log, exc)


class Dispatcher:
    def __init__(self, store: JobStore, settings: Settings, registry: Registry,
                 clock: Callable[[], float] = time.time,
                 estimator_for: Callable[[JobSpec], Estimator] | None = None,
                 eos: EosService | None = None) -> None:
        self.store = store
        self.estimator_for = estimator_for
        self.eos = eos
        self.settings = settings
        self.registry = registry
        self.clock = clock
        self.accepting = True
        self._running: dict[int, _Running] = {}
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._tick_again = False
        self._idle = threading.Condition(self._lock)
        # transfers move different files: each its own row; n and host penalties decide
        self.matrix = TaskMatrix(settings.eos_alpha, settings.eos_beta, exclusive_pairs=False)
        self._tasks: dict[int, Task] = {}  # job id -> its task in the matrix
        self._due: dict[int, float] = {}  # known jobs not yet in the matrix -> when runnable
        self._last_resync = float("-inf")

    # -- dispatching --------------------------------------------------------------------------

    def running_count(self) -> int:
        with self._lock:
            return len(self._running)

    def tick(self) -> None:
        """Start runnable jobs while slots are free. Safe to call from any thread.

        A call that finds another tick running leaves a flag instead of waiting; the running
        tick sees it after releasing the lock and goes round again, so no wake-up is lost.
        """
        self._tick_again = True
        while self._tick_again:
            if not self._tick_lock.acquire(blocking=False):
                return
            try:
                self._tick_again = False
                self._fill_slots()
            except Exception:
                log.exception("dispatch tick failed")
            finally:
                self._tick_lock.release()

    def enqueue(self, job_ids: list[int], due: float = 0.0) -> None:
        """Make transfer jobs known to the dispatcher (runnable from `due` on)."""
        with self._lock:
            for job_id in job_ids:
                if job_id not in self._tasks:
                    self._due[job_id] = due

    def admit_new(self, jobs: list[tuple[int, str, str]]) -> None:
        """Freshly submitted transfers (id, src_url, dest_url): into the matrix at once,
        without reading them back from the store."""
        with self._lock:
            for job_id, src_url, dest_url in jobs:
                self._add_task(job_id, src_url, dest_url)

    def _add_task(self, job_id: int, src_url: str, dest_url: str) -> None:
        """Put a transfer into the matrix (call with the lock held)."""
        if job_id not in self._tasks:
            task = Task(_host(src_url), _host(dest_url), f"job {job_id}", job_id)
            self._tasks[job_id] = task
            self.matrix.add(task)

    def _resync(self, now: float) -> None:
        """Pick up runnable jobs the dispatcher was not told about (start-up, safety net)."""
        for job_id, due in self.store.waiting_transfers():
            if job_id not in self._tasks and job_id not in self._due:
                self._due[job_id] = due
        self._last_resync = now

    def _admit(self, now: float) -> None:
        """Move jobs whose time has come into the task matrix."""
        ready = [job_id for job_id, due in self._due.items() if due <= now]
        for job_id in ready:
            del self._due[job_id]
            try:
                job = self.store.get(job_id)
            except JobNotFound:
                continue
            if job.state is not JobState.IDLE or job.dap_type != DapType.TRANSFER.value:
                continue
            if job.next_attempt_at > now:
                self._due[job_id] = job.next_attempt_at
                continue
            self._add_task(job.id, job.src_url, job.dest_url)

    def _release(self, job_id: int) -> None:
        """The job's attempt is over (or never started): free its place in the matrix."""
        with self._lock:
            task = self._tasks.pop(job_id, None)
            if task is None:
                return
            if task in self.matrix.running():
                self.matrix.complete(task)
            else:
                self.matrix.discard(task)

    def _fill_slots(self) -> None:
        """Start what the task matrix selects: at most STORK_MAX_NUM_JOBS at once, and no
        host beyond EOS_PENALTY_LIMIT (each running transfer adds EOS_ALPHA to both hosts)."""
        while self.accepting:
            s = self.settings
            now = self.clock()
            with self._lock:
                if now - self._last_resync >= RESYNC_S:
                    self._resync(now)
                self._admit(now)
                chosen = self.matrix.select(s.max_num_jobs, s.eos_penalty_limit,
                                            int(s.eos_selection))
            if not chosen:
                return
            for task in chosen:
                try:
                    job = self.store.get(int(task.id))
                except JobNotFound:
                    job = None
                if job is None or not self._start(job):
                    self._release(int(task.id))

    def wait_reason(self, job: Job) -> str | None:
        """Why an IDLE transfer is not running yet."""
        if job.state is not JobState.IDLE or job.dap_type != DapType.TRANSFER.value:
            return None
        now = self.clock()
        if job.next_attempt_at > now:
            return f"retry in {job.next_attempt_at - now:.0f} s (after {job.failures} failure(s))"
        if not self.accepting:
            return "stork_server is shutting down"
        s = self.settings
        with self._lock:
            task = self._tasks.get(job.id)
            if task is None:
                return "waiting for the next dispatch"
            reason = self.matrix.wait_reason(task, s.max_num_jobs, s.eos_penalty_limit)
        if reason and reason.startswith("same pair running"):
            return reason.replace("same pair running (", "same host pair busy (job ")
        if reason and reason.startswith("behind "):
            return f"behind job {reason[7:]}"
        return reason

    def matrix_snapshot(self) -> dict[str, object]:
        with self._lock:
            snapshot = self.matrix.snapshot()
        snapshot["n"] = self.settings.max_num_jobs
        snapshot["penalty_limit"] = self.settings.eos_penalty_limit
        snapshot["selection"] = int(self.settings.eos_selection)
        return snapshot

    def _start(self, job: Job) -> bool:
        attempt_no = job.attempts + 1
        src, dest = urls_for_attempt(job, attempt_no)
        module = self.registry.find(parse_url(src).scheme, parse_url(dest).scheme)
        now = self.clock()
        if module is None:
            started = self.store.start_attempt(job.id, now, src, dest, "none")
            if started is not None:
                self._finish(started, attempt_no, module=None, now=now, result=AttemptResult(
                    127, f"no transfer module handles {src} -> {dest}", 0, 0.0, None))
            return False
        try:
            run_as = RunAs.for_owner(job.owner_uid)
        except IdentityError as exc:
            started = self.store.start_attempt(job.id, now, src, dest, "none")
            if started is not None:
                self._finish(started, attempt_no, module=None, now=now,
                             result=AttemptResult(126, str(exc), 0, 0.0, None))
            return False
        started = self.store.start_attempt(job.id, now, src, dest, module.name)
        if started is None:
            return False
        write_userlog(started, lambda u: u.execute(now))
        request = TransferRequest(src, dest, job.spec.options, self.settings.default_streams,
                                  job.spec.verify_checksum, job.spec.x509proxy)
        argv: list[str] | Callable[[], list[str]] = module.command(request)
        if self._wants_optimization(job, module):
            argv = lambda: self._optimized_command(started, module, request)  # noqa: E731
        else:
            log.info("job %d attempt %d: %s", job.id, attempt_no, " ".join(argv))
        process = AttemptProcess(
            argv, output=job.spec.output, err=job.spec.err, env=module.environment(request),
            run_as=run_as, on_progress=lambda p, j=job.id: self._progress(j, p),
            on_exit=lambda r, j=job.id: self._exited(j, r))
        process.on_pid(lambda pid, j=job.id, a=attempt_no: self.store.set_pid(j, a, pid))
        with self._lock:
            self._running[job.id] = _Running(started, attempt_no, src, dest, module, process)
        process.start()
        return True

    def _wants_optimization(self, job: Job, module: TransferModule) -> bool:
        """optimization = "YES" and no explicit -p, on a module that takes a stream count."""
        return (job.spec.optimization and job.spec.options.streams is None
                and module.takes_streams and self.estimator_for is not None)

    def _optimized_command(self, job: Job, module: TransferModule,
                           request: TransferRequest) -> list[str]:
        """Ask the EOS (on the attempt's thread), record its answer, build the command."""
        assert self.estimator_for is not None
        result = self.estimator_for(job.spec).estimate(EstimateRequest(
            request.src_url, request.dest_url, job.spec.arguments, None, job.spec.use_history,
            job.spec.x509proxy, RunAs.for_owner(job.owner_uid), queued_since=job.submitted_at))
        streams = result.optimal_streams
        self.store.update_result(job.id, {
            "optimized_streams": streams,
            "predicted_throughput_mbps": result.estimated_throughput_mbps,
            "eos_model": result.model,
            "eos_from_history": result.from_history,
            "eos_shared_run": result.shared_run,
            "eos_sampling_time_s": result.sampling_time_s})
        options = request.options
        chosen = TransferRequest(request.src_url, request.dest_url, TransferOptions(
            streams, options.tcp_buffer_bytes, options.block_size_bytes,
            options.sample_size_bytes), request.default_streams, request.verify_checksum,
            request.x509proxy)
        argv = module.command(chosen)
        log.info("job %d attempt %d (EOS chose %d streams): %s", job.id, job.attempts, streams,
                 " ".join(argv))
        return argv

    def _progress(self, job_id: int, progress: Progress) -> None:
        with self._lock:
            running = self._running.get(job_id)
        if running is None:
            return
        now = time.monotonic()
        if now - running.last_progress_write < self.settings.progress_interval_s:
            return
        running.last_progress_write = now
        self.store.record_progress(job_id, running.attempt_no, progress.bytes_done,
                                   progress.rate_mbps)

    def _exited(self, job_id: int, result: AttemptResult) -> None:
        with self._lock:
            running = self._running.get(job_id)
        if running is None:
            return
        try:
            self._finish(running.job, running.attempt_no, running.module, self.clock(), result,
                         running.src_url, running.dest_url)
        except Exception:
            log.exception("job %d: cannot record the end of attempt %d", job_id, running.attempt_no)
        finally:
            with self._lock:
                self._running.pop(job_id, None)
                self._idle.notify_all()
            self._release(job_id)
        self.tick()

    # -- judging an attempt -----------------------------------------------------------------------

    def _verify(self, job: Job, module: TransferModule, src: str, dest: str) -> str | None:
        """None when the destination is right; otherwise what is wrong."""
        try:
            src_size, dest_size = verify.size_of(src), verify.size_of(dest)
            if src_size is not None and dest_size is not None and src_size != dest_size:
                return f"destination size {dest_size} differs from source size {src_size}"
            if job.spec.verify_checksum:
                src_sum, dest_sum = verify.md5_of(src), verify.md5_of(dest)
                if src_sum is None or dest_sum is None:
                    if not module.verifies_checksum:
                        return "verify_checksum is set but the checksums cannot be computed"
                elif src_sum != dest_sum:
                    return f"destination MD5 {dest_sum} differs from source MD5 {src_sum}"
        except verify.VerifyError as exc:
            return str(exc)
        return None

    def _finish(self, job: Job, attempt_no: int, module: TransferModule | None, now: float,
                result: AttemptResult, src: str = "", dest: str = "") -> None:
        reason = result.killed_reason
        if reason == KILL_REMOVED:
            if dest:
                self._remove_partial(job, dest)
            return
        if reason == KILL_SHUTDOWN:
            if dest:
                self._remove_partial(job, dest)
            self.store.finish_attempt(job.id, attempt_no, now, Transition(
                JobState.IDLE, "requeue", "interrupted", exit_code=result.exit_code,
                error="stork_server shut down during the attempt",
                failure_kind=FailureKind.INTERRUPTED.value, bytes_done=result.bytes_done,
                detail={"reason": "shutdown"}))
            return
        error: str | None
        partial = False  # the tool was killed mid-write: what it wrote is partial
        if reason == KILL_TIMEOUT:
            kind = FailureKind.TIMEOUT
            error = (f"killed after running longer than STORK_MAXDELAY_INMINUTES = "
                     f"{self.settings.max_delay_min:g}")
        elif result.exit_code == 0 and module is not None:
            error = self._verify(job, module, src, dest)
            if error is None:
                self._complete(job, attempt_no, module, now, result, src, dest)
                return
            kind = FailureKind.VERIFY
        elif module is None:
            kind, error = FailureKind.PERMANENT, result.stderr_tail
        else:
            failure = module.judge(result.exit_code, result.stderr_tail)
            kind, error, partial = failure.kind, failure.message, failure.tool_killed
        if dest and (kind.retryable or partial):
            self._remove_partial(job, dest)  # never leave a partial file that looks like a result
        self._fail(job, attempt_no, now, result.exit_code, kind, error)

    @staticmethod
    def _remove_partial(job: Job, dest: str) -> None:
        """Delete a partial destination with the rights of the job's owner."""
        try:
            run_as = RunAs.for_owner(job.owner_uid)
        except IdentityError:
            return
        verify.remove(dest, unlink=lambda path: unlink_as(run_as, path))

    def _complete(self, job: Job, attempt_no: int, module: TransferModule, now: float,
                  result: AttemptResult, src: str, dest: str) -> None:
        size = verify.size_of(dest) if dest else None
        moved = size if size is not None else result.bytes_done
        achieved = moved * 8 / 1e6 / result.duration_s if result.duration_s > 0 else 0.0
        facts: dict[str, object] = {"achieved_throughput_mbps": round(achieved, 3),
                                    "transfer_time_s": round(result.duration_s, 3)}
        streams = self._streams_used(job, module)
        if streams is not None:
            facts["streams_used"] = streams
        done = self.store.finish_attempt(job.id, attempt_no, now, Transition(
            JobState.COMPLETED, "completed", "completed", exit_code=0, bytes_done=moved,
            detail={"duration_s": round(result.duration_s, 3)}, result=facts))
        if done is None:
            return
        write_userlog(done, lambda u: u.terminated(now, 0, done.bytes_done))
        if self.eos is not None and streams is not None:
            try:
                self.eos.record_transfer(src, dest, job.spec.arguments, streams, moved,
                                         result.duration_s, job.id)
            except Exception:
                log.exception("job %d: cannot record the transfer in the history", job.id)

    def _streams_used(self, job: Job, module: TransferModule) -> int | None:
        if not module.takes_streams:
            return None
        fresh = self.store.get(job.id)
        return int(job.spec.options.streams or fresh.result.get("optimized_streams")
                   or self.settings.default_streams)

    def _fail(self, job: Job, attempt_no: int, now: float, exit_code: int, kind: FailureKind,
              error: str) -> None:
        limit = job.spec.max_retries if job.spec.max_retries is not None else self.settings.max_retry
        failures = job.failures + 1
        retry = kind.retryable and failures <= limit
        short = summarize_error(error)
        if retry:
            delay = retry_delay_s(self.settings, failures)
            self.enqueue([job.id], due=now + delay)
            done = self.store.finish_attempt(job.id, attempt_no, now, Transition(
                JobState.IDLE, "attempt_failed", "failed", count_failure=True,
                next_attempt_at=now + delay, exit_code=exit_code, error=error,
                failure_kind=kind.value, detail={"retry_in_s": delay}))
            if done is not None:
                write_userlog(done, lambda u: u.generic(
                    now, f"attempt {attempt_no} exited with status {exit_code} ({kind.value}): "
                         f"{short}; rescheduling in {delay:g} s"))
            return
        why = "permanent failure" if not kind.retryable else f"retry limit {limit} reached"
        done = self.store.finish_attempt(job.id, attempt_no, now, Transition(
            JobState.FAILED, "failed", "failed", count_failure=True, exit_code=exit_code,
            error=error, failure_kind=kind.value, detail={"why": why}))
        if done is not None:
            def log_failure(u: UserLog) -> None:
                u.generic(now, f"attempt {attempt_no} exited with status {exit_code} "
                               f"({kind.value}): {short}; {why}")
                u.terminated(now, exit_code or 1)

            write_userlog(done, log_failure)

    # -- control -------------------------------------------------------------------------------

    def remove(self, job_id: int, caller_uid: int, caller: str) -> Job:
        job = self.store.get(job_id)
        if caller_uid != 0 and caller_uid != job.owner_uid:
            raise PermissionDenied(f"job {job_id} belongs to {job.owner}; only its owner or root "
                                   f"may remove it")
        now = self.clock()
        _, after = self.store.remove(job_id, now, caller)
        with self._lock:
            running = self._running.get(job_id)
            self._due.pop(job_id, None)
        if running is not None:
            running.process.kill(KILL_REMOVED)
        else:
            self._release(job_id)
        write_userlog(after, lambda u: u.aborted(now, f"removed by {caller} via stork_rm"))
        return after

    def check_hung(self) -> list[int]:
        """Kill attempts running past STORK_MAXDELAY_INMINUTES; returns their job ids."""
        limit_s = self.settings.max_delay_min * 60
        with self._lock:
            hung = [r for r in self._running.values()
                    if time.monotonic() - r.process.start_time > limit_s]
        for running in hung:
            log.warning("job %d: attempt %d ran past %g min, killing it", running.job.id,
                        running.attempt_no, self.settings.max_delay_min)
            running.process.kill(KILL_TIMEOUT)
        return [r.job.id for r in hung]

    def stop_accepting(self) -> None:
        self.accepting = False

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no attempt runs; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def kill_all(self, reason: str = KILL_SHUTDOWN) -> None:
        with self._lock:
            running = list(self._running.values())
        for item in running:
            item.process.kill(reason)

    def recover(self) -> list[Job]:
        """At start-up: requeue jobs a dead daemon left RUNNING, killing any leftover child."""
        jobs = self.store.requeue_running(self.clock(), "stork_server stopped during the attempt")
        for job in jobs:
            if job.pid:
                _kill_leftover(job.pid)
            self._remove_partial(job, urls_for_attempt(job, job.attempts)[1])  # killed attempt's
            write_userlog(job, lambda u, j=job: u.generic(
                self.clock(), f"attempt {j.attempts} interrupted: stork_server restarted; "
                              "job requeued"))
        return jobs


def _host(url: str) -> str:
    """The machine a URL touches (file URLs: this one), for host penalties."""
    return parse_url(url).host or "localhost"


def _kill_leftover(pid: int) -> None:
    """SIGKILL a transfer child that outlived its daemon (PDEATHSIG normally prevents it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return
    if b"globus-url-copy" in cmdline or b"stork.transfer" in cmdline:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
