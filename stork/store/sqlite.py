"""The embedded job store: one SQLite file in WAL mode.

Write transactions use ``BEGIN IMMEDIATE`` so a state change and its event are one atomic
unit; ``synchronous = FULL`` so a committed change survives a crash of the machine too.
One connection serves the process, guarded by a lock (SQLite serialises writers anyway).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from stork.errors import InvalidRequest, JobNotFound, SchemaError, StoreError
from stork.job import DapType, Event, Job, JobSpec, JobState
from stork.store.base import Attempt, HistoryEntry, JobStore, Transition

SCHEMA_VERSION = 1

SCHEMA = (
    """CREATE TABLE schema_version (version INTEGER NOT NULL)""",
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        owner_uid INTEGER NOT NULL,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,
        spec TEXT NOT NULL,
        dap_type TEXT NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        submitted_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL DEFAULT 0,
        started_at REAL,
        finished_at REAL,
        last_error TEXT,
        failure_kind TEXT,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        rate_mbps REAL NOT NULL DEFAULT 0,
        pid INTEGER,
        result TEXT NOT NULL DEFAULT '{}'
    )""",
    """CREATE INDEX jobs_runnable ON jobs (state, next_attempt_at, id)""",
    """CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL,
        time REAL NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    )""",
    """CREATE INDEX events_job ON events (job_id, seq)""",
    """CREATE TABLE history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        src_host TEXT NOT NULL,
        dest_host TEXT NOT NULL,
        arguments TEXT NOT NULL,
        kind TEXT NOT NULL,
        streams INTEGER NOT NULL,
        throughput_mbps REAL NOT NULL,
        bytes_moved INTEGER NOT NULL DEFAULT 0,
        duration_s REAL NOT NULL DEFAULT 0,
        model TEXT NOT NULL DEFAULT '',
        samples TEXT NOT NULL DEFAULT '[]',
        job_id INTEGER
    )""",
    """CREATE INDEX history_pair ON history (src_host, dest_host, kind, time)""",
    """CREATE TABLE attempts (
        job_id INTEGER NOT NULL,
        number INTEGER NOT NULL,
        started_at REAL NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        module TEXT NOT NULL,
        ended_at REAL,
        exit_code INTEGER,
        outcome TEXT,
        error TEXT,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, number)
    )""",
)

_JOB_COLUMNS = ("id, owner_uid, owner, state, spec, dap_type, src_url, dest_url, submitted_at, "
                "updated_at, attempts, failures, next_attempt_at, started_at, finished_at, "
                "last_error, failure_kind, bytes_done, rate_mbps, pid, result")


_STATES = {state.value: state for state in JobState}


def _job(row: Sequence[Any]) -> Job:
    """A Job from a row of _JOB_COLUMNS (same order as Job's fields)."""
    result = row[20]
    return Job(row[0], row[1], row[2], _STATES[row[3]], *row[4:20],  # type: ignore[misc]
               result=json.loads(result) if result != "{}" else {})


@dataclass
class _PendingSubmit:
    specs: list[JobSpec]
    owner_uid: int
    owner: str
    now: float
    ids: list[int] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


class SqliteStore(JobStore):
    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, mode=0o755, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, timeout=30, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open database: {exc}") from None
        os.chmod(path, 0o600)  # the queue holds every user's jobs: readable by the daemon only
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._pending_lock = threading.Lock()
        self._pending: list[_PendingSubmit] = []
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.execute("PRAGMA foreign_keys = ON")
        self._init_schema()

    def _init_schema(self) -> None:
        with self._tx() as db:
            exists = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if not exists:
                for statement in SCHEMA:
                    db.execute(statement)
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            row = db.execute("SELECT version FROM schema_version").fetchone()
            found = row["version"] if row else -1
            if found != SCHEMA_VERSION:
                raise SchemaError(self.path, found, SCHEMA_VERSION)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _read_jobs(self, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
        with self._lock:
            cursor = self._db.cursor()
            cursor.row_factory = None  # plain tuples: the listing hot path
            rows = cursor.execute(f"SELECT {_JOB_COLUMNS} FROM jobs {where}", params).fetchall()
        return [_job(row) for row in rows]

    @staticmethod
    def _event(db: sqlite3.Connection, job_id: int, now: float, kind: str,
               detail: dict[str, Any] | None = None) -> None:
        db.execute("INSERT INTO events (job_id, time, kind, detail) VALUES (?, ?, ?, ?)",
                   (job_id, now, kind, json.dumps(detail or {}, sort_keys=True)))

    def _get(self, db: sqlite3.Connection, job_id: int) -> Job:
        cursor = db.cursor()
        cursor.row_factory = None
        row = cursor.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return _job(row)

    # -- JobStore ---------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec], owner_uid: int, owner: str, now: float) -> list[int]:
        """Group commit: concurrent submissions waiting for the lock share one transaction.

        Each caller queues its batch, then takes the lock; whoever gets it first commits every
        queued batch at once (one fsync for all), and the others find theirs already done.
        """
        entry = _PendingSubmit(list(specs), owner_uid, owner, now)
        with self._pending_lock:
            self._pending.append(entry)
        with self._lock:
            if not entry.done:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._commit_submits(batch)
        if entry.error is not None:
            raise entry.error
        return entry.ids

    def _commit_submits(self, batch: list[_PendingSubmit]) -> None:
        try:
            with self._tx() as db:
                for entry in batch:
                    entry.ids = self._insert(db, entry)
        except Exception:
            if len(batch) == 1:
                batch[0].ids = []
                batch[0].error = sys.exc_info()[1]
                batch[0].done = True
            else:  # one entry spoiled the shared transaction: give each its own
                for entry in batch:
                    self._commit_submits([entry])
                return
        for entry in batch:
            entry.done = True

    def _insert(self, db: sqlite3.Connection, entry: _PendingSubmit) -> list[int]:
        ids = []
        for spec in entry.specs:
            cursor = db.execute(
                "INSERT INTO jobs (owner_uid, owner, state, spec, dap_type, src_url, dest_url, "
                "submitted_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.owner_uid, entry.owner, JobState.IDLE.value, spec.to_json(),
                 spec.dap_type.value, spec.src_url, spec.dest_url, entry.now, entry.now))
            job_id = int(cursor.lastrowid or 0)
            self._event(db, job_id, entry.now, "submit", {"owner": entry.owner})
            ids.append(job_id)
        return ids

    def get(self, job_id: int) -> Job:
        with self._lock:
            return self._get(self._db, job_id)

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        if states is None:
            return self._read_jobs("ORDER BY id")
        marks = ", ".join("?" for _ in states)
        return self._read_jobs(f"WHERE state IN ({marks}) ORDER BY id", [s.value for s in states])

    def runnable(self, now: float, limit: int) -> list[Job]:
        return self._read_jobs("WHERE state = ? AND next_attempt_at <= ? AND dap_type = ? "
                               "ORDER BY next_attempt_at, id LIMIT ?",
                               (JobState.IDLE.value, now, DapType.TRANSFER.value, limit))

    def waiting_transfers(self) -> list[tuple[int, float]]:
        rows = self._read("SELECT id, next_attempt_at FROM jobs WHERE state = ? AND dap_type = ?",
                          (JobState.IDLE.value, DapType.TRANSFER.value))
        return [(int(r[0]), float(r[1])) for r in rows]

    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str) -> Job | None:
        with self._tx() as db:
            cursor = db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1, started_at = ?, updated_at = ?, "
                "bytes_done = 0, rate_mbps = 0, pid = NULL WHERE id = ? AND state = ?",
                (JobState.RUNNING.value, now, now, job_id, JobState.IDLE.value))
            if cursor.rowcount != 1:
                return None
            job = self._get(db, job_id)
            db.execute("INSERT INTO attempts (job_id, number, started_at, src_url, dest_url, module) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, job.attempts, now, src_url, dest_url, module))
            self._event(db, job_id, now, "execute", {"attempt": job.attempts, "module": module,
                                                     "src_url": src_url, "dest_url": dest_url})
            return job

    def set_pid(self, job_id: int, attempt: int, pid: int | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET pid = ? WHERE id = ? AND attempts = ? AND state = ?",
                       (pid, job_id, attempt, JobState.RUNNING.value))

    def record_progress(self, job_id: int, attempt: int, bytes_done: int, rate_mbps: float) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET bytes_done = ?, rate_mbps = ? "
                       "WHERE id = ? AND attempts = ? AND state = ?",
                       (bytes_done, rate_mbps, job_id, attempt, JobState.RUNNING.value))

    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        t = transition
        with self._tx() as db:
            db.execute(
                "UPDATE attempts SET ended_at = ?, exit_code = ?, outcome = ?, error = ?, "
                "bytes_done = COALESCE(?, bytes_done) WHERE job_id = ? AND number = ? "
                "AND ended_at IS NULL",
                (now, t.exit_code, t.outcome, t.error, t.bytes_done, job_id, attempt))
            finished = now if t.state.terminal else None
            cursor = db.execute(
                "UPDATE jobs SET state = ?, updated_at = ?, failures = failures + ?, "
                "next_attempt_at = ?, finished_at = ?, last_error = COALESCE(?, last_error), "
                "failure_kind = COALESCE(?, failure_kind), bytes_done = COALESCE(?, bytes_done), "
                "rate_mbps = 0, pid = NULL WHERE id = ? AND attempts = ? AND state = ?",
                (t.state.value, now, int(t.count_failure), t.next_attempt_at, finished, t.error,
                 t.failure_kind, t.bytes_done, job_id, attempt, JobState.RUNNING.value))
            if cursor.rowcount != 1:
                return None
            if t.result:
                self._merge_result(db, job_id, t.result)
            detail = {"attempt": attempt, "exit_code": t.exit_code, **t.detail}
            if t.error:
                detail["error"] = t.error
            self._event(db, job_id, now, t.event, detail)
            return self._get(db, job_id)

    def requeue_running(self, now: float, reason: str) -> list[Job]:
        with self._tx() as db:
            jobs = self._read_jobs("WHERE state = ?", (JobState.RUNNING.value,))
            for job in jobs:
                db.execute("UPDATE attempts SET ended_at = ?, outcome = 'interrupted', error = ? "
                           "WHERE job_id = ? AND number = ? AND ended_at IS NULL",
                           (now, reason, job.id, job.attempts))
                db.execute("UPDATE jobs SET state = ?, failures = failures + 1, updated_at = ?, "
                           "next_attempt_at = 0, last_error = ?, failure_kind = 'interrupted', "
                           "rate_mbps = 0, pid = NULL WHERE id = ?",
                           (JobState.IDLE.value, now, reason, job.id))
                self._event(db, job.id, now, "requeue",
                            {"attempt": job.attempts, "reason": reason, "pid": job.pid})
        return jobs

    def remove(self, job_id: int, now: float, by: str) -> tuple[Job, Job]:
        with self._tx() as db:
            before = self._get(db, job_id)
            if before.state.terminal:
                raise InvalidRequest(f"job {job_id} is already {before.state.value}")
            db.execute("UPDATE jobs SET state = ?, updated_at = ?, finished_at = ?, rate_mbps = 0 "
                       "WHERE id = ?", (JobState.REMOVED.value, now, now, job_id))
            if before.state is JobState.RUNNING:
                db.execute("UPDATE attempts SET ended_at = ?, outcome = 'removed' "
                           "WHERE job_id = ? AND number = ? AND ended_at IS NULL",
                           (now, job_id, before.attempts))
            self._event(db, job_id, now, "removed", {"by": by})
            return before, self._get(db, job_id)

    def events(self, job_id: int) -> list[Event]:
        rows = self._read("SELECT seq, job_id, time, kind, detail FROM events WHERE job_id = ? "
                          "ORDER BY seq", (job_id,))
        return [Event(job_id=r["job_id"], time=r["time"], kind=r["kind"],
                      detail=json.loads(r["detail"]), seq=r["seq"]) for r in rows]

    def attempts(self, job_id: int) -> list[Attempt]:
        rows = self._read("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))
        return [Attempt(**dict(row)) for row in rows]

    def purge_finished(self, before: float) -> int:
        terminal = [s.value for s in JobState if s.terminal]
        marks = ", ".join("?" for _ in terminal)
        with self._tx() as db:
            ids = [r["id"] for r in db.execute(
                f"SELECT id FROM jobs WHERE state IN ({marks}) AND finished_at < ?",
                (*terminal, before)).fetchall()]
            for job_id in ids:
                db.execute("DELETE FROM events WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM attempts WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        return len(ids)

    @staticmethod
    def _merge_result(db: sqlite3.Connection, job_id: int, values: dict[str, Any]) -> None:
        row = db.execute("SELECT result FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        merged = {**json.loads(row["result"]), **values}
        db.execute("UPDATE jobs SET result = ? WHERE id = ?",
                   (json.dumps(merged, sort_keys=True), job_id))

    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        with self._tx() as db:
            self._merge_result(db, job_id, values)

    def add_history(self, entry: HistoryEntry) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO history (time, src_host, dest_host, arguments, kind, streams, "
                "throughput_mbps, bytes_moved, duration_s, model, samples, job_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.time, entry.src_host, entry.dest_host, entry.arguments, entry.kind,
                 entry.streams, entry.throughput_mbps, entry.bytes_moved, entry.duration_s,
                 entry.model, json.dumps(entry.samples), entry.job_id))

    def history(self, src_host: str, dest_host: str, *, symmetric: bool,
                arguments: str | None = None, kind: str | None = None,
                since: float = 0.0, limit: int = 100) -> list[HistoryEntry]:
        pair = "(src_host = ? AND dest_host = ?)"
        params: list[Any] = [src_host, dest_host]
        if symmetric:
            pair = f"({pair} OR (src_host = ? AND dest_host = ?))"
            params += [dest_host, src_host]
        where = [pair, "time >= ?"]
        params.append(since)
        if arguments is not None:
            where.append("arguments = ?")
            params.append(arguments)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        rows = self._read(
            "SELECT time, src_host, dest_host, arguments, kind, streams, throughput_mbps, "
            "bytes_moved, duration_s, model, samples, job_id FROM history WHERE "
            + " AND ".join(where) + " ORDER BY time DESC, id DESC LIMIT ?", (*params, limit))
        return [HistoryEntry(**{**dict(r), "samples": json.loads(r["samples"])}) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
