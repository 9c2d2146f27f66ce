"""The SQLite store's own behaviour: WAL, schema version, file mode, and what it does when
another process holds the database locked (the behaviour every store shares is in
test_store_contract.py; a full disk is in test_store_outage.py)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stork.errors import SchemaError, StoreError, StoreUnavailable
from stork.job import DapType, Job, JobSpec, JobState
from stork.store import SqliteStore, Transition, sqlite_db
from stork.store.sqlite import SCHEMA_VERSION
from stork.store.sqlite_db import transient_cause
from stork.translog import TransferRecord

SPEC = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text='[ dap_type = "transfer" ]')
DONE = Transition(JobState.COMPLETED, "completed", "completed", exit_code=0)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqliteStore]:
    monkeypatch.setattr(sqlite_db, "BUSY_TIMEOUT_S", 0.2)  # a lock is found out quickly
    opened = SqliteStore(str(tmp_path / "q.db"))
    yield opened
    opened.close()


@pytest.fixture
def locker(tmp_path: Path, store: SqliteStore) -> Iterator[sqlite3.Connection]:
    """Another process's connection, holding the write lock until it commits."""
    db = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    yield db
    if db.in_transaction:
        db.execute("COMMIT")
    db.close()


def test_wal_mode_and_schema_version(tmp_path: Path, store: SqliteStore) -> None:
    db = sqlite3.connect(tmp_path / "q.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 5
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    store.close()
    with pytest.raises(SchemaError, match="schema version 99"):
        SqliteStore(str(tmp_path / "q.db"))


def test_a_version_1_database_is_migrated_and_keeps_its_jobs(tmp_path: Path,
                                                             store: SqliteStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", 1.0)
    store.close()
    db = sqlite3.connect(tmp_path / "q.db")  # back to version 1: no datasets, no transfer log
    db.execute("DROP TABLE files")
    db.execute("DROP TABLE transfers")
    for column in ("files_total", "files_done", "files_failed", "bytes_total"):
        db.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    db.execute("UPDATE schema_version SET version = 1")
    db.commit()
    db.close()
    again = SqliteStore(str(tmp_path / "q.db"))
    try:
        job = again.get(job_id)
        assert job.src_url == SPEC.src_url and job.files_total == 0
        assert again.files(job_id) == [] and again.transfers() == []
    finally:
        again.close()
    db = sqlite3.connect(tmp_path / "q.db")
    assert db.execute("SELECT version FROM schema_version").fetchone()[0] == 5
    db.close()


def test_a_version_3_transfer_log_keeps_its_rows_and_gains_the_spread_and_the_job(
        tmp_path: Path, store: SqliteStore) -> None:
    old = TransferRecord(time=1.0, src_host="a", dest_host="b", rtt_s=0.04, bandwidth_bps=2e8,
                         buffer_bytes=None, file_size_bytes=1e6, file_count=3, cc=2, p=4, pp=1,
                         fast=False, bytes_moved=3_000_000, duration_s=1.0,
                         throughput_mbps=24.0)
    store.add_transfers([old])
    store.close()
    db = sqlite3.connect(tmp_path / "q.db")  # back to version 3: no spread, no job column
    db.execute("ALTER TABLE transfers DROP COLUMN spread_mbps")
    db.execute("ALTER TABLE transfers DROP COLUMN job_id")
    db.execute("UPDATE schema_version SET version = 3")
    db.commit()
    db.close()
    again = SqliteStore(str(tmp_path / "q.db"))
    try:
        assert again.transfers() == [old]
        again.add_transfers([dataclasses.replace(old, time=2.0, spread_mbps=3.5, job_id=9)])
        assert [(r.spread_mbps, r.job_id) for r in again.transfers()] == [(3.5, 9), (None, None)]
    finally:
        again.close()


def test_database_readable_by_the_daemon_only(tmp_path: Path, store: SqliteStore) -> None:
    assert os.stat(tmp_path / "q.db").st_mode & 0o777 == 0o600


def test_transient_causes_are_told_from_permanent_errors(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY)")
    db.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as constraint:
        db.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError) as schema:
        db.execute("SELECT * FROM missing")
    assert transient_cause(constraint.value) is None
    assert transient_cause(schema.value) is None
    assert transient_cause(ValueError("x")) is None
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    ioerr = sqlite3.OperationalError("disk I/O error")
    ioerr.sqlite_errorcode = sqlite3.SQLITE_IOERR_FSYNC
    assert (transient_cause(full), transient_cause(ioerr)) == ("disk full", "I/O error")


def test_submit_is_refused_while_another_process_holds_the_lock(
        tmp_path: Path, store: SqliteStore, locker: sqlite3.Connection) -> None:
    with pytest.raises(StoreUnavailable) as refused:
        store.submit([SPEC], 0, "root", now=1.0)
    message = str(refused.value)
    assert str(tmp_path) in message and "locked" in message
    assert store.list_jobs() == []
    assert not store.available and store.outage is not None
    assert store.outage.location == f"state directory {tmp_path}"
    assert "locked" in store.outage.cause
    locker.execute("COMMIT")
    assert store.submit([SPEC], 0, "root", now=2.0) == [1]  # usable again, outage over
    assert store.available and store.outage is None


def test_a_finish_waits_out_the_lock_and_lands_once(
        store: SqliteStore, locker: sqlite3.Connection,
        caplog: pytest.LogCaptureFixture) -> None:
    locker.execute("COMMIT")
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    assert store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "m") is not None
    locker.execute("BEGIN IMMEDIATE")
    results: list[Job | None] = []
    caplog.set_level(logging.DEBUG, logger="stork.store")
    finisher = threading.Thread(
        target=lambda: results.append(store.finish_attempt(job_id, 1, 3.0, DONE)))
    finisher.start()
    time.sleep(1.0)
    assert finisher.is_alive() and results == []  # still retrying, not failed
    outage = store.outage
    assert outage is not None and outage.retrying == 1 and "locked" in outage.cause
    assert store.get(job_id).state is JobState.RUNNING  # reads answer meanwhile
    store.record_progress(job_id, 1, 10, 1.0)  # dropped, not raised, not waited for
    with pytest.raises(StoreUnavailable):
        store.purge_finished(before=10.0)
    locker.execute("COMMIT")
    finisher.join(10)
    assert not finisher.is_alive()
    [done] = results
    assert done is not None and done.state is JobState.COMPLETED
    assert [e.kind for e in store.events(job_id)] == ["submit", "execute", "completed"]
    assert store.available
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    retried = [m for m in warnings if m.startswith("store write retried")]
    assert len(retried) == 1, warnings
    assert "database locked" in retried[0] and store.directory in retried[0]
    assert "end of job 1 attempt 1" in retried[0]
    assert len([m for m in warnings if m.startswith("store writable again")]) == 1, warnings


def test_closing_ends_a_write_that_is_being_retried(store: SqliteStore,
                                                    locker: sqlite3.Connection) -> None:
    errors: list[BaseException] = []

    def write() -> None:
        try:
            store.update_result(1, {"x": 1})
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)
    assert writer.is_alive()  # retrying
    store.close()
    writer.join(10)
    assert not writer.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StoreUnavailable)


def test_a_permanent_error_raises_and_leaves_the_store_usable(tmp_path: Path,
                                                              store: SqliteStore) -> None:
    [job_id] = store.submit([SPEC], 0, "root", now=1.0)
    db = sqlite3.connect(tmp_path / "q.db")
    db.execute("ALTER TABLE attempts RENAME TO attempts_gone")
    db.commit()
    with pytest.raises(StoreError, match="no such table: attempts"):
        store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "m")
    assert store.get(job_id).state is JobState.IDLE  # rolled back
    db.execute("ALTER TABLE attempts_gone RENAME TO attempts")
    db.commit()
    db.close()
    assert store.start_attempt(job_id, 3.0, "file:///a", "file:///b", "m") is not None
    assert store.available
