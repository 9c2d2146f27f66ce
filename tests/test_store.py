"""The SQLite store: WAL, schema version, atomic state changes with their events."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stork.errors import InvalidRequest, JobNotFound, SchemaError
from stork.job import DapType, JobSpec, JobState
from stork.store import SqliteStore, Transition

SPEC = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text='[ dap_type = "transfer" ]')


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(str(tmp_path / "q.db"))


def test_wal_mode_and_schema_version(tmp_path: Path, store: SqliteStore) -> None:
    db = sqlite3.connect(tmp_path / "q.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT version FROM schema_version").fetchone()[0] == 1
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    store.close()
    with pytest.raises(SchemaError, match="schema version 99"):
        SqliteStore(str(tmp_path / "q.db"))


def test_submit_writes_jobs_and_events_together(store: SqliteStore) -> None:
    ids = store.submit([SPEC, SPEC], 1000, "alice", now=10.0)
    assert ids == [1, 2]
    job = store.get(2)
    assert (job.state, job.owner, job.owner_uid, job.spec) == (JobState.IDLE, "alice", 1000, SPEC)
    assert [e.kind for e in store.events(2)] == ["submit"]
    with pytest.raises(JobNotFound):
        store.get(3)


def test_attempt_lifecycle_and_no_double_completion(store: SqliteStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    started = store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "file-copy")
    assert started is not None and started.state is JobState.RUNNING and started.attempts == 1
    assert store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "file-copy") is None
    store.record_progress(job_id, 1, 500, 12.5)
    assert store.get(job_id).bytes_done == 500
    done = store.finish_attempt(job_id, 1, 3.0, Transition(JobState.COMPLETED, "completed",
                                                           "completed", exit_code=0))
    assert done is not None and done.state is JobState.COMPLETED and done.finished_at == 3.0
    again = store.finish_attempt(job_id, 1, 4.0, Transition(JobState.COMPLETED, "completed",
                                                            "completed", exit_code=0))
    assert again is None
    assert [e.kind for e in store.events(job_id)] == ["submit", "execute", "completed"]
    [attempt] = store.attempts(job_id)
    assert (attempt.outcome, attempt.exit_code, attempt.ended_at) == ("completed", 0, 3.0)


def test_failed_attempt_goes_back_to_idle_until_its_retry_time(store: SqliteStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "m")
    store.finish_attempt(job_id, 1, 3.0, Transition(
        JobState.IDLE, "attempt_failed", "failed", count_failure=True, next_attempt_at=10.0,
        exit_code=1, error="boom", failure_kind="transient"))
    job = store.get(job_id)
    assert (job.state, job.failures, job.last_error, job.failure_kind) == (
        JobState.IDLE, 1, "boom", "transient")
    assert store.runnable(9.0, 10) == []
    assert [j.id for j in store.runnable(10.0, 10)] == [job_id]
    assert store.waiting_transfers() == [(job_id, 10.0)]


def test_requeue_after_crash_counts_the_attempt(store: SqliteStore) -> None:
    ids = store.submit([SPEC, SPEC], 0, "root", now=1.0)
    store.start_attempt(ids[0], 2.0, "file:///a", "file:///b", "m")
    store.set_pid(ids[0], 1, 4242)
    requeued = store.requeue_running(5.0, "daemon died")
    assert [j.id for j in requeued] == [ids[0]] and requeued[0].pid == 4242
    job = store.get(ids[0])
    assert (job.state, job.attempts, job.failures, job.failure_kind) == (
        JobState.IDLE, 1, 1, "interrupted")
    assert store.attempts(ids[0])[0].outcome == "interrupted"
    assert store.events(ids[0])[-1].kind == "requeue"
    # the interrupted attempt can no longer complete
    assert store.finish_attempt(ids[0], 1, 6.0, Transition(JobState.COMPLETED, "completed",
                                                           "completed")) is None


def test_remove_and_purge(store: SqliteStore) -> None:
    ids = store.submit([SPEC, SPEC], 0, "root", now=1.0)
    before, after = store.remove(ids[0], 2.0, "root")
    assert before.state is JobState.IDLE and after.state is JobState.REMOVED
    with pytest.raises(InvalidRequest, match="already REMOVED"):
        store.remove(ids[0], 3.0, "root")
    assert store.purge_finished(before=2.5) == 1
    assert [j.id for j in store.list_jobs()] == [ids[1]]
    assert store.events(ids[0]) == []


def test_a_failed_transaction_changes_nothing(store: SqliteStore) -> None:
    bad = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text="x",
                  alt_protocols=(("a", "b"),))
    object.__setattr__(bad, "dap_type", object())  # makes to_json fail mid-transaction
    with pytest.raises(AttributeError):  # object() has no .value
        store.submit([SPEC, bad], 0, "root", now=1.0)
    assert store.list_jobs() == []


def test_history_by_pair_direction_and_age(store: SqliteStore) -> None:
    from stork.store.base import HistoryEntry

    store.add_history(HistoryEntry(10.0, "a:1", "b:1", "-b 1024", "optimization", 8, 900.0,
                                   model="second_order", samples=[[1, 100.0], [4, 350.0]]))
    store.add_history(HistoryEntry(20.0, "b:1", "a:1", "", "transfer", 8, 870.0, 10**9, 9.2,
                                   job_id=4))
    both = store.history("a:1", "b:1", symmetric=True)
    assert [(h.kind, h.time) for h in both] == [("transfer", 20.0), ("optimization", 10.0)]
    assert both[1].samples == [[1, 100.0], [4, 350.0]] and both[0].job_id == 4
    assert [h.kind for h in store.history("a:1", "b:1", symmetric=False)] == ["optimization"]
    assert store.history("a:1", "b:1", symmetric=True, since=15.0)[0].kind == "transfer"
    assert store.history("a:1", "b:1", symmetric=True, arguments="-b 1024",
                         kind="optimization")[0].streams == 8
    assert store.history("a:1", "c:1", symmetric=True) == []


def test_update_result_merges(store: SqliteStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    store.update_result(job_id, {"optimized_streams": 4})
    store.update_result(job_id, {"predicted_throughput_mbps": 12.5})
    assert store.get(job_id).result == {"optimized_streams": 4, "predicted_throughput_mbps": 12.5}
    with pytest.raises(JobNotFound):
        store.update_result(99, {"x": 1})
