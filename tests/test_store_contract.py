"""The `JobStore` contract: every store must pass this suite.

A new store adds a factory to `FACTORIES` and nothing else. SQLite-only behaviour (WAL,
schema version, file mode) is tested in test_store.py; PostgreSQL's sharing (leases, nodes,
host limits) in test_store_postgres.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stork.dataset.expand import DatasetFile
from stork.errors import InvalidRequest, JobNotFound
from stork.job import DapType, FileState, JobSpec, JobState
from stork.store import JobStore, SqliteStore, Transition
from stork.store.base import FileResult, HistoryEntry
from stork.translog import TransferRecord

SPEC = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text='[ dap_type = "transfer" ]')
ESTIMATE = JobSpec(DapType.ESTIMATION, "ftp://h/x", "ftp://g/y", ad_text="[ ]")
DONE = Transition(JobState.COMPLETED, "completed", "completed", exit_code=0, bytes_done=7)
TIMEOUT_S = 10.0

def _postgres(request: pytest.FixtureRequest, tmp: Path) -> JobStore:
    from stork.store.postgres import PostgresStore

    return PostgresStore(request.getfixturevalue("postgres").new_database())


FACTORIES: dict[str, Callable[[pytest.FixtureRequest, Path], JobStore]] = {
    "sqlite": lambda request, tmp: SqliteStore(str(tmp / "q.db")),
    "postgresql": _postgres,  # a database of its own in the session's private cluster
}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    made = FACTORIES[request.param](request, tmp_path)
    yield made
    made.close()


def start(store: JobStore, job_id: int, now: float = 2.0, module: str = "m") -> int:
    job = store.start_attempt(job_id, now, "file:///a", "file:///b", module)
    assert job is not None and job.state is JobState.RUNNING
    return job.attempts


class Recorder:
    """A listener that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, ids: Iterable[int]) -> None:
        self.calls.append(tuple(ids))


# --- submit, get, list -------------------------------------------------------------------

def test_submit_get_and_list_in_id_order(store: JobStore) -> None:
    first = store.submit([SPEC, ESTIMATE], 1000, "alice", now=10.0)
    second = store.submit([SPEC], 1001, "bob", now=11.0)
    assert first[1] == first[0] + 1 and second[0] > first[1]
    job = store.get(first[1])
    assert (job.state, job.owner, job.owner_uid, job.spec, job.dap_type) == (
        JobState.IDLE, "alice", 1000, ESTIMATE, "estimation")
    assert (job.submitted_at, job.updated_at, job.attempts, job.failures, job.result) == (
        10.0, 10.0, 0, 0, {})
    assert [j.id for j in store.list_jobs()] == first + second
    assert store.list_jobs() == [store.get(i) for i in first + second]
    assert [e.kind for e in store.events(second[0])] == ["submit"]
    assert store.events(second[0])[0].detail == {"owner": "bob"}
    with pytest.raises(JobNotFound):
        store.get(second[0] + 1)
    assert store.submit([], 0, "root", now=12.0) == []


def test_list_filters_by_state_and_keeps_id_order(store: JobStore) -> None:
    ids = store.submit([SPEC] * 6, 0, "root", now=1.0)
    start(store, ids[4])
    start(store, ids[1])
    store.finish_attempt(ids[1], 1, 3.0, DONE)
    start(store, ids[0])
    store.remove(ids[3], 4.0, "root")
    assert [j.id for j in store.list_jobs([JobState.RUNNING])] == [ids[0], ids[4]]
    assert [j.id for j in store.list_jobs([JobState.IDLE])] == [ids[2], ids[5]]
    assert [j.id for j in store.list_jobs([JobState.IDLE, JobState.RUNNING])] == [
        ids[0], ids[2], ids[4], ids[5]]
    assert [j.id for j in store.list_jobs([JobState.COMPLETED, JobState.REMOVED])] == [
        ids[1], ids[3]]
    assert store.list_jobs([JobState.FAILED]) == []
    assert store.list_jobs([]) == []


def test_a_failed_submission_queues_nothing(store: JobStore) -> None:
    bad = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text="x")
    object.__setattr__(bad, "dap_type", object())  # makes the insert fail mid-transaction
    with pytest.raises(AttributeError):  # object() has no .value
        store.submit([SPEC, bad], 0, "root", now=1.0)
    assert store.list_jobs() == []
    [job_id] = store.submit([SPEC], 0, "root", now=2.0)  # the store is still usable
    assert store.get(job_id).state is JobState.IDLE


def test_concurrent_submissions_each_get_their_own_ids(store: JobStore) -> None:
    heard = Recorder()
    store.add_listener(heard)
    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(lambda n: store.submit([SPEC] * (n % 3 + 1), n, f"u{n}", 1.0),
                                range(40)))
    flat = [i for batch in batches for i in batch]
    assert len(flat) == len(set(flat)) == sum(n % 3 + 1 for n in range(40))
    for n, batch in enumerate(batches):
        assert {store.get(i).owner for i in batch} == {f"u{n}"}
    assert sorted(heard.calls) == sorted(tuple(batch) for batch in batches)  # one call each


# --- attempts ----------------------------------------------------------------------------

def test_start_attempt_only_from_idle_and_only_once(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    job = store.start_attempt(job_id, 2.0, "ftp://h/a", "file:///b", "ftp-file")
    assert job is not None and (job.state, job.attempts, job.started_at) == (
        JobState.RUNNING, 1, 2.0)
    assert store.start_attempt(job_id, 2.5, "ftp://h/a", "file:///b", "ftp-file") is None
    with pytest.raises(JobNotFound):
        store.get(job_id + 1)
    assert store.start_attempt(job_id + 1, 2.5, "a", "b", "m") is None  # unknown job
    [attempt] = store.attempts(job_id)
    assert (attempt.number, attempt.started_at, attempt.src_url, attempt.dest_url,
            attempt.module, attempt.ended_at, attempt.outcome) == (
        1, 2.0, "ftp://h/a", "file:///b", "ftp-file", None, None)
    execute = store.events(job_id)[-1]
    assert (execute.kind, execute.detail) == ("execute", {
        "attempt": 1, "module": "ftp-file", "src_url": "ftp://h/a", "dest_url": "file:///b"})


def test_racing_starts_exactly_one_wins(store: JobStore) -> None:
    ids = store.submit([SPEC] * 5, 0, "root", now=1.0)
    for job_id in ids:
        barrier = threading.Barrier(6)

        def race(n: int, job_id: int = job_id, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return store.start_attempt(job_id, 2.0, "a", "b", f"m{n}") is not None

        with ThreadPoolExecutor(6) as pool:
            won = list(pool.map(race, range(6)))
        assert won.count(True) == 1
        assert len(store.attempts(job_id)) == 1
        assert [e.kind for e in store.events(job_id)] == ["submit", "execute"]
        assert store.get(job_id).attempts == 1


def test_finish_only_from_running_and_the_attempt_the_caller_saw(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    assert store.finish_attempt(job_id, 1, 2.0, DONE) is None  # IDLE: nothing to finish
    start(store, job_id)
    assert store.finish_attempt(job_id, 2, 3.0, DONE) is None  # not the running attempt
    assert store.get(job_id).state is JobState.RUNNING
    assert store.attempts(job_id)[0].ended_at is None
    done = store.finish_attempt(job_id, 1, 3.0, Transition(
        JobState.COMPLETED, "completed", "completed", exit_code=0, bytes_done=7,
        detail={"duration_s": 1.0}, result={"streams_used": 4}))
    assert done is not None and (done.state, done.finished_at, done.bytes_done, done.result) == (
        JobState.COMPLETED, 3.0, 7, {"streams_used": 4})
    assert store.finish_attempt(job_id, 1, 4.0, DONE) is None  # never completes twice
    assert store.get(job_id) == done
    assert [(e.kind, e.detail) for e in store.events(job_id)][2:] == [
        ("completed", {"attempt": 1, "exit_code": 0, "duration_s": 1.0})]
    [attempt] = store.attempts(job_id)
    assert (attempt.ended_at, attempt.exit_code, attempt.outcome, attempt.bytes_done) == (
        3.0, 0, "completed", 7)


def test_racing_finishes_complete_once(store: JobStore) -> None:
    ids = store.submit([SPEC] * 5, 0, "root", now=1.0)
    for job_id in ids:
        start(store, job_id)
        barrier = threading.Barrier(4)

        def race(n: int, job_id: int = job_id, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return store.finish_attempt(job_id, 1, 3.0 + n, DONE) is not None

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(race, range(4))).count(True) == 1
        assert [e.kind for e in store.events(job_id)].count("completed") == 1


def test_failed_attempt_goes_back_to_idle_until_its_retry_time(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    [other] = store.submit([ESTIMATE], 0, "root", now=1.0)  # never runnable by the dispatcher
    start(store, job_id)
    back = store.finish_attempt(job_id, 1, 3.0, Transition(
        JobState.IDLE, "attempt_failed", "failed", count_failure=True, next_attempt_at=10.0,
        exit_code=1, error="boom", failure_kind="transient", detail={"retry_in_s": 7.0}))
    assert back is not None
    assert (back.state, back.failures, back.last_error, back.failure_kind, back.finished_at,
            back.pid) == (JobState.IDLE, 1, "boom", "transient", None, None)
    assert store.runnable(9.0, 10) == []
    assert [j.id for j in store.runnable(10.0, 10)] == [job_id]
    assert store.waiting_transfers() == [(job_id, 10.0)]
    assert store.events(job_id)[-1].detail == {"attempt": 1, "exit_code": 1, "error": "boom",
                                               "retry_in_s": 7.0}
    assert start(store, job_id, now=11.0) == 2  # the retry is attempt 2
    assert [a.number for a in store.attempts(job_id)] == [1, 2]
    assert store.attempts(job_id)[0].outcome == "failed"
    assert store.get(other).state is JobState.IDLE


def test_runnable_orders_by_due_time_and_limits(store: JobStore) -> None:
    ids = store.submit([SPEC] * 4, 0, "root", now=1.0)
    for job_id, due in zip(ids[:2], (8.0, 5.0), strict=True):
        start(store, job_id)
        store.finish_attempt(job_id, 1, 2.0, Transition(
            JobState.IDLE, "attempt_failed", "failed", count_failure=True, next_attempt_at=due))
    assert [j.id for j in store.runnable(9.0, 10)] == [ids[2], ids[3], ids[1], ids[0]]
    assert [j.id for j in store.runnable(9.0, 2)] == [ids[2], ids[3]]
    assert sorted(store.waiting_transfers()) == [(ids[0], 8.0), (ids[1], 5.0), (ids[2], 0.0),
                                                 (ids[3], 0.0)]


def test_pid_and_progress_only_for_the_running_attempt(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    store.set_pid(job_id, 1, 99)
    store.record_progress(job_id, 1, 5, 1.0)
    assert (store.get(job_id).pid, store.get(job_id).bytes_done) == (None, 0)
    start(store, job_id)
    store.set_pid(job_id, 1, 4242)
    store.record_progress(job_id, 1, 500, 12.5)
    store.record_progress(job_id, 2, 900, 99.0)  # not the running attempt
    job = store.get(job_id)
    assert (job.pid, job.bytes_done, job.rate_mbps) == (4242, 500, 12.5)
    assert [e.kind for e in store.events(job_id)] == ["submit", "execute"]  # no events
    done = store.finish_attempt(job_id, 1, 3.0, Transition(JobState.FAILED, "failed", "failed"))
    assert done is not None and (done.pid, done.rate_mbps, done.bytes_done) == (None, 0.0, 500)


def test_requeue_running_after_a_crash(store: JobStore) -> None:
    ids = store.submit([SPEC] * 3, 0, "root", now=1.0)
    start(store, ids[0])
    store.set_pid(ids[0], 1, 4242)
    start(store, ids[1])
    store.finish_attempt(ids[1], 1, 3.0, DONE)
    requeued = store.requeue_running(5.0, "daemon died")
    assert [(j.id, j.state, j.pid) for j in requeued] == [(ids[0], JobState.RUNNING, 4242)]
    job = store.get(ids[0])
    assert (job.state, job.attempts, job.failures, job.failure_kind, job.last_error,
            job.next_attempt_at, job.pid) == (
        JobState.IDLE, 1, 1, "interrupted", "daemon died", 0.0, None)
    [attempt] = store.attempts(ids[0])
    assert (attempt.outcome, attempt.ended_at, attempt.error) == (
        "interrupted", 5.0, "daemon died")
    assert (store.events(ids[0])[-1].kind, store.events(ids[0])[-1].detail) == (
        "requeue", {"attempt": 1, "reason": "daemon died", "pid": 4242})
    assert store.get(ids[1]).state is JobState.COMPLETED  # others untouched
    assert store.get(ids[2]).state is JobState.IDLE
    # the interrupted attempt can no longer finish; nothing left to requeue
    assert store.finish_attempt(ids[0], 1, 6.0, DONE) is None
    assert store.requeue_running(6.0, "again") == []


# --- removal and purge -------------------------------------------------------------------

def test_remove_from_each_state(store: JobStore) -> None:
    idle, running, completed, failed = store.submit([SPEC] * 4, 0, "root", now=1.0)
    start(store, running)
    start(store, completed)
    store.finish_attempt(completed, 1, 3.0, DONE)
    start(store, failed)
    store.finish_attempt(failed, 1, 3.0, Transition(JobState.FAILED, "failed", "failed"))

    before, after = store.remove(idle, 4.0, "alice")
    assert (before.state, after.state, after.finished_at) == (
        JobState.IDLE, JobState.REMOVED, 4.0)
    assert (store.events(idle)[-1].kind, store.events(idle)[-1].detail) == (
        "removed", {"by": "alice"})

    before, after = store.remove(running, 4.0, "root")
    assert (before.state, after.state) == (JobState.RUNNING, JobState.REMOVED)
    assert (store.attempts(running)[0].outcome, store.attempts(running)[0].ended_at) == (
        "removed", 4.0)
    assert store.finish_attempt(running, 1, 5.0, DONE) is None  # a removed job stays removed

    for job_id, state in ((completed, "COMPLETED"), (failed, "FAILED"), (idle, "REMOVED")):
        events = store.events(job_id)
        with pytest.raises(InvalidRequest, match=f"already {state}"):
            store.remove(job_id, 6.0, "root")
        assert store.events(job_id) == events  # refused: nothing written
    with pytest.raises(JobNotFound):
        store.remove(failed + 1, 6.0, "root")


def test_purge_finished(store: JobStore) -> None:
    old, recent, idle, running = store.submit([SPEC] * 4, 0, "root", now=1.0)
    start(store, old)
    store.finish_attempt(old, 1, 2.0, DONE)
    store.remove(recent, 5.0, "root")
    start(store, running)
    assert store.purge_finished(before=3.0) == 1
    assert [j.id for j in store.list_jobs()] == [recent, idle, running]
    assert store.events(old) == [] and store.attempts(old) == []
    with pytest.raises(JobNotFound):
        store.get(old)
    assert store.purge_finished(before=100.0) == 1  # recent; IDLE and RUNNING stay
    assert [j.id for j in store.list_jobs()] == [idle, running]


# --- results and history -----------------------------------------------------------------

def test_update_result_merges(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    store.update_result(job_id, {"optimized_streams": 4, "model": "a"})
    store.update_result(job_id, {"predicted_throughput_mbps": 12.5, "model": "b"})
    assert store.get(job_id).result == {"optimized_streams": 4, "model": "b",
                                        "predicted_throughput_mbps": 12.5}
    assert [e.kind for e in store.events(job_id)] == ["submit"]  # no event
    with pytest.raises(JobNotFound):
        store.update_result(job_id + 1, {"x": 1})


def test_history_filters(store: JobStore) -> None:
    store.add_history(HistoryEntry(10.0, "a:1", "b:1", "-b 1024", "optimization", 8, 900.0,
                                   model="second_order", samples=[[1, 100.0], [4, 350.0]]))
    store.add_history(HistoryEntry(20.0, "b:1", "a:1", "", "transfer", 8, 870.0, 10**9, 9.2,
                                   job_id=4))
    store.add_history(HistoryEntry(30.0, "a:1", "b:1", "", "transfer", 2, 100.0))
    store.add_history(HistoryEntry(40.0, "a:1", "c:1", "", "transfer", 1, 10.0))
    both = store.history("a:1", "b:1", symmetric=True)
    assert [(h.kind, h.time) for h in both] == [("transfer", 30.0), ("transfer", 20.0),
                                                ("optimization", 10.0)]
    assert both[2].samples == [[1, 100.0], [4, 350.0]] and both[2].model == "second_order"
    assert (both[1].job_id, both[1].bytes_moved, both[1].duration_s) == (4, 10**9, 9.2)
    assert [h.time for h in store.history("a:1", "b:1", symmetric=False)] == [30.0, 10.0]
    assert [h.time for h in store.history("b:1", "a:1", symmetric=False)] == [20.0]
    assert [h.time for h in store.history("a:1", "b:1", symmetric=True, since=15.0)] == [
        30.0, 20.0]
    assert [h.time for h in store.history("a:1", "b:1", symmetric=True, limit=1)] == [30.0]
    assert [h.time for h in store.history("a:1", "b:1", symmetric=True,
                                          arguments="-b 1024")] == [10.0]
    assert [h.time for h in store.history("a:1", "b:1", symmetric=True,
                                          kind="transfer", arguments="")] == [30.0, 20.0]
    assert store.history("a:1", "d:1", symmetric=True) == []


# --- change notification -----------------------------------------------------------------

def test_listeners_hear_each_committed_change_once(store: JobStore) -> None:
    heard, also = Recorder(), Recorder()
    store.add_listener(heard)
    store.add_listener(also)
    a, b, c = store.submit([SPEC] * 3, 0, "root", now=1.0)
    assert heard.calls == [(a, b, c)]
    start(store, a)
    start(store, b)
    store.set_pid(a, 1, 7)  # not state changes: no call
    store.record_progress(a, 1, 10, 1.0)
    store.update_result(a, {"x": 1})
    store.add_history(HistoryEntry(1.0, "a", "b", "", "transfer", 1, 1.0))
    store.finish_attempt(a, 1, 3.0, DONE)
    store.remove(c, 4.0, "root")
    assert store.requeue_running(5.0, "restart") != []
    assert store.requeue_running(5.0, "restart") == []
    assert heard.calls == [(a, b, c), (a,), (b,), (a,), (c,), (b,)]
    assert also.calls == heard.calls
    store.remove_listener(also)
    store.submit([SPEC], 0, "root", now=6.0)
    assert len(heard.calls) == 7 and len(also.calls) == 6


def test_listeners_not_called_for_refused_changes(store: JobStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    start(store, job_id)
    store.finish_attempt(job_id, 1, 2.0, DONE)
    heard = Recorder()
    store.add_listener(heard)
    assert store.start_attempt(job_id, 3.0, "a", "b", "m") is None
    assert store.finish_attempt(job_id, 1, 3.0, DONE) is None
    with pytest.raises(InvalidRequest):
        store.remove(job_id, 3.0, "root")
    with pytest.raises(JobNotFound):
        store.remove(job_id + 1, 3.0, "root")
    bad = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text="x")
    object.__setattr__(bad, "dap_type", object())
    with pytest.raises(AttributeError):
        store.submit([bad], 0, "root", now=3.0)
    assert store.purge_finished(before=10.0) == 1
    assert heard.calls == []


def test_a_failing_listener_is_logged_and_changes_nothing(store: JobStore,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    heard = Recorder()

    def broken(ids: object) -> None:
        raise RuntimeError("listener bug")

    store.add_listener(broken)
    store.add_listener(heard)
    with caplog.at_level(logging.ERROR):
        [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    assert store.get(job_id).state is JobState.IDLE and heard.calls == [(job_id,)]
    assert "listener bug" in caplog.text and str(job_id) in caplog.text


def test_listeners_run_after_the_commit_outside_any_lock(store: JobStore) -> None:
    """A listener sees the change committed, and another thread can write meanwhile."""
    seen: list[tuple[JobState, list[str]]] = []
    waited: list[bool] = []
    [other] = store.submit([SPEC], 0, "root", now=1.0)

    def listener(ids: Iterable[int]) -> None:
        [job_id] = ids
        if job_id == other:
            return
        seen.append((store.get(job_id).state, [e.kind for e in store.events(job_id)]))
        writer = threading.Thread(target=store.update_result, args=(other, {"from": "listener"}))
        writer.start()
        writer.join(TIMEOUT_S)
        waited.append(writer.is_alive())  # (the store would swallow an assertion here)

    store.add_listener(listener)
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    start(store, job_id)
    assert seen == [(JobState.IDLE, ["submit"]), (JobState.RUNNING, ["submit", "execute"])]
    assert waited == [False, False], "a write from another thread waited for the listener"
    assert store.get(other).result == {"from": "listener"}


# --- reads never wait for writes; state and event land together --------------------------

def blocking_spec(entered: threading.Event, release: threading.Event) -> JobSpec:
    """A spec whose serialisation waits for `release`: holds a submission's transaction
    (and whatever lock the store takes for it) open."""

    @dataclass(frozen=True)
    class BlockingSpec(JobSpec):
        def to_json(self) -> str:
            entered.set()
            assert release.wait(TIMEOUT_S * 3)
            return super().to_json()

    return BlockingSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text="[ ]")


def test_reads_answer_during_a_10000_job_submission(store: JobStore) -> None:
    entered, release = threading.Event(), threading.Event()
    [old] = store.submit([SPEC], 0, "root", now=1.0)
    start(store, old)
    store.add_history(HistoryEntry(1.0, "a", "b", "", "transfer", 1, 1.0))
    blocking = blocking_spec(entered, release)
    submitted: list[list[int]] = []
    submitter = threading.Thread(
        target=lambda: submitted.append(store.submit([SPEC] * 9_999 + [blocking], 0, "root",
                                                     now=2.0)))
    submitter.start()
    try:
        assert entered.wait(TIMEOUT_S * 3), "the submission never started"
        # 9,999 rows written, the transaction open and the write lock held: reads answer
        reads: dict[str, Any] = {}
        reader = threading.Thread(target=lambda: reads.update(
            list=store.list_jobs(), idle=store.list_jobs([JobState.IDLE]), get=store.get(old),
            events=store.events(old), attempts=store.attempts(old),
            history=store.history("a", "b", symmetric=True), runnable=store.runnable(9.0, 5),
            waiting=store.waiting_transfers()))
        reader.start()
        reader.join(TIMEOUT_S)
        assert not reader.is_alive(), "a read waited for the open write transaction"
        assert [j.id for j in reads["list"]] == [old]
        assert reads["idle"] == [] and reads["runnable"] == [] and reads["waiting"] == []
        assert [e.kind for e in reads["events"]] == ["submit", "execute"]
        assert len(reads["attempts"]) == len(reads["history"]) == 1
    finally:
        release.set()
        submitter.join(TIMEOUT_S * 3)
    assert len(submitted[0]) == 10_000
    assert len(store.list_jobs()) == 10_001


def test_a_reader_never_sees_a_state_without_its_event(store: JobStore) -> None:
    ids = store.submit([SPEC] * 30, 0, "root", now=1.0)
    stop = threading.Event()
    problems: list[str] = []

    def watch() -> None:
        while not stop.is_set():
            for job_id in ids:
                job = store.get(job_id)  # the state first, its events after
                kinds = [e.kind for e in store.events(job_id)]
                wanted = {JobState.RUNNING: "execute", JobState.COMPLETED: "completed",
                          JobState.IDLE: "submit"}[job.state]
                if kinds.count("execute") < job.attempts or wanted not in kinds:
                    problems.append(f"job {job_id} {job.state.value} with events {kinds}")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for job_id in ids:
            start(store, job_id)
            store.finish_attempt(job_id, 1, 3.0, DONE)
    finally:
        stop.set()
        watcher.join(TIMEOUT_S)
    assert problems == []


def test_a_healthy_store_is_available(store: JobStore) -> None:
    store.submit([SPEC], 0, "root", now=1.0)
    assert store.available and store.outage is None


# --- the files of datasets ------------------------------------------------------------------

DATASET = JobSpec(DapType.TRANSFER, "ftp://h/d/", "file:///o/", ad_text="[ ]")


def dataset_files(n: int, size: int | None = 10) -> list[DatasetFile]:
    return [DatasetFile(f"ftp://h/d/f{i}", f"file:///o/f{i}", f"f{i}", size) for i in range(n)]


def test_a_datasets_files_are_stored_with_the_job_and_counted(store: JobStore) -> None:
    [plain, job_id] = store.submit([SPEC, DATASET], 0, "u", 1.0, {1: dataset_files(3)})
    job = store.get(job_id)
    assert (job.files_total, job.files_done, job.files_failed, job.bytes_total) == (3, 0, 0, 30)
    assert store.get(plain).files_total == 0 and store.files(plain) == []
    files = store.files(job_id)
    assert [f.index for f in files] == [0, 1, 2]
    assert {f.state for f in files} == {FileState.PENDING}
    assert [f.rel_path for f in store.files(job_id, offset=1, limit=1)] == ["f1"]
    [unknown] = store.submit([DATASET], 0, "u", 1.0, {0: dataset_files(2, None)})
    assert store.get(unknown).bytes_total is None


def test_files_listed_later_are_added_once(store: JobStore) -> None:
    [job_id] = store.submit([DATASET], 0, "u", 1.0)
    assert store.add_files(job_id, dataset_files(2)) is True
    assert store.add_files(job_id, dataset_files(5)) is False
    assert store.get(job_id).files_total == 2


def test_files_run_end_and_count_only_for_the_running_attempt(store: JobStore) -> None:
    [job_id] = store.submit([DATASET], 0, "u", 1.0, {0: dataset_files(3)})
    assert store.finish_files(job_id, 1, [FileResult(0, FileState.DONE, 10)]) is False
    attempt = start(store, job_id)
    store.start_files(job_id, attempt, [0, 1, 2], "small cc=1 p=1 pp=1 (off)")
    assert {f.state for f in store.files(job_id)} == {FileState.RUNNING}
    assert store.finish_files(job_id, attempt, [
        FileResult(0, FileState.DONE, 10),
        FileResult(1, FileState.FAILED, count_failure=True, error="gone", failure_kind="permanent"),
        FileResult(2, FileState.PENDING, count_failure=True, next_attempt_at=9.0, error="busy"),
    ], rate_mbps=5.0) is True
    job = store.get(job_id)
    assert (job.files_done, job.files_failed, job.bytes_done, job.rate_mbps) == (1, 1, 10, 5.0)
    f0, f1, f2 = store.files(job_id)
    assert (f0.state, f0.attempts, f0.chunk) == (FileState.DONE, 1, "small cc=1 p=1 pp=1 (off)")
    assert (f1.state, f1.failures, f1.last_error) == (FileState.FAILED, 1, "gone")
    assert (f2.state, f2.next_attempt_at, f2.failures) == (FileState.PENDING, 9.0, 1)
    # a file done again is counted once
    store.finish_files(job_id, attempt, [FileResult(0, FileState.DONE, 10)])
    assert store.get(job_id).files_done == 1 and store.get(job_id).bytes_done == 10
    assert [f.index for f in store.files(job_id, [FileState.FAILED, FileState.DONE])] == [0, 1]


def test_a_crash_leaves_running_files_in_doubt_and_a_removal_stops_them(store: JobStore) -> None:
    [a, b] = store.submit([DATASET, DATASET], 0, "u", 1.0,
                          {0: dataset_files(2), 1: dataset_files(2)})
    for job_id in (a, b):
        store.start_files(job_id, start(store, job_id), [0], "c")
    store.requeue_running(3.0, "crash")
    f0, f1 = store.files(a)
    assert (f0.state, f0.in_doubt, f1.in_doubt) == (FileState.PENDING, True, False)
    store.remove(a, 4.0, "u")
    store.start_files(b, start(store, b, 5.0), [0, 1], "c")
    store.remove(b, 6.0, "u")
    assert {f.state for f in store.files(b)} == {FileState.PENDING}
    assert store.purge_finished(10.0) == 2
    assert store.files(a) == [] and store.files(b) == []


# --- the transfer log ---------------------------------------------------------------------

def record(time: float, src: str = "a", dest: str = "b", **changes: Any) -> TransferRecord:
    values: dict[str, Any] = {
        "time": time, "src_host": src, "dest_host": dest, "rtt_s": 0.04, "bandwidth_bps": 2e8,
        "buffer_bytes": None, "file_size_bytes": 262144.0, "file_count": 100, "cc": 4, "p": 1,
        "pp": 8, "fast": True, "bytes_moved": 26214400, "duration_s": 2.0,
        "throughput_mbps": 104.9}
    return TransferRecord(**{**values, **changes})


def test_the_transfer_log_is_added_to_and_read_newest_first(store: JobStore) -> None:
    rows = [record(1.0, spread_mbps=7.25), record(3.0, sharing=2, outcome="failed"),
            record(2.0, "c", "b"),
            record(4.0, rtt_s=None, bandwidth_bps=None, fast=False, origin="BTData.csv")]
    assert store.add_transfers(rows) == 4
    assert store.add_transfers([]) == 0
    assert [r.time for r in store.transfers()] == [4.0, 3.0, 2.0, 1.0]
    assert store.transfers()[0] == rows[3]
    assert [r.spread_mbps for r in store.transfers()] == [None, None, None, 7.25]
    assert [r.time for r in store.transfers("a", "b")] == [4.0, 3.0, 1.0]
    assert [r.time for r in store.transfers(dest_host="b", since=2.0, limit=2)] == [4.0, 3.0]
    assert store.transfers("a", "b", since=3.5)[0].origin == "BTData.csv"


def test_transfers_after_reads_in_the_order_added_whatever_the_start_times(
        store: JobStore) -> None:
    rows = [record(5.0), record(1.0, "c", "b"), record(3.0)]
    store.add_transfers(rows)
    read = store.transfers_after()
    assert [r for _, r in read] == rows  # added order, not start time
    ids = [i for i, _ in read]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert [r for _, r in store.transfers_after(ids[0])] == rows[1:]
    assert [r for _, r in store.transfers_after(ids[0], limit=1)] == rows[1:2]
    assert store.transfers_after(ids[-1]) == []
    store.add_transfers([record(0.5)])  # older start, added later: still read after
    assert [r.time for _, r in store.transfers_after(ids[-1])] == [0.5]
