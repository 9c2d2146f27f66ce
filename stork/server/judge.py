"""What an attempt's end means: a pure function from facts to the transition to apply.

`judge(job, outcome, settings, now)` takes the job as its attempt started, what happened
(`AttemptOutcome`: the child's result, the transfer module's judgement of a non-zero exit as
a `TransferError`, the verification, the streams used), the settings and the time, and
returns a `Verdict`: the store transition (or none, for a removed job), the user log events
to append once it is committed, whether the partial destination must go, when to try again,
and what to remember in the EOS history.
No processes, no store, no clock: the caller gathers the facts and applies the verdict.

Policy, as docs/ARCHITECTURE.md describes it:
- exit 0 and a verified destination: COMPLETED (user log 005, return value 0);
- a retryable failure within the retry limit: IDLE again after STORK_RETRY_DELAY *
  2^(failures-1), capped by STORK_RETRY_DELAY_MAX (user log 008);
- a permanent failure or the retry limit reached: FAILED (user log 008 and 005);
- removed: nothing to write (the removal did), the partial file goes;
- daemon shutdown: IDLE without counting a failure, the partial file goes;
- running past STORK_MAXDELAY_INMINUTES: a timeout failure.
A retryable failure, a timeout, a verify failure or a tool killed by a signal leaves no
partial destination file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stork.config import Settings
from stork.errors import (
    ChecksumMismatch,
    DestinationMismatch,
    RetryableTransferError,
    TransferError,
    TransferInterrupted,
    TransferTimedOut,
)
from stork.job import FileState, Job, JobState
from stork.server.runner import AttemptResult, StopReason
from stork.store.base import FileResult, Transition
from stork.transfer.base import summarize_error
from stork.urls import with_scheme
from stork.userlog import LogEvent, note, terminated

MAX_FAILED_NAMED = 5  # failed files a dataset's error names (stork_status -files has them all)


@dataclass(frozen=True)
class AttemptOutcome:
    """Everything known about an attempt's end, gathered before judging it."""

    attempt_no: int
    result: AttemptResult
    dest_url: str = ""  # "" when no tool ran (there is no partial file to remove)
    failure: TransferError | None = None  # the module's judgement of a non-zero exit
    verify_error: str | None = None  # after exit 0: what is wrong with the destination
    checksum_error: str | None = None  # after exit 0: the destination's checksum is wrong
    dest_size: int | None = None  # after exit 0: the destination's size, when known
    streams: int | None = None  # parallel streams used (modules that take -p)
    # bytes already in the destination before the attempt (the EOS's in-place samples): the
    # attempt sent the rest, and a failure leaves a file with holes
    bytes_before: int = 0
    # the attempt's claim knows what it found at the destination (`Destination.known`)
    dest_known: bool = False


@dataclass
class DatasetOutcome:
    """What a pass did, for the judge (the files' states are in the store)."""

    stopped: StopReason | None = None
    listing_error: TransferError | None = None  # the dataset could not be listed
    chunks: list[str] = field(default_factory=list)  # "small cc=8 p=1 pp=4 (on)", ...
    bytes_moved: int = 0
    files_done: int = 0
    duration_s: float = 0.0
    internal_error: str | None = None


@dataclass(frozen=True)
class DatasetFacts:
    """A dataset job after a pass, read back from the store for `judge_dataset`."""

    outcome: DatasetOutcome
    attempt_no: int
    next_due: float | None  # the earliest retry time of its PENDING files; None: none left
    failed_errors: tuple[tuple[str, str], ...] = ()  # (path, error) of some FAILED files
    failure_kind: str | None = None  # the first FAILED file's


@dataclass(frozen=True)
class HistoryRecord:
    """A finished transfer for the EOS history (written after the transition lands)."""

    streams: int
    bytes_moved: int
    duration_s: float


@dataclass(frozen=True)
class Verdict:
    transition: Transition | None  # None: nothing to write (the job was removed)
    userlog: tuple[LogEvent, ...] = ()  # appended after the transition is committed
    remove_partial: bool = False  # delete the destination (with the owner's rights)
    retry_at: float | None = None  # when the job becomes runnable again (unix seconds)
    history: HistoryRecord | None = None


def urls_for_attempt(job: Job, attempt_no: int) -> tuple[str, str]:
    """The URLs of attempt `attempt_no` (1-based): alt_protocols cycle after the original,
    so attempt N uses the original pair when (N-1) mod (1 + len(alt_protocols)) is 0."""
    pairs = job.spec.alt_protocols
    index = (attempt_no - 1) % (len(pairs) + 1)
    if index == 0:
        return job.spec.src_url, job.spec.dest_url
    src_scheme, dest_scheme = pairs[index - 1]
    return with_scheme(job.spec.src_url, src_scheme), with_scheme(job.spec.dest_url, dest_scheme)


def retry_delay_s(settings: Settings, failures: int) -> float:
    """Delay before the retry that follows the `failures`-th failure (doubling, capped)."""
    return float(min(settings.retry_delay_s * 2 ** max(failures - 1, 0),
                     settings.retry_delay_max_s))


def retry_limit(job: Job, settings: Settings) -> int:
    """The job's max_retries, else STORK_MAX_RETRY."""
    return job.spec.max_retries if job.spec.max_retries is not None else settings.max_retry


def judge_file(job: Job, index: int, failures: int, failure: TransferError,
               settings: Settings, now: float) -> FileResult:
    """A dataset file that failed when sent alone (`failure`, its own error): PENDING again
    after the retry delay while the failure is retryable and the file's failures (`failures`
    before this one) stay within the job's limit, else FAILED. Either way the failure is
    counted and named on the file."""
    failures += 1
    error = str(failure)
    if failure.retryable and failures <= retry_limit(job, settings):
        return FileResult(index, FileState.PENDING, count_failure=True,
                          next_attempt_at=now + retry_delay_s(settings, failures), error=error,
                          failure_kind=failure.kind.value)
    return FileResult(index, FileState.FAILED, count_failure=True, error=error,
                      failure_kind=failure.kind.value)


def throughput_mbps(bytes_moved: int, seconds: float) -> float:
    """Megabits (10**6 bits) per second, rounded to 3 decimals; 0 for no time."""
    return round(bytes_moved * 8 / 1e6 / seconds, 3) if seconds > 0 else 0.0


def judge(job: Job, outcome: AttemptOutcome, settings: Settings, now: float) -> Verdict:
    """The verdict on attempt `outcome.attempt_no` of `job` (the job as it started)."""
    result = outcome.result
    has_dest = bool(outcome.dest_url)
    stop = result.killed_reason
    if stop is StopReason.REMOVED:
        return Verdict(None, remove_partial=has_dest)
    if stop is StopReason.SHUTDOWN:
        return Verdict(Transition(
            JobState.IDLE, "requeue", "interrupted", exit_code=result.exit_code,
            error="stork_server shut down during the attempt",
            failure_kind=TransferInterrupted.kind.value, bytes_done=result.bytes_done,
            detail={"reason": "shutdown"}), remove_partial=has_dest)
    failure: TransferError
    if stop is StopReason.TIMEOUT:
        failure = TransferTimedOut(settings.max_delay_min)
    elif result.exit_code == 0 and outcome.failure is None:
        if outcome.checksum_error is not None:
            failure = ChecksumMismatch(outcome.checksum_error)
        elif outcome.verify_error is None:
            return _completed(outcome)
        else:
            failure = DestinationMismatch(outcome.verify_error)
    else:
        failure = outcome.failure or RetryableTransferError(
            result.stderr_tail or f"exit status {result.exit_code}", exit_code=result.exit_code)
    # never leave a partial file that looks like a result (nor one with the samples' ranges);
    # a permanent failure keeps a remote destination as it was (it may be the user's, and
    # cannot be told from what the attempt wrote), but not a file its claim knows: the
    # empty one it created (cp leaves none for a missing source) or one the tool changed
    remove = has_dest and (failure.retryable or failure.tool_killed or outcome.bytes_before > 0
                           or outcome.dest_known)
    return _failed(job, outcome, failure, settings, now, remove)


def _completed(outcome: AttemptOutcome) -> Verdict:
    result = outcome.result
    moved = outcome.dest_size if outcome.dest_size is not None else result.bytes_done
    # the attempt's own bytes: after in-place samples it sent only the rest
    sent = max(moved - outcome.bytes_before, 0) if outcome.dest_size is not None else moved
    facts: dict[str, object] = {
        "achieved_throughput_mbps": throughput_mbps(sent, result.duration_s),
        "transfer_time_s": round(result.duration_s, 3)}
    if outcome.streams is not None:
        facts["streams_used"] = outcome.streams
    if outcome.bytes_before:
        facts["bytes_sent_by_attempt"] = sent
    transition = Transition(JobState.COMPLETED, "completed", "completed", exit_code=0,
                            bytes_done=moved, detail={"duration_s": round(result.duration_s, 3)},
                            result=facts)
    history = (HistoryRecord(outcome.streams, sent, result.duration_s)
               if outcome.streams is not None else None)
    return Verdict(transition, (terminated(0, moved),), history=history)


def _failed(job: Job, outcome: AttemptOutcome, failure: TransferError, settings: Settings,
            now: float, remove_partial: bool) -> Verdict:
    code = outcome.result.exit_code
    kind = failure.kind
    limit = retry_limit(job, settings)
    failures = job.failures + 1
    error = str(failure)
    said = (f"attempt {outcome.attempt_no} exited with status {code} ({kind.value}): "
            f"{summarize_error(error)}")
    if failure.retryable and failures <= limit:
        delay = retry_delay_s(settings, failures)
        return Verdict(Transition(
            JobState.IDLE, "attempt_failed", "failed", count_failure=True,
            next_attempt_at=now + delay, exit_code=code, error=error,
            failure_kind=kind.value, detail={"retry_in_s": delay}),
            (note(f"{said}; rescheduling in {delay:g} s"),),
            remove_partial=remove_partial, retry_at=now + delay)
    why = "permanent failure" if not failure.retryable else f"retry limit {limit} reached"
    return Verdict(Transition(
        JobState.FAILED, "failed", "failed", count_failure=True, exit_code=code,
        error=error, failure_kind=kind.value, detail={"why": why}),
        (note(f"{said}; {why}"), terminated(code or 1)), remove_partial=remove_partial)


def judge_dataset(job: Job, facts: DatasetFacts, settings: Settings, now: float) -> Verdict:
    """The verdict on a pass of a dataset job (`job` as read after the pass: its file
    counters are current). COMPLETED when every file is done; FAILED when none is left to
    send and some failed (the error names them); IDLE until the earliest file retry
    otherwise. A failure of the pass itself (the listing, a timeout, stork_server) follows
    the job's retry rules like a single file's attempt; shutdown and removal as `judge`."""
    outcome = facts.outcome
    result = AttemptResult(0, "", outcome.bytes_moved, outcome.duration_s,
                           outcome.stopped)
    if outcome.stopped is StopReason.REMOVED:
        return Verdict(None)
    if outcome.stopped is StopReason.SHUTDOWN:
        return judge(job, AttemptOutcome(facts.attempt_no, result), settings, now)
    pass_failure: TransferError | None = outcome.listing_error
    if outcome.stopped is StopReason.TIMEOUT:
        pass_failure = TransferTimedOut(settings.max_delay_min)
    elif outcome.internal_error is not None:
        pass_failure = RetryableTransferError(outcome.internal_error)
    if pass_failure is not None:
        failed = AttemptOutcome(facts.attempt_no, AttemptResult(1, str(pass_failure), 0,
                                                                outcome.duration_s))
        return _failed(job, failed, pass_failure, settings, now, False)
    counts = f"{job.files_done} of {job.files_total} files done, {job.files_failed} failed"
    facts_out: dict[str, object] = {  # of this pass (the file counts are the job's own)
        "transfer_time_s": round(outcome.duration_s, 3),
        "achieved_throughput_mbps": throughput_mbps(outcome.bytes_moved, outcome.duration_s)}
    pending = job.files_total - job.files_done - job.files_failed
    if pending > 0:
        due = facts.next_due if facts.next_due is not None else now
        return Verdict(Transition(
            JobState.IDLE, "pass_ended", "partial", next_attempt_at=due, exit_code=0,
            detail={"files_done": job.files_done, "files_failed": job.files_failed,
                    "files_pending": pending}, result=facts_out),
            (note(f"pass {facts.attempt_no}: {counts}; {pending} to retry"),), retry_at=due)
    if job.files_failed == 0:
        return Verdict(Transition(JobState.COMPLETED, "completed", "completed", exit_code=0,
                                  detail={"duration_s": round(outcome.duration_s, 3)},
                                  result=facts_out),
                       (terminated(0, job.bytes_done, f"Dataset: {counts}"),))
    named = "; ".join(f"{path}: {summarize_error(e)}"
                      for path, e in facts.failed_errors[:MAX_FAILED_NAMED])
    more = job.files_failed - min(len(facts.failed_errors), MAX_FAILED_NAMED)
    error = (f"{job.files_failed} of {job.files_total} files failed: {named}"
             + (f"; and {more} more (stork_status -files)" if more > 0 else ""))
    return Verdict(Transition(JobState.FAILED, "failed", "failed", exit_code=1, error=error,
                              failure_kind=facts.failure_kind, detail={"why": counts},
                              result=facts_out),
                   (note(error), terminated(1, job.bytes_done, f"Dataset: {counts}")))
