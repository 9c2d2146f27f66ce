"""The embedded job store: one SQLite file in WAL mode (connections in `sqlite_db`).

Every state change and its event are written in one ``BEGIN IMMEDIATE`` transaction; reads
use read-only connections and never wait for a write. When the database cannot be written
(disk full, I/O error, locked) each method does what `stork.store.base` promises: retry,
refuse (`submit`), drop (`record_progress`) or fail (`purge_finished`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from stork.dataset.expand import DatasetFile
from stork.errors import InvalidRequest, JobNotFound, SchemaError, StoreUnavailable
from stork.job import DapType, DatasetFileRow, Event, FileState, Job, JobSpec, JobState
from stork.store.base import (
    Attempt,
    FileResult,
    HistoryEntry,
    HostLimit,
    JobStore,
    Outage,
    Transition,
)
from stork.store.sqlite_db import GcPause, SqliteDatabase, transient_cause
from stork.translog import TransferRecord

SCHEMA_VERSION = 3

FILES_SCHEMA = (
    """CREATE TABLE files (
        job_id INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        rel_path TEXT NOT NULL,
        size_bytes INTEGER,
        state TEXT NOT NULL DEFAULT 'PENDING',
        bytes_done INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL DEFAULT 0,
        last_error TEXT,
        failure_kind TEXT,
        checksum TEXT,
        chunk TEXT,
        in_doubt INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, idx)
    ) WITHOUT ROWID""",
    """CREATE INDEX files_state ON files (job_id, state, idx)""",
)

# The transfer log: one row per finished chunk or file (stork.translog.TransferRecord); rows
# are added, never rewritten.
TRANSFERS_SCHEMA = (
    """CREATE TABLE transfers (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        src_host TEXT NOT NULL,
        dest_host TEXT NOT NULL,
        rtt_s REAL,
        bandwidth_bps REAL,
        buffer_bytes INTEGER,
        file_size_bytes REAL NOT NULL,
        file_count INTEGER NOT NULL,
        cc INTEGER NOT NULL,
        p INTEGER NOT NULL,
        pp INTEGER NOT NULL,
        fast INTEGER NOT NULL,
        bytes_moved INTEGER NOT NULL,
        duration_s REAL NOT NULL,
        throughput_mbps REAL NOT NULL,
        sharing INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        origin TEXT NOT NULL
    )""",
    """CREATE INDEX transfers_pair ON transfers (src_host, dest_host, time)""",
)
_TRANSFER_FIELDS = tuple(f.name for f in fields(TransferRecord))

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
        result TEXT NOT NULL DEFAULT '{}',
        files_total INTEGER NOT NULL DEFAULT 0,
        files_done INTEGER NOT NULL DEFAULT 0,
        files_failed INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER
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
    *FILES_SCHEMA,
    *TRANSFERS_SCHEMA,
)

# Version 1 -> 2: datasets (the jobs' file counters and the files table).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE jobs ADD COLUMN files_total INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN files_done INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN files_failed INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN bytes_total INTEGER",
        *FILES_SCHEMA),
    2: TRANSFERS_SCHEMA,  # 2 -> 3: the transfer log
}

_JOB_COLUMNS = ("id, owner_uid, owner, state, spec, dap_type, src_url, dest_url, submitted_at, "
                "updated_at, attempts, failures, next_attempt_at, started_at, finished_at, "
                "last_error, failure_kind, bytes_done, rate_mbps, pid, result, files_total, "
                "files_done, files_failed, bytes_total")
# Job's fields in _JOB_COLUMNS order (the spec column holds Job.spec_json)
_JOB_FIELDS = tuple("spec_json" if c == "spec" else c for c in _JOB_COLUMNS.split(", "))
if tuple(f.name for f in fields(Job)) != _JOB_FIELDS or hasattr(Job, "__post_init__"):
    raise ImportError("stork.job.Job changed: update _JOB_COLUMNS and _job in "
                      "stork/store/sqlite.py")

_STATES = {state.value: state for state in JobState}

_gc_paused = GcPause()


def _job(row: Sequence[Any]) -> Job:
    """A Job from a row of _JOB_COLUMNS. The listing hot path: it fills the instance's
    fields directly instead of through the frozen dataclass's __init__ (a third of the cost
    of listing 100,000 jobs); the import-time check above keeps the two in step."""
    values = dict(zip(_JOB_FIELDS, row, strict=True))
    values["state"] = _STATES[row[3]]
    values["result"] = json.loads(row[20]) if row[20] != "{}" else {}
    job = object.__new__(Job)
    object.__setattr__(job, "__dict__", values)
    return job


def _select_jobs(db: sqlite3.Connection, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
    cursor = db.cursor()
    cursor.row_factory = None  # plain tuples: the listing hot path
    rows = cursor.execute(f"SELECT {_JOB_COLUMNS} FROM jobs {where}", params).fetchall()  # noqa: S608 - constant SQL; values are bound
    return [_job(row) for row in rows]


def _get(db: sqlite3.Connection, job_id: int) -> Job:
    jobs = _select_jobs(db, "WHERE id = ?", (job_id,))
    if not jobs:
        raise JobNotFound(job_id)
    return jobs[0]


def _event(db: sqlite3.Connection, job_id: int, now: float, kind: str,
           detail: dict[str, Any] | None = None) -> None:
    db.execute("INSERT INTO events (job_id, time, kind, detail) VALUES (?, ?, ?, ?)",
               (job_id, now, kind, json.dumps(detail or {}, sort_keys=True)))


def _runs(db: sqlite3.Connection, job_id: int, attempt: int) -> bool:
    """Whether the job is RUNNING attempt `attempt`."""
    return db.execute("SELECT 1 FROM jobs WHERE id = ? AND state = ? AND attempts = ?",
                      (job_id, JobState.RUNNING.value, attempt)).fetchone() is not None


def _merge_result(db: sqlite3.Connection, job_id: int, values: dict[str, Any]) -> None:
    row = db.execute("SELECT result FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    merged = {**json.loads(row["result"]), **values}
    db.execute("UPDATE jobs SET result = ? WHERE id = ?",
               (json.dumps(merged, sort_keys=True), job_id))


_FILE_STATES = {state.value: state for state in FileState}
_FILE_COLUMNS = ("job_id, idx, src_url, dest_url, rel_path, size_bytes, state, bytes_done, "
                 "attempts, failures, next_attempt_at, last_error, failure_kind, checksum, "
                 "chunk, in_doubt")


def _file_row(row: Sequence[Any]) -> DatasetFileRow:
    return DatasetFileRow(row[0], row[1], row[2], row[3], row[4], row[5], _FILE_STATES[row[6]],
                          row[7], row[8], row[9], row[10], row[11], row[12], row[13], row[14],
                          bool(row[15]))


def _insert_files(db: sqlite3.Connection, job_id: int, files: Sequence[DatasetFile]) -> None:
    """The files of a dataset, PENDING, and the job's totals."""
    db.executemany("INSERT INTO files (job_id, idx, src_url, dest_url, rel_path, size_bytes) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   ((job_id, i, f.src_url, f.dest_url, f.rel_path, f.size_bytes)
                    for i, f in enumerate(files)))
    sizes = [f.size_bytes for f in files]
    total = None if any(size is None for size in sizes) else sum(s or 0 for s in sizes)
    db.execute("UPDATE jobs SET files_total = ?, bytes_total = ? WHERE id = ?",
               (len(files), total, job_id))


@dataclass
class _PendingSubmit:
    specs: list[JobSpec]
    owner_uid: int
    owner: str
    now: float
    files: Mapping[int, Sequence[DatasetFile]] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


class SqliteStore(JobStore):
    def __init__(self, path: str, node: str = "") -> None:
        super().__init__(node)
        self.path = path
        self._database = SqliteDatabase(path)
        self.directory = self._database.directory
        self._pending_lock = threading.Lock()
        self._pending: list[_PendingSubmit] = []
        try:
            self._init_schema()
        except sqlite3.Error as exc:
            self._database.close()
            raise self._database.error("cannot open database", exc) from None
        except BaseException:
            self._database.close()
            raise

    def _init_schema(self) -> None:
        with self._database.tx() as db:
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
            while found in MIGRATIONS:
                for statement in MIGRATIONS[found]:
                    db.execute(statement)
                found += 1
                db.execute("UPDATE schema_version SET version = ?", (found,))
            if found != SCHEMA_VERSION:
                raise SchemaError(self.path, found, SCHEMA_VERSION)

    @property
    def outage(self) -> Outage | None:
        return self._database.health.outage

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._database.reader() as db:
            return db.execute(sql, params).fetchall()

    def _read_jobs(self, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
        with self._database.reader() as db, _gc_paused():
            return _select_jobs(db, where, params)

    # -- JobStore ---------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec], owner_uid: int, owner: str, now: float,
               files: Mapping[int, Sequence[DatasetFile]] | None = None) -> list[int]:
        """Group commit: concurrent submissions waiting for the lock share one transaction.

        Each caller queues its batch, then takes the lock; whoever gets it first commits every
        queued batch at once (one fsync for all), and the others find theirs already done.
        Never retried: when the database cannot be written every waiting batch is refused
        with StoreUnavailable, and nothing of it is queued.
        """
        entry = _PendingSubmit(list(specs), owner_uid, owner, now, files or {})
        with self._pending_lock:
            self._pending.append(entry)
        with self._database.lock:
            if not entry.done:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._commit_submits(batch)
        if entry.error is not None:
            raise entry.error
        self._notify(entry.ids)
        return entry.ids

    def _commit_submits(self, batch: list[_PendingSubmit]) -> None:
        try:
            with self._database.tx() as db:
                for entry in batch:
                    entry.ids = self._insert(db, entry)
        except sqlite3.Error as exc:
            cause = transient_cause(exc)
            if cause is not None:  # no batch can be written: refuse them all
                self._database.health.failed(cause, "submit", "refuse")
                for entry in batch:
                    entry.ids = []
                    entry.error = StoreUnavailable(
                        f"cannot queue jobs: the job store {self.path} cannot be written "
                        f"({cause}); state directory {self.directory}")
                    entry.done = True
                return
            self._refuse_or_split(batch, self._database.error("submit", exc))
            return
        except Exception as exc:  # noqa: BLE001 - every waiting submitter must get an answer
            self._refuse_or_split(batch, exc)
            return
        self._database.health.landed()
        for entry in batch:
            entry.done = True

    def _refuse_or_split(self, batch: list[_PendingSubmit], error: BaseException) -> None:
        if len(batch) == 1:
            batch[0].ids = []
            batch[0].error = error
            batch[0].done = True
        else:  # one entry spoiled the shared transaction: give each its own
            for entry in batch:
                self._commit_submits([entry])

    def _insert(self, db: sqlite3.Connection, entry: _PendingSubmit) -> list[int]:
        ids = []
        for position, spec in enumerate(entry.specs):
            cursor = db.execute(
                "INSERT INTO jobs (owner_uid, owner, state, spec, dap_type, src_url, dest_url, "
                "submitted_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.owner_uid, entry.owner, JobState.IDLE.value, spec.to_json(),
                 spec.dap_type.value, spec.src_url, spec.dest_url, entry.now, entry.now))
            job_id = int(cursor.lastrowid or 0)
            if position in entry.files:
                _insert_files(db, job_id, entry.files[position])
            _event(db, job_id, entry.now, "submit", {"owner": entry.owner})
            ids.append(job_id)
        return ids

    def get(self, job_id: int) -> Job:
        jobs = self._read_jobs("WHERE id = ?", (job_id,))
        if not jobs:
            raise JobNotFound(job_id)
        return jobs[0]

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        if states is None:
            return self._read_jobs("ORDER BY id")
        marks = ", ".join("?" for _ in states)
        # through the state index, sorted here: SQLite would copy every row into a sorter
        jobs = self._read_jobs(f"WHERE state IN ({marks})", [s.value for s in states])
        jobs.sort(key=attrgetter("id"))
        return jobs

    def runnable(self, now: float, limit: int) -> list[Job]:
        return self._read_jobs("WHERE state = ? AND next_attempt_at <= ? AND dap_type = ? "
                               "ORDER BY next_attempt_at, id LIMIT ?",
                               (JobState.IDLE.value, now, DapType.TRANSFER.value, limit))

    def waiting_transfers(self) -> list[tuple[int, float]]:
        rows = self._read("SELECT id, next_attempt_at FROM jobs WHERE state = ? AND dap_type = ?",
                          (JobState.IDLE.value, DapType.TRANSFER.value))
        return [(int(r[0]), float(r[1])) for r in rows]

    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str, limit: HostLimit | None = None) -> Job | None:
        def body(db: sqlite3.Connection) -> Job | None:
            cursor = db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1, started_at = ?, "
                "updated_at = ?, bytes_done = CASE WHEN files_total > 0 THEN bytes_done ELSE 0 "
                "END, rate_mbps = 0, pid = NULL "
                "WHERE id = ? AND state = ?",
                (JobState.RUNNING.value, now, now, job_id, JobState.IDLE.value))
            if cursor.rowcount != 1:
                return None
            job = _get(db, job_id)
            db.execute("INSERT INTO attempts (job_id, number, started_at, src_url, dest_url, "
                       "module) VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, job.attempts, now, src_url, dest_url, module))
            _event(db, job_id, now, "execute", {"attempt": job.attempts, "module": module,
                                                     "src_url": src_url, "dest_url": dest_url})
            return job

        job = self._database.write(f"start of job {job_id}", body)
        if job is not None:
            self._notify([job_id])
        return job

    def set_pid(self, job_id: int, attempt: int, pid: int | None) -> None:
        def body(db: sqlite3.Connection) -> None:
            db.execute("UPDATE jobs SET pid = ? WHERE id = ? AND attempts = ? AND state = ?",
                       (pid, job_id, attempt, JobState.RUNNING.value))

        self._database.write(f"pid of job {job_id} attempt {attempt}", body)

    def record_progress(self, job_id: int, attempt: int, bytes_done: int, rate_mbps: float) -> None:
        def body(db: sqlite3.Connection) -> None:
            db.execute("UPDATE jobs SET bytes_done = ?, rate_mbps = ? "
                       "WHERE id = ? AND attempts = ? AND state = ?",
                       (bytes_done, rate_mbps, job_id, attempt, JobState.RUNNING.value))

        # said once per outage; the next progress report or the end carries on
        with contextlib.suppress(StoreUnavailable):
            self._database.write_once(f"progress of job {job_id}", body, "drop")

    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        t = transition

        def body(db: sqlite3.Connection) -> Job | None:
            finished = now if t.state.terminal else None
            cursor = db.execute(
                "UPDATE jobs SET state = ?, updated_at = ?, failures = failures + ?, "
                "next_attempt_at = ?, finished_at = ?, last_error = COALESCE(?, last_error), "
                "failure_kind = COALESCE(?, failure_kind), bytes_done = COALESCE(?, bytes_done), "
                "rate_mbps = 0, pid = NULL WHERE id = ? AND attempts = ? AND state = ?",
                (t.state.value, now, int(t.count_failure), t.next_attempt_at, finished, t.error,
                 t.failure_kind, t.bytes_done, job_id, attempt, JobState.RUNNING.value))
            if cursor.rowcount != 1:
                return None  # the job moved on: nothing changes, the attempt row included
            db.execute(
                "UPDATE attempts SET ended_at = ?, exit_code = ?, outcome = ?, error = ?, "
                "bytes_done = COALESCE(?, bytes_done) WHERE job_id = ? AND number = ? "
                "AND ended_at IS NULL",
                (now, t.exit_code, t.outcome, t.error, t.bytes_done, job_id, attempt))
            if t.result:
                _merge_result(db, job_id, t.result)
            detail = {"attempt": attempt, "exit_code": t.exit_code, **t.detail}
            if t.error:
                detail["error"] = t.error
            _event(db, job_id, now, t.event, detail)
            return _get(db, job_id)

        job = self._database.write(f"end of job {job_id} attempt {attempt}", body)
        if job is not None:
            self._notify([job_id])
        return job

    def requeue_running(self, now: float, reason: str) -> list[Job]:
        def body(db: sqlite3.Connection) -> list[Job]:
            jobs = _select_jobs(db, "WHERE state = ? ORDER BY id", (JobState.RUNNING.value,))
            for job in jobs:
                db.execute("UPDATE attempts SET ended_at = ?, outcome = 'interrupted', error = ? "
                           "WHERE job_id = ? AND number = ? AND ended_at IS NULL",
                           (now, reason, job.id, job.attempts))
                db.execute("UPDATE files SET state = ?, in_doubt = 1 WHERE job_id = ? AND "
                           "state = ?", (FileState.PENDING.value, job.id, FileState.RUNNING.value))
                db.execute("UPDATE jobs SET state = ?, failures = failures + 1, updated_at = ?, "
                           "next_attempt_at = 0, last_error = ?, failure_kind = 'interrupted', "
                           "rate_mbps = 0, pid = NULL WHERE id = ?",
                           (JobState.IDLE.value, now, reason, job.id))
                _event(db, job.id, now, "requeue",
                            {"attempt": job.attempts, "reason": reason, "pid": job.pid})
            return jobs

        jobs = self._database.write("requeue of running jobs", body)
        self._notify([job.id for job in jobs])
        return jobs

    def remove(self, job_id: int, now: float, by: str) -> tuple[Job, Job]:
        def body(db: sqlite3.Connection) -> tuple[Job, Job]:
            before = _get(db, job_id)
            if before.state.terminal:
                raise InvalidRequest(f"job {job_id} is already {before.state.value}")
            db.execute("UPDATE jobs SET state = ?, updated_at = ?, finished_at = ?, "
                       "rate_mbps = 0 WHERE id = ?", (JobState.REMOVED.value, now, now, job_id))
            db.execute("UPDATE files SET state = ? WHERE job_id = ? AND state = ?",
                       (FileState.PENDING.value, job_id, FileState.RUNNING.value))
            if before.state is JobState.RUNNING:
                db.execute("UPDATE attempts SET ended_at = ?, outcome = 'removed' "
                           "WHERE job_id = ? AND number = ? AND ended_at IS NULL",
                           (now, job_id, before.attempts))
            _event(db, job_id, now, "removed", {"by": by})
            return before, _get(db, job_id)

        changed = self._database.write(f"removal of job {job_id}", body)
        self._notify([job_id])
        return changed

    # -- the files of datasets ----------------------------------------------------------------

    def add_files(self, job_id: int, files: Sequence[DatasetFile]) -> bool:
        terminal = tuple(s.value for s in JobState if s.terminal)

        def body(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT state, files_total FROM jobs WHERE id = ?",
                             (job_id,)).fetchone()
            if row is None or row["files_total"] or row["state"] in terminal:
                return False
            _insert_files(db, job_id, files)
            return True

        return self._database.write(f"files of job {job_id}", body)

    def files(self, job_id: int, states: Sequence[FileState] | None = None,
              offset: int = 0, limit: int | None = None) -> list[DatasetFileRow]:
        where, params = "job_id = ?", [job_id]  # type: tuple[str, list[Any]]
        if states is not None:
            where += f" AND state IN ({', '.join('?' for _ in states)})"
            params += [s.value for s in states]
        with self._database.reader() as db:
            cursor = db.cursor()
            cursor.row_factory = None
            rows = cursor.execute(
                f"SELECT {_FILE_COLUMNS} FROM files WHERE {where} ORDER BY idx "  # noqa: S608 - constant SQL; values are bound
                "LIMIT ? OFFSET ?", (*params, -1 if limit is None else limit, offset)).fetchall()
        return [_file_row(row) for row in rows]

    def start_files(self, job_id: int, attempt: int, indexes: Sequence[int],
                    chunk: str) -> None:
        def body(db: sqlite3.Connection) -> None:
            if not _runs(db, job_id, attempt):
                return
            db.executemany("UPDATE files SET state = ?, attempts = attempts + 1, chunk = ? "
                           "WHERE job_id = ? AND idx = ? AND state = ?",
                           ((FileState.RUNNING.value, chunk, job_id, i, FileState.PENDING.value)
                            for i in indexes))

        self._database.write(f"start of files of job {job_id}", body)

    def finish_files(self, job_id: int, attempt: int, results: Sequence[FileResult],
                     rate_mbps: float | None = None) -> bool:
        def body(db: sqlite3.Connection) -> bool:
            if not _runs(db, job_id, attempt):
                return False
            done = failed = moved = 0  # changes of the job's counters
            for r in results:
                old = db.execute("SELECT state, bytes_done FROM files WHERE job_id = ? AND "
                                 "idx = ?", (job_id, r.index)).fetchone()
                if old is None:
                    continue
                was, now_ = _FILE_STATES[old[0]], r.state
                done += (now_ is FileState.DONE) - (was is FileState.DONE)
                failed += (now_ is FileState.FAILED) - (was is FileState.FAILED)
                moved += (r.bytes_done if now_ is FileState.DONE else 0) - (
                    old[1] if was is FileState.DONE else 0)
                db.execute(
                    "UPDATE files SET state = ?, bytes_done = ?, failures = failures + ?, "
                    "next_attempt_at = ?, last_error = ?, failure_kind = ?, "
                    "checksum = COALESCE(?, checksum), in_doubt = 0 WHERE job_id = ? AND idx = ?",
                    (r.state.value, r.bytes_done, int(r.count_failure), r.next_attempt_at,
                     r.error, r.failure_kind, r.checksum, job_id, r.index))
            db.execute("UPDATE jobs SET files_done = files_done + ?, files_failed = files_failed "
                       "+ ?, bytes_done = bytes_done + ?, rate_mbps = COALESCE(?, rate_mbps) "
                       "WHERE id = ?", (done, failed, moved, rate_mbps, job_id))
            return True

        changed = self._database.write(f"end of files of job {job_id}", body)
        if changed:
            self._notify([job_id])
        return changed

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

        def body(db: sqlite3.Connection) -> int:
            ids = [r["id"] for r in db.execute(
                f"SELECT id FROM jobs WHERE state IN ({marks}) AND finished_at < ?",  # noqa: S608 - constant SQL; values are bound
                (*terminal, before)).fetchall()]
            for job_id in ids:
                db.execute("DELETE FROM events WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM attempts WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM files WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            return len(ids)

        return self._database.write_once("purge of finished jobs", body, "fail")

    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        self._database.write(f"result of job {job_id}",
                             lambda db: _merge_result(db, job_id, values))

    def add_history(self, entry: HistoryEntry) -> None:
        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO history (time, src_host, dest_host, arguments, kind, streams, "
                "throughput_mbps, bytes_moved, duration_s, model, samples, job_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.time, entry.src_host, entry.dest_host, entry.arguments, entry.kind,
                 entry.streams, entry.throughput_mbps, entry.bytes_moved, entry.duration_s,
                 entry.model, json.dumps(entry.samples), entry.job_id))

        self._database.write(f"history of {entry.src_host} -> {entry.dest_host}", body)

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
            "SELECT time, src_host, dest_host, arguments, kind, streams, throughput_mbps, "  # noqa: S608 - constant SQL; values are bound
            "bytes_moved, duration_s, model, samples, job_id FROM history WHERE "
            + " AND ".join(where) + " ORDER BY time DESC, id DESC LIMIT ?", (*params, limit))
        return [HistoryEntry(**{**dict(r), "samples": json.loads(r["samples"])}) for r in rows]

    # -- the transfer log ------------------------------------------------------------------

    def add_transfers(self, records: Sequence[TransferRecord]) -> int:
        columns = ", ".join(_TRANSFER_FIELDS)
        marks = ", ".join("?" for _ in _TRANSFER_FIELDS)

        def body(db: sqlite3.Connection) -> int:
            db.executemany(f"INSERT INTO transfers ({columns}) VALUES ({marks})",  # noqa: S608 - constant SQL; values are bound
                           ([getattr(r, f) for f in _TRANSFER_FIELDS] for r in records))
            return len(records)

        return self._database.write(f"{len(records)} transfer log rows", body) if records else 0

    def transfers(self, src_host: str | None = None, dest_host: str | None = None, *,
                  since: float = 0.0, limit: int | None = None) -> list[TransferRecord]:
        where, params = ["time >= ?"], [since]  # type: tuple[list[str], list[Any]]
        for column, value in (("src_host", src_host), ("dest_host", dest_host)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        with self._database.reader() as db:
            cursor = db.cursor()
            cursor.row_factory = None
            rows = cursor.execute(
                f"SELECT {', '.join(_TRANSFER_FIELDS)} FROM transfers "  # noqa: S608 - constant SQL; values are bound
                f"WHERE {' AND '.join(where)} ORDER BY time DESC, id DESC LIMIT ?",
                (*params, -1 if limit is None else limit)).fetchall()
        return [TransferRecord(**{**dict(zip(_TRANSFER_FIELDS, row, strict=True)),
                                  "fast": bool(row[_TRANSFER_FIELDS.index("fast")])})
                for row in rows]

    def transfers_after(self, row_id: int = 0, limit: int | None = None
                        ) -> list[tuple[int, TransferRecord]]:
        with self._database.reader() as db:
            cursor = db.cursor()
            cursor.row_factory = None
            rows = cursor.execute(
                f"SELECT id, {', '.join(_TRANSFER_FIELDS)} FROM transfers "  # noqa: S608 - constant SQL; values are bound
                "WHERE id > ? ORDER BY id LIMIT ?",
                (row_id, -1 if limit is None else limit)).fetchall()
        fast = _TRANSFER_FIELDS.index("fast")
        return [(int(row[0]), TransferRecord(**{
                    **dict(zip(_TRANSFER_FIELDS, row[1:], strict=True)),
                    "fast": bool(row[1 + fast])}))
                for row in rows]

    def close(self) -> None:
        self._database.close()
