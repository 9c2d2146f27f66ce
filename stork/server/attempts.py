"""Transfer attempts: start, watch, end, stop, and recover after a crash (`Attempts`).

An attempt is planned (`stork.server.attempt_plan.plan_attempt`: its URLs, module and owner)
when the task matrix selects the job, launched (`Attempts.launch`: IDLE -> RUNNING in the
store, user log 001, the child process) once its parameters are final, and ended on its own
thread: the facts are gathered (the module's verdict on a non-zero exit, or the destination's
size and checksum after exit 0, `stork.server.attempt_ends.verify_destination`), `judge`
decides, and the verdict is applied (partial file removed, the transition committed, then
the user log and the EOS history). `on_end` then tells the dispatcher the slot is free (and
when to try again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stork.config import LiveSettings, Settings
from stork.engine.items import Span, holds
from stork.errors import ChecksumMismatch
from stork.job import FileState, Job
from stork.server import events, kept_tokens
from stork.server.admission import host_of
from stork.server.attempt_ends import (
    VERIFY_REASK_S,
    dest_size,
    owner_ends,
    remove_partial,
    source_checksum_type,
    still_there,
    verify_destination,
)
from stork.server.attempt_plan import NotLaunchable, Plan, as_ranges
from stork.server.dataset_run import DatasetRun
from stork.server.file_run import LANDED_KEY, FileRun, landed_of
from stork.server.flow_tuning import HISTORY_ROWS, optimizer_of, tunes_online
from stork.server.judge import (
    AttemptOutcome,
    DatasetFacts,
    DatasetOutcome,
    HistoryRecord,
    Verdict,
    judge,
    judge_dataset,
    urls_for_attempt,
)
from stork.server.runner import AttemptProcess, AttemptResult, StopReason
from stork.store.base import HostLimit, JobStore
from stork.transfer import destination, verify
from stork.transfer.base import Progress
from stork.transfer.destination import Destination
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.proxy import expiry_warning
from stork.transfer.rtt import PathRtts
from stork.transfer.tokens import expiry_warning as token_expiry_warning
from stork.translog import TransferRecord
from stork.userlog import executing, note

log = logging.getLogger(__name__)

# the dispatcher's hook: (job id, when to try again or None), after the attempt's end
OnEnd = Callable[[int, float | None], None]


@dataclass
class _Running:
    plan: Plan
    process: AttemptProcess | DatasetRun | FileRun
    job: Job  # as the store started the attempt
    last_progress_write: float = 0.0
    started: float = field(default_factory=time.monotonic)
    lost: bool = False  # the lease is lost: the end is not ours to record


def host_limit(plan: Plan, settings: Settings) -> HostLimit | None:
    """The cluster-wide limit a shared store holds the attempt to: the task matrix's host
    penalty (EOS_PENALTY_LIMIT / EOS_ALPHA transfers per host), counted over every node."""
    if settings.eos_alpha <= 0:
        return None
    most = int(settings.eos_penalty_limit / settings.eos_alpha + 1e-9)
    return HostLimit(host_of(plan.src_url), host_of(plan.dest_url), most)


class Attempts:
    """The attempts running now, keyed by job id."""

    def __init__(self, store: JobStore, settings: Settings | LiveSettings, on_end: OnEnd,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._live = LiveSettings.of(settings)
        self.clock = clock
        self._on_end = on_end
        self._rtts = PathRtts()  # the transfer log's RTTs, each path measured every few minutes
        self._running: dict[int, _Running] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    @property
    def settings(self) -> Settings:
        return self._live.current

    def count(self) -> int:
        return len(self._running)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._running

    # -- starting -----------------------------------------------------------------------------

    def launch(self, plan: Plan) -> bool:
        """IDLE -> RUNNING and start the tool; False (nothing started) when the job is no
        longer IDLE. The attempt is registered before the store call, so a removal that
        lands in between stops it before its child exists."""
        job = plan.job
        job_id, attempt_no = job.id, plan.attempt_no
        process: AttemptProcess | DatasetRun | FileRun
        if not job.spec.is_dataset:  # what the tool may be asked (one stream into a FIFO)
            plan = plan.claimed(destination.look(plan.dest_url, plan.run_as))
        if as_ranges(plan, self.settings):
            argv = ["ranges", plan.src_url, plan.dest_url]
            landed, range_size = resumable(plan)
            plan = dataclasses.replace(plan, landed=landed)
            process = FileRun(
                job_id, plan.request, plan.module, settings=self.settings, run_as=plan.run_as,
                landed=list(landed), range_size=range_size, output=job.spec.output,
                err=job.spec.err, write_result=lambda d: self.store.update_result(job_id, d),
                rtt_s=lambda: self._rtts.of([plan.src_url, plan.dest_url]),
                add_transfers=self.store.add_transfers,
                history=(lambda: self.store.transfers(limit=HISTORY_ROWS))
                if tunes_online(job.spec, self.settings) else None,
                controller=optimizer_of(job.spec, self.settings) or "climb",
                on_progress=lambda p: self._progress(job_id, p),
                on_exit=lambda r: self._exited(job_id, r),
                on_pid=lambda pid: self.store.set_pid(job_id, attempt_no, pid))
        elif job.spec.is_dataset:
            assert isinstance(plan.module, GridFtpModule)
            argv = ["dataset", f"pass {attempt_no}"]
            process = DatasetRun(job, attempt_no, store=self.store, settings=self.settings,
                                 module=plan.module, run_as=plan.run_as, clock=self.clock,
                                 on_exit=lambda o: self._dataset_exited(job_id, o),
                                 sharing=lambda src, dest: self.sharing(job_id, src, dest),
                                 tokens=plan.tokens)
        else:
            argv = plan.module.command(plan.request)
            process = AttemptProcess(
                argv, output=job.spec.output, err=job.spec.err,
                env=plan.module.environment(plan.request), run_as=plan.run_as,
                on_progress=lambda p: self._progress(job_id, p),
                on_exit=lambda r: self._exited(job_id, r),
                on_pid=lambda pid: self.store.set_pid(job_id, attempt_no, pid))
        with self._lock:
            if job.id in self._running:
                return False
            self._running[job.id] = _Running(plan, process, job)
        now = self.clock()
        limit = host_limit(plan, self.settings) if self.store.shared else None
        try:
            started = self.store.start_attempt(job.id, now, plan.src_url, plan.dest_url,
                                               plan.module.name, limit)
        except BaseException:
            self._forget(job.id)
            raise
        if started is None:
            self._forget(job.id)
            return False
        self._running[job.id].job = started
        if self.store.shared:  # the ad names the node of each attempt: attempt_nodes[N - 1],
            # from the attempts table, written with each start: a node killed between its
            # start and this write still has its attempt named
            nodes = [a.node or "" for a in self.store.attempts(job.id)]
            self.store.update_result(job.id, {"attempt_nodes": nodes})
        if not job.spec.is_dataset:  # the attempt is ours (another node may have lost it)
            plan = self._claim(job.id, plan)
        if not (job.spec.is_dataset and started.attempts > 1):  # DAGMan: one execute event
            events.record(started, now, [executing()])
        chose = f" (EOS chose {plan.streams} streams)" if plan.optimized else ""
        if plan.request.ranges:
            chose += (f" (the samples wrote {plan.bytes_in_destination} bytes into the "
                      f"destination; the rest as ranges "
                      f"{', '.join(f'{o}+{n}' for o, n in plan.request.ranges)})")
        log.info("job %d attempt %d%s: %s", job.id, started.attempts, chose, " ".join(argv))
        process.start()
        if plan.proxy is not None or plan.tokens.claims:
            self._flag_expiry(plan, started, now)
        return True

    def _claim(self, job_id: int, plan: Plan) -> Plan:
        """Claim the destination of a started attempt before its tool exists (what it may
        remove later), and keep the claim on the job, so a crash removes no more."""
        dest = destination.claim(plan.dest_url, plan.run_as)
        if (plan.bytes_in_destination or plan.landed) \
                and dest.kind is destination.DestKind.REGULAR:
            # the EOS's samples made it, or the ranges an attempt before this one landed
            dest = dataclasses.replace(dest, created=True)
        plan = dataclasses.replace(plan, destination=dest)
        self._running[job_id].plan = plan
        self.store.update_result(job_id, {"destination_claim": dest.to_text(), **dest.facts()})
        return plan

    def _flag_expiry(self, plan: Plan, job: Job, now: float) -> None:
        """Flag on the job (ad and stork_status) a proxy or a bearer token that will expire
        before the transfer's estimated end: its size at the EOS's predicted rate, else at
        STORK_LINK_MBPS (the fastest it could go)."""
        size = job.bytes_total if job.spec.is_dataset else job.spec.size_bytes
        if size is None and not job.spec.is_dataset:
            # asked twice: a server busy with the transfer just started may fail one answer
            size = verify.size_asked_twice(plan.src_url, plan.ends, VERIFY_REASK_S)
            if size is None:
                log.warning("job %d: the size of %s is unknown, so whether its credentials "
                            "last until the end cannot be told", job.id, plan.src_url)
        rate = float(job.result.get("predicted_throughput_mbps") or self.settings.link_mbps)
        warning = expiry_warning(plan.proxy, now, size, rate) if plan.proxy else None
        if warning is not None:
            log.warning("job %d: %s", job.id, warning["x509proxy_warning"])
        token_warnings = [text for path, claims in plan.tokens.claims.items()
                          if (text := token_expiry_warning(path, claims, now, size, rate))]
        if token_warnings:
            log.warning("job %d: %s", job.id, "; ".join(token_warnings))
            warning = {**(warning or {}), "bearer_token_expires_before_end": True,
                       "bearer_token_warning": "; ".join(token_warnings)}
        if warning is None:
            return
        try:
            self.store.update_result(job.id, warning)
        except Exception:
            log.exception("job %d: cannot flag the credential's expiry", job.id)

    def refuse(self, job: Job, problem: NotLaunchable) -> None:
        """Count an attempt that cannot start as one that failed permanently."""
        now = self.clock()
        started = self.store.start_attempt(job.id, now, problem.src_url, problem.dest_url, "none")
        if started is None:
            return
        outcome = AttemptOutcome(started.attempts, AttemptResult(problem.exit_code, str(problem),
                                                                 0, 0.0), failure=problem.failure)
        self._apply(started, started.attempts, judge(started, outcome, self.settings, now), now,
                    problem.src_url, None)

    def _forget(self, job_id: int) -> None:
        with self._lock:
            self._running.pop(job_id, None)
            self._idle.notify_all()

    # -- while it runs ------------------------------------------------------------------------

    def _progress(self, job_id: int, progress: Progress) -> None:
        running = self._running.get(job_id)
        if running is None:
            return
        now = time.monotonic()
        if now - running.last_progress_write < self.settings.progress_interval_s:
            return
        running.last_progress_write = now
        self.store.record_progress(job_id, running.plan.attempt_no, progress.bytes_done,
                                   progress.rate_mbps)

    # -- its end ------------------------------------------------------------------------------

    def _exited(self, job_id: int, result: AttemptResult) -> None:
        running = self._running.get(job_id)
        if running is None:
            return
        retry_at: float | None = None
        try:
            if not self._lost(running):
                retry_at = self._finish(running, result)
        except Exception:
            log.exception("job %d: cannot record the end of attempt %d", job_id,
                          running.plan.attempt_no)
        finally:
            self._forget(job_id)
            self._on_end(job_id, retry_at)

    def _dataset_exited(self, job_id: int, outcome: DatasetOutcome) -> None:
        running = self._running.get(job_id)
        if running is None:
            return
        retry_at: float | None = None
        try:
            if not self._lost(running):
                retry_at = self._finish_dataset(running, outcome)
        except Exception:
            log.exception("job %d: cannot record the end of pass %d", job_id,
                          running.plan.attempt_no)
        finally:
            self._forget(job_id)
            self._on_end(job_id, retry_at)

    def _finish_dataset(self, running: _Running, outcome: DatasetOutcome) -> float | None:
        """The facts of a pass read back from the store, judged, applied."""
        job_id, attempt_no = running.job.id, running.plan.attempt_no
        job = self.store.get(job_id)
        pending = self.store.files(job_id, [FileState.PENDING])
        failed = self.store.files(job_id, [FileState.FAILED], limit=5)
        facts = DatasetFacts(outcome, attempt_no,
                             min((f.next_attempt_at for f in pending), default=None),
                             tuple((f.rel_path, f.last_error or "") for f in failed),
                             failed[0].failure_kind if failed else None)
        now = self.clock()
        verdict = judge_dataset(job, facts, self.settings, now)
        return self._apply(job, attempt_no, verdict, now, running.plan.src_url, None)

    def _finish(self, running: _Running, result: AttemptResult) -> float | None:
        plan = running.plan
        outcome = self._outcome(plan, result)
        now = self.clock()
        verdict = judge(running.job, outcome, self.settings, now)
        if verdict.remove_partial and isinstance(running.process, FileRun):
            self.store.update_result(running.job.id, {LANDED_KEY: []})  # they go with it
        # a file sent as ranges put its flow's stretches in the transfer log already
        logged = isinstance(running.process, FileRun) and running.process.logged_flow
        return self._apply(running.job, plan.attempt_no, verdict, now, plan.src_url,
                           plan.destination, log_transfer=not logged)

    def _outcome(self, plan: Plan, result: AttemptResult) -> AttemptOutcome:
        """The facts the judge needs (this is where the destination is looked at)."""
        streams = result.streams if result.streams is not None else plan.streams
        facts = AttemptOutcome(plan.attempt_no, result, plan.dest_url, streams=streams,
                               bytes_before=plan.bytes_in_destination,
                               dest_known=plan.destination is not None
                               and plan.destination.known)
        if result.killed_reason is not None:
            return facts
        if result.exit_code != 0:
            failure = result.failure or plan.module.judge(result.exit_code, result.stderr_tail)
            failure = plan.tokens.explain(failure, plan.src_url, plan.dest_url)
            return dataclasses.replace(facts, failure=failure)
        problem, size = verify_destination(plan)
        if plan.destination is not None and plan.destination.is_sink:
            self._record_source_checksum(plan)
        if isinstance(problem, ChecksumMismatch):
            return dataclasses.replace(facts, checksum_error=str(problem))
        if problem is not None:
            return dataclasses.replace(facts, verify_error=str(problem))
        return dataclasses.replace(facts, dest_size=size)

    def _record_source_checksum(self, plan: Plan) -> None:
        """A sink's transfer records the source's checksum the job asked to verify (the
        destination's cannot be read back); the ad's `checksum` was compared already."""
        kind = source_checksum_type(plan)
        if kind is None or plan.job.spec.checksum:
            return
        try:
            value = verify.asked_twice(lambda: verify.checksum_of(plan.src_url, kind, plan.ends),
                                       VERIFY_REASK_S)
        except verify.VerifyError as exc:
            log.warning("job %d: %s", plan.job.id, exc)
            return
        self.store.update_result(plan.job.id, {"source_checksum": f"{kind}:{value}"})

    def _apply(self, job: Job, attempt_no: int, verdict: Verdict, now: float, src_url: str,
               dest: Destination | None, *, log_transfer: bool = True) -> float | None:
        """Carry out a verdict; returns when to try again (None: not to be retried, or the
        transition did not land because the job moved on). `dest`: the attempt's claimed
        destination (None: no tool ran, or a dataset, whose files are its pass's)."""
        dest_url = dest.url if dest is not None else ""
        if verdict.remove_partial and dest is not None:
            remove_partial(job, dest)
        if verdict.transition is None:
            return None
        done = self.store.finish_attempt(job.id, attempt_no, now, verdict.transition)
        if done is None:
            return None
        events.record(done, now, verdict.userlog)
        kept_tokens.release(self.settings.state_dir, done)
        if verdict.history is not None and log_transfer:
            self._log_transfer(job, verdict.history, now, src_url, dest_url)
        return verdict.retry_at

    def _log_transfer(self, job: Job, h: HistoryRecord, now: float, src_url: str,
                      dest_url: str) -> None:
        """A finished single-file transfer into the transfer log (one file, cc 1, pp 1), with
        the path's round trip as the daemon's TCP connects to the ends measure it (right after
        the transfer when the path's last measurement is older than a few minutes,
        `stork.transfer.rtt.PathRtts`; None for a local copy or an end that did not answer)
        and STORK_LINK_MBPS as its bottleneck."""
        moved = h.bytes_moved
        record = TransferRecord(
            time=now - h.duration_s, src_host=host_of(src_url), dest_host=host_of(dest_url),
            rtt_s=self._rtts.of([src_url, dest_url]), bandwidth_bps=self.settings.link_mbps * 1e6,
            buffer_bytes=job.spec.options.tcp_buffer_bytes, file_size_bytes=float(moved),
            file_count=1, cc=1, p=h.streams, pp=1, fast=False, bytes_moved=moved,
            duration_s=h.duration_s,
            throughput_mbps=round(moved * 8 / 1e6 / h.duration_s, 3) if h.duration_s else 0.0,
            sharing=self.sharing(job.id, src_url, dest_url), job_id=job.id)
        try:
            self.store.add_transfers([record])
        except Exception:
            log.exception("job %d: cannot add the transfer to the transfer log", job.id)

    def sharing(self, job_id: int, src_url: str, dest_url: str) -> int:
        """Other attempts running now that touch either host of this pair (they share the
        link or an end): the transfer log's `sharing`."""
        hosts = {host_of(src_url), host_of(dest_url)}
        with self._lock:
            others = [r for i, r in self._running.items() if i != job_id]
        return sum(1 for r in others
                   if {host_of(r.plan.src_url), host_of(r.plan.dest_url)} & hosts)

    # -- leases (a shared store) ----------------------------------------------------------------

    def leased(self) -> dict[int, float]:
        """Job id -> when (monotonic) its attempt started, for the lease renewal."""
        with self._lock:
            return {i: r.started for i, r in self._running.items()}

    def lose(self, job_id: int, started_before: float) -> bool:
        """The job's lease is lost (another node may run it now): stop its attempt, and
        record nothing of its end, not even the removal of a partial destination, which may
        be the other node's file by now. Only an attempt started before `started_before`
        (a newer one has a lease of its own). False when there is none."""
        with self._lock:
            running = self._running.get(job_id)
            if running is None or running.lost or running.started >= started_before:
                return False
            running.lost = True
        log.warning("job %d: attempt %d lost its lease; stopping it without recording its "
                    "end", job_id, running.plan.attempt_no)
        running.process.kill(StopReason.LEASE_LOST)
        return True

    @staticmethod
    def _lost(running: _Running) -> bool:
        if running.lost:
            log.warning("job %d: the end of attempt %d is not recorded: its lease was lost",
                        running.job.id, running.plan.attempt_no)
        return running.lost

    # -- stopping -----------------------------------------------------------------------------

    def kill(self, job_id: int, reason: StopReason) -> bool:
        """Stop the job's attempt; False when none runs."""
        with self._lock:
            running = self._running.get(job_id)
        if running is None:
            return False
        running.process.kill(reason)
        return True

    def check_hung(self) -> list[int]:
        """Kill attempts running past STORK_MAXDELAY_INMINUTES; returns their job ids."""
        limit_s = self.settings.max_delay_min * 60
        with self._lock:
            hung = [r for r in self._running.values()
                    if time.monotonic() - r.process.start_time > limit_s]
        for running in hung:
            log.warning("job %d: attempt %d ran past %g min, killing it", running.job.id,
                        running.plan.attempt_no, self.settings.max_delay_min)
            running.process.kill(StopReason.TIMEOUT)
        return [r.job.id for r in hung]

    def kill_all(self, reason: StopReason = StopReason.SHUTDOWN) -> None:
        with self._lock:
            running = list(self._running.values())
        for item in running:
            item.process.kill(reason)

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

    # -- after a crash ------------------------------------------------------------------------

    def recover(self) -> list[Job]:
        """At start-up: requeue jobs a dead daemon left RUNNING (the interrupted attempt
        counts as a failure), kill any child of theirs that survived, remove the partial
        destination of the killed attempt, and note it in the user log."""
        now = self.clock()
        jobs = self.store.requeue_running(now, "stork_server stopped during the attempt")
        for job in jobs:
            if job.pid:
                kill_leftover(job.pid)
            if not job.spec.is_dataset:  # a dataset's files in doubt are checked next pass
                url = urls_for_attempt(job, job.attempts)[1]
                claim = destination.stored_claim(job.result, url)
                landed = landed_of(job.result)[0]
                if landed and still_there(claim, job.owner_uid, landed,
                                          functools.partial(owner_ends, job, url)):
                    log.info("job %d: %d bytes of %s landed as ranges: kept, the next "
                             "attempt sends the rest", job.id, sum(e - s for s, e in landed),
                             url)
                else:
                    remove_partial(job, claim)
                    if landed:
                        self.store.update_result(job.id, {LANDED_KEY: []})
            events.record(job, now, [note(f"attempt {job.attempts} interrupted: stork_server "
                                          "restarted; job requeued")])
        return jobs


def resumable(plan: Plan) -> tuple[tuple[Span, ...], int | None]:
    """What of the file an attempt before this one landed as ranges, and their size: only
    when the destination is still the very file it wrote (the claim kept on the job names
    it); else nothing (the whole file is sent)."""
    landed, range_size = landed_of(plan.job.result)
    if not landed:
        return (), None
    claim = destination.stored_claim(plan.job.result, plan.dest_url)
    if claim.file is None:  # an end that cannot name a file: its size speaks
        if not holds(landed, dest_size(plan.dest_url, plan.ends)):
            return (), None
    elif plan.destination is None or plan.destination.file is None \
            or plan.destination.file.key != claim.file.key:
        return (), None
    return tuple(landed), range_size


def kill_leftover(pid: int) -> None:
    """SIGKILL a transfer child that outlived its daemon (PDEATHSIG normally prevents it):
    only when /proc says the pid still runs a transfer tool, never a reused pid's process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return
    if b"globus-url-copy" in cmdline or b"stork.transfer" in cmdline \
            or b"gfalhelper" in cmdline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
