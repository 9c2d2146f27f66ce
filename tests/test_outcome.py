"""The outcome judge (stork.server.judge) on fixed inputs: no processes, no store, no clock."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from stork import config
from stork.config import Settings
from stork.errors import (
    DestinationFull,
    NetworkError,
    NotFound,
    NoTransferModule,
    PermanentTransferError,
    TransferError,
)
from stork.job import DapType, FileState, Job, JobSpec, JobState
from stork.server.judge import (
    AttemptOutcome,
    HistoryRecord,
    judge,
    judge_file,
    retry_delay_s,
    throughput_mbps,
    urls_for_attempt,
)
from stork.server.runner import AttemptResult, StopReason
from stork.userlog import ABORTED, GENERIC, TERMINATED

NOW = 1_700_000_000.0
SRC = "gsiftp://a.example:2811/data/in.dat"
DEST = "gsiftp://b.example:2811/data/out.dat"
MB = 1024 * 1024


def settings(**changes: object) -> Settings:
    base = config.load(None, env={"HOME": "/nonexistent"})  # defaults: retry 5 s, cap 600 s
    return dataclasses.replace(base, **changes)


def job(failures: int = 0, attempts: int = 1, **spec: Any) -> Job:
    s = JobSpec(DapType.TRANSFER, SRC, DEST, **spec)
    return Job(7, 1000, "alice", JobState.RUNNING, s.to_json(), "transfer", SRC, DEST,
               NOW - 60, NOW - 1, attempts=attempts, failures=failures)


def ended(code: int = 0, stderr: str = "", bytes_done: int = 0, duration_s: float = 2.0,
          stop: StopReason | None = None) -> AttemptResult:
    return AttemptResult(code, stderr, bytes_done, duration_s, stop)


def failed(failure: TransferError | None = None, code: int = 1) -> AttemptOutcome:
    """Attempt 1 exited `code`; the module judged it `failure` (a network error by default)."""
    failure = failure or NetworkError("451 connection reset", exit_code=code)
    return AttemptOutcome(1, ended(code, str(failure)), DEST, failure=failure)


def test_verified_success_completes_with_one_throughput_figure() -> None:
    outcome = AttemptOutcome(1, ended(0, bytes_done=10 * MB, duration_s=2.0), DEST,
                             dest_size=64 * MB, streams=8)
    verdict = judge(job(), outcome, settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.COMPLETED and t.event == "completed"
    assert t.bytes_done == 64 * MB  # the destination's size wins over the last progress line
    assert t.result == {"achieved_throughput_mbps": throughput_mbps(64 * MB, 2.0),
                        "transfer_time_s": 2.0, "streams_used": 8}
    assert t.result["achieved_throughput_mbps"] == pytest.approx(268.435, abs=1e-3)
    assert [(e.code, e.return_value, e.bytes_done) for e in verdict.userlog] == \
        [(TERMINATED, 0, 64 * MB)]
    assert verdict.history == HistoryRecord(8, 64 * MB, 2.0)
    assert not verdict.remove_partial and verdict.retry_at is None


def test_success_without_streams_or_size() -> None:
    verdict = judge(job(), AttemptOutcome(1, ended(0, bytes_done=5, duration_s=0.0), DEST),
                    settings(), NOW)
    assert verdict.transition is not None and verdict.transition.bytes_done == 5
    assert verdict.transition.result == {"achieved_throughput_mbps": 0.0, "transfer_time_s": 0.0}
    assert verdict.history is None


def test_retryable_failure_is_retried_with_doubling_delay() -> None:
    s = settings()
    for failures, delay in ((0, 5.0), (1, 10.0), (2, 20.0), (3, 40.0)):
        verdict = judge(job(failures=failures), failed(), s, NOW)
        t = verdict.transition
        assert t is not None and t.state is JobState.IDLE and t.event == "attempt_failed"
        assert t.count_failure and t.failure_kind == "transient" and t.exit_code == 1
        assert t.next_attempt_at == verdict.retry_at == NOW + delay
        assert t.detail == {"retry_in_s": delay}
        assert [e.code for e in verdict.userlog] == [GENERIC]
        assert verdict.userlog[0].text == ("attempt 1 exited with status 1 (transient): "
                                           f"connection reset; rescheduling in {delay:g} s")
        assert verdict.remove_partial  # a retryable failure leaves no partial file


def test_retry_delay_is_capped() -> None:
    s = settings(retry_delay_s=5.0, retry_delay_max_s=30.0)
    assert [retry_delay_s(s, n) for n in range(1, 7)] == [5, 10, 20, 30, 30, 30]
    assert retry_delay_s(s, 0) == 5.0


def test_retry_limit_reached_fails_the_job() -> None:
    verdict = judge(job(failures=2, max_retries=2), failed(), settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.FAILED
    assert t.detail == {"why": "retry limit 2 reached"}
    assert verdict.retry_at is None
    assert [(e.code, e.return_value) for e in verdict.userlog] == [(GENERIC, 0), (TERMINATED, 1)]
    assert verdict.userlog[0].text.endswith("; retry limit 2 reached")
    # the job's own max_retries wins over STORK_MAX_RETRY; without it the knob decides
    t = judge(job(failures=2), failed(), settings(max_retry=3), NOW).transition
    assert t is not None and t.state is JobState.IDLE
    t = judge(job(failures=3), failed(), settings(max_retry=3), NOW).transition
    assert t is not None and t.state is JobState.FAILED


def test_permanent_failure_fails_at_once_and_keeps_the_destination() -> None:
    verdict = judge(job(), failed(NotFound("550 No such file")), settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.FAILED and t.failure_kind == "permanent"
    assert t.detail == {"why": "permanent failure"} and t.error == "550 No such file"
    assert not verdict.remove_partial
    assert [e.return_value for e in verdict.userlog if e.code == TERMINATED] == [1]
    # but not a file the attempt's claim knows (the destination's own rules remove only
    # the file it created, or one the tool changed)
    known = dataclasses.replace(failed(NotFound("550 No such file")), dest_known=True)
    assert judge(job(), known, settings(), NOW).remove_partial


def test_the_failure_class_decides_whether_to_retry() -> None:
    class Odd(TransferError):  # a module's own class: transient kind, yet not retryable
        retryable = False

    verdict = judge(job(), failed(Odd("quota"), code=3), settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.FAILED and t.failure_kind == "transient"
    assert t.detail == {"why": "permanent failure"}


def test_a_non_zero_exit_without_a_judgement_is_retried() -> None:
    outcome = AttemptOutcome(1, ended(2, "something odd"), DEST)
    verdict = judge(job(), outcome, settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.IDLE and t.error == "something odd"


def test_a_tool_killed_by_a_signal_leaves_no_partial_file_even_when_permanent() -> None:
    failure = DestinationFull("killed by SIGXFSZ: file size limit exceeded", tool_killed=True)
    verdict = judge(job(), failed(failure, code=153), settings(), NOW)
    assert verdict.transition is not None and verdict.transition.state is JobState.FAILED
    assert verdict.remove_partial
    assert [e.return_value for e in verdict.userlog if e.code == TERMINATED] == [153]


def test_timeout_is_a_retryable_failure_naming_the_knob() -> None:
    outcome = AttemptOutcome(1, ended(143, stop=StopReason.TIMEOUT), DEST)
    verdict = judge(job(), outcome, settings(max_delay_min=0.5), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.IDLE and t.failure_kind == "timeout"
    assert t.error == "killed after running longer than STORK_MAXDELAY_INMINUTES = 0.5"
    assert verdict.remove_partial
    # a timeout wins even if the tool happened to exit 0 as it was stopped
    t = judge(job(), AttemptOutcome(1, ended(0, stop=StopReason.TIMEOUT), DEST), settings(),
              NOW).transition
    assert t is not None and t.failure_kind == "timeout"


def test_verify_failure_is_retried_and_removes_the_file() -> None:
    outcome = AttemptOutcome(1, ended(0), DEST, verify_error="destination size 3 differs from "
                                                             "source size 4")
    verdict = judge(job(), outcome, settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.IDLE and t.failure_kind == "verify"
    assert t.error == "destination size 3 differs from source size 4" and verdict.remove_partial


def test_shutdown_requeues_without_counting_a_failure() -> None:
    outcome = AttemptOutcome(1, ended(143, bytes_done=99, stop=StopReason.SHUTDOWN), DEST)
    verdict = judge(job(failures=4), outcome, settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.IDLE and t.event == "requeue"
    assert t.outcome == "interrupted" and not t.count_failure and t.next_attempt_at == 0.0
    assert t.failure_kind == "interrupted" and t.detail == {"reason": "shutdown"}
    assert t.bytes_done == 99 and verdict.remove_partial and verdict.userlog == ()
    assert verdict.retry_at is None  # resync picks it up after the restart


def test_removal_writes_nothing_and_removes_the_partial_file() -> None:
    verdict = judge(job(), AttemptOutcome(1, ended(143, stop=StopReason.REMOVED), DEST),
                    settings(), NOW)
    assert verdict.transition is None and verdict.userlog == () and verdict.remove_partial
    assert not any(e.code == ABORTED for e in verdict.userlog)  # the removal logs that
    # no tool ran (no module): nothing to remove
    assert not judge(job(), AttemptOutcome(1, ended(143, stop=StopReason.REMOVED)), settings(),
                     NOW).remove_partial


def test_no_module_is_a_permanent_failure_without_partial_file() -> None:
    outcome = AttemptOutcome(1, ended(127, "no transfer module handles a -> b"),
                             failure=NoTransferModule("a", "b"))
    verdict = judge(job(), outcome, settings(), NOW)
    t = verdict.transition
    assert t is not None and t.state is JobState.FAILED and t.exit_code == 127
    assert t.error == "no transfer module handles a -> b" and t.failure_kind == "permanent"
    assert not verdict.remove_partial
    identity = AttemptOutcome(1, ended(126), failure=PermanentTransferError("no such owner"))
    t = judge(job(), identity, settings(), NOW).transition
    assert t is not None and t.state is JobState.FAILED


def test_alt_protocols_cycle_after_the_original_pair() -> None:
    j = job(alt_protocols=(("ftp", "ftp"), ("gsiftp", "file")))
    got = [urls_for_attempt(j, n) for n in range(1, 7)]
    assert got[0] == got[3] == (SRC, DEST)
    assert got[1] == got[4] == ("ftp://a.example:2811/data/in.dat",
                                "ftp://b.example:2811/data/out.dat")
    assert got[2][0] == "gsiftp://a.example:2811/data/in.dat"
    assert got[2][1].startswith("file://")
    assert urls_for_attempt(job(), 5) == (SRC, DEST)  # no alternatives: always the original


def test_a_dataset_file_sent_alone_is_retried_by_its_own_failures_then_fails() -> None:
    owner = job(max_retries=2)
    s = settings(retry_delay_s=5.0, retry_delay_max_s=600.0)
    network = NetworkError("451 connection reset", exit_code=1)
    first = judge_file(owner, 4, 0, network, s, NOW)
    assert (first.index, first.state, first.count_failure) == (4, FileState.PENDING, True)
    assert first.next_attempt_at == NOW + 5.0 and first.error == "451 connection reset"
    assert first.failure_kind == network.kind.value
    assert judge_file(owner, 4, 1, network, s, NOW).next_attempt_at == NOW + 10.0
    last = judge_file(owner, 4, 2, network, s, NOW)  # its third failure: past max_retries 2
    assert last.state is FileState.FAILED and last.count_failure
    missing = judge_file(owner, 5, 0, NotFound("550 no such file", exit_code=1), s, NOW)
    assert missing.state is FileState.FAILED and "550" in (missing.error or "")
    assert judge_file(job(), 4, 4, network, s, NOW).state is FileState.PENDING  # limit 5


def test_judging_is_pure() -> None:
    """Same inputs, same verdict; the inputs are not changed."""
    j, outcome, s = job(failures=1), failed(), settings()
    assert judge(j, outcome, s, NOW) == judge(j, outcome, s, NOW)
    assert j.failures == 1
