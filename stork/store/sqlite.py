"""The embedded job store: one SQLite file in WAL mode (connections in `sqlite_db`; the
tables, columns and row conversions it shares with the PostgreSQL store in `tables` and
`rows`).

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
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from stork.dataset.expand import DatasetFile
from stork.errors import InvalidRequest, JobNotFound, StoreUnavailable
from stork.job import DapType, DatasetFileRow, Event, FileState, Job, JobSpec, JobState
from stork.store import rows, tables
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

SCHEMA_VERSION = 5

FILES_SCHEMA = tables.files_tables(tables.SQLITE, suffix=" WITHOUT ROWID")
TRANSFERS_SCHEMA = tables.transfers_tables(tables.SQLITE)

SCHEMA = (
    tables.SCHEMA_VERSION_TABLE,
    tables.jobs_table(tables.SQLITE),
    tables.JOBS_RUNNABLE_INDEX,
    *tables.events_tables(tables.SQLITE),
    *tables.history_tables(tables.SQLITE),
    tables.attempts_table(tables.SQLITE),
    *FILES_SCHEMA,
    *TRANSFERS_SCHEMA,
    tables.transfers_spread(tables.SQLITE),
    tables.transfers_job(tables.SQLITE),
)

# Version 1 -> 2: datasets (the jobs' file counters and the files table).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE jobs ADD COLUMN files_total INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN files_done INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN files_failed INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN bytes_total INTEGER",
        *FILES_SCHEMA),
    2: TRANSFERS_SCHEMA,  # 2 -> 3: the transfer log
    3: (tables.transfers_spread(tables.SQLITE),),  # 3 -> 4: a flow stretch's spread
    4: (tables.transfers_job(tables.SQLITE),),  # 4 -> 5: the job of a transfer log row
}

_gc_paused = GcPause()


def _select_jobs(db: sqlite3.Connection, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
    cursor = db.cursor()
    cursor.row_factory = None  # plain tuples: the listing hot path
    found = cursor.execute(f"SELECT {rows.JOB_COLUMNS} FROM jobs {where}", params).fetchall()  # noqa: S608 - constant SQL; values are bound
    return [rows.job_from_row(row) for row in found]


def _get(db: sqlite3.Connection, job_id: int) -> Job:
    return rows.only_job(_select_jobs(db, "WHERE id = ?", (job_id,)), job_id)


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
    db.execute("UPDATE jobs SET result = ? WHERE id = ?",
               (rows.merged_result(row[0], values), job_id))


def _insert_files(db: sqlite3.Connection, job_id: int, files: Sequence[DatasetFile]) -> None:
    """The files of a dataset, PENDING, and the job's totals."""
    db.executemany("INSERT INTO files (job_id, idx, src_url, dest_url, rel_path, size_bytes) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   ((job_id, i, f.src_url, f.dest_url, f.rel_path, f.size_bytes)
                    for i, f in enumerate(files)))
    db.execute("UPDATE jobs SET files_total = ?, bytes_total = ? WHERE id = ?",
               (len(files), rows.bytes_total(files), job_id))


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
            ).fetchone() is not None
            tables.prepare(db, exists=exists, schema=SCHEMA, version=SCHEMA_VERSION,
                           migrations=MIGRATIONS, mark="?", name=self.path)

    @property
    def outage(self) -> Outage | None:
        return self._database.health.outage

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows as plain tuples (cheaper than sqlite3.Row)."""
        with self._database.reader() as db:
            cursor = db.cursor()
            cursor.row_factory = None
            found: list[tuple[Any, ...]] = cursor.execute(sql, params).fetchall()
            return found

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
        return rows.only_job(self._read_jobs("WHERE id = ?", (job_id,)), job_id)

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        if states is None:
            return self._read_jobs("ORDER BY id")
        marks = ", ".join("?" for _ in states)
        # through the state index, sorted here: SQLite would copy every row into a sorter
        jobs = self._read_jobs(f"WHERE state IN ({marks})", [s.value for s in states])
        jobs.sort(key=attrgetter("id"))
        return jobs

    def count_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys((s.value for s in JobState), 0)
        counts.update((str(r[0]), int(r[1]))
                      for r in self._read("SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        return counts

    def runnable(self, now: float, limit: int) -> list[Job]:
        return self._read_jobs("WHERE state = ? AND next_attempt_at <= ? AND dap_type = ? "
                               "ORDER BY next_attempt_at, id LIMIT ?",
                               (JobState.IDLE.value, now, DapType.TRANSFER.value, limit))

    def waiting_transfers(self) -> list[tuple[int, float]]:
        found = self._read("SELECT id, next_attempt_at FROM jobs WHERE state = ? AND dap_type = ?",
                           (JobState.IDLE.value, DapType.TRANSFER.value))
        return [(int(r[0]), float(r[1])) for r in found]

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
            _event(db, job_id, now, t.event, rows.end_detail(attempt, t))
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
        found = self._read(f"SELECT {rows.FILE_COLUMNS} FROM files WHERE {where} ORDER BY idx "  # noqa: S608 - constant SQL; values are bound
                           "LIMIT ? OFFSET ?", (*params, -1 if limit is None else limit, offset))
        return [rows.file_from_row(row) for row in found]

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
                was = rows.FILE_STATES[old[0]]
                d_done, d_failed, d_moved = rows.counter_changes(was, old[1], r)
                done, failed, moved = done + d_done, failed + d_failed, moved + d_moved
                db.execute(
                    "UPDATE files SET state = ?, bytes_done = ?, failures = failures + ?, "
                    "next_attempt_at = ?, last_error = ?, failure_kind = ?, "
                    "checksum = COALESCE(?, checksum), in_doubt = 0 WHERE job_id = ? AND idx = ?",
                    rows.file_result_values(job_id, r))
            db.execute("UPDATE jobs SET files_done = files_done + ?, files_failed = files_failed "
                       "+ ?, bytes_done = bytes_done + ?, rate_mbps = COALESCE(?, rate_mbps) "
                       "WHERE id = ?", (done, failed, moved, rate_mbps, job_id))
            return True

        changed = self._database.write(f"end of files of job {job_id}", body)
        if changed:
            self._notify([job_id])
        return changed

    def events(self, job_id: int) -> list[Event]:
        found = self._read(f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE job_id = ? "  # noqa: S608 - constant SQL; values are bound
                           "ORDER BY seq", (job_id,))
        return [rows.event_from_row(r) for r in found]

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._database.reader() as db:  # sqlite3.Row: by column name
            found = db.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY number",
                               (job_id,)).fetchall()
        return [Attempt(**dict(row)) for row in found]

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
            db.execute(rows.history_insert("?"), rows.history_values(entry))

        self._database.write(f"history of {entry.src_host} -> {entry.dest_host}", body)

    def history(self, src_host: str, dest_host: str, *, symmetric: bool,
                arguments: str | None = None, kind: str | None = None,
                since: float = 0.0, limit: int = 100) -> list[HistoryEntry]:
        found = self._read(*rows.history_query(src_host, dest_host, symmetric=symmetric,
                                               arguments=arguments, kind=kind, since=since,
                                               limit=limit, mark="?"))
        return [rows.history_from_row(r) for r in found]

    # -- the transfer log ------------------------------------------------------------------

    def add_transfers(self, records: Sequence[TransferRecord]) -> int:
        marks = ", ".join("?" for _ in rows.TRANSFER_FIELDS)

        def body(db: sqlite3.Connection) -> int:
            db.executemany(f"INSERT INTO transfers ({rows.TRANSFER_COLUMNS}) VALUES ({marks})",  # noqa: S608 - constant SQL; values are bound
                           ([getattr(r, f) for f in rows.TRANSFER_FIELDS] for r in records))
            return len(records)

        return self._database.write(f"{len(records)} transfer log rows", body) if records else 0

    def transfers(self, src_host: str | None = None, dest_host: str | None = None, *,
                  since: float = 0.0, limit: int | None = None) -> list[TransferRecord]:
        found = self._read(*rows.transfers_query(src_host, dest_host, since,
                                                 -1 if limit is None else limit, mark="?"))
        return [rows.transfer_from_row(row) for row in found]

    def transfers_after(self, row_id: int = 0, limit: int | None = None
                        ) -> list[tuple[int, TransferRecord]]:
        found = self._read(f"SELECT id, {rows.TRANSFER_COLUMNS} FROM transfers WHERE id > ? "  # noqa: S608 - constant SQL; values are bound
                           "ORDER BY id LIMIT ?", (row_id, -1 if limit is None else limit))
        return [rows.numbered_transfer(row) for row in found]

    def close(self) -> None:
        self._database.close()
