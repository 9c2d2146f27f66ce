"""The shared job store: one PostgreSQL database for several stork_servers (nodes).

The tables are SQLite's (`stork.store.tables`; columns and row conversions in
`stork.store.rows`) with what sharing needs:

- `jobs.claimed_by` / `jobs.claimed_until`: the node running the job's attempt and its
  lease, in unix seconds *by the database's clock* (nodes' clocks never compare). A node
  claims an IDLE job with ``SELECT ... FOR UPDATE SKIP LOCKED`` (of racing nodes exactly
  one gets it, none waits) and renews the lease while the attempt runs; every write of the
  attempt (pid, progress, files, its end) is fenced by ``claimed_by = node AND
  claimed_until > now``, so a node that lost its lease (paused, cut off) can change
  nothing afterwards. `requeue_expired` gives an expired job back to the queue.
- `jobs.src_host` / `jobs.dest_host`: the hosts of a running transfer (set when its
  attempt starts, from the dispatcher's `HostLimit`), for the cluster-wide host limit:
  `start_attempt` takes a transaction-scoped advisory lock per host (in name order, so two
  nodes never deadlock), counts the RUNNING transfers touching it and refuses past the
  limit. The lock makes the count and the claim one step across nodes.
- `nodes`: one row per node, with its heartbeat.
- `attempts.node`: which node ran each attempt.

Every change is announced with ``NOTIFY stork_jobs`` in its transaction; each store listens
and tells its listeners of other nodes' changes (long polls wake on any node; a node
dispatches jobs submitted or requeued elsewhere at once).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from stork.dataset.expand import DatasetFile
from stork.errors import (
    HostLimitReached,
    InvalidRequest,
    JobNotFound,
    StoreUnavailable,
)
from stork.job import DapType, DatasetFileRow, Event, FileState, Job, JobSpec, JobState
from stork.store import rows, tables
from stork.store.base import (
    Attempt,
    FileResult,
    HistoryEntry,
    HostLimit,
    JobStore,
    NodeInfo,
    Outage,
    Transition,
)
from stork.store.postgres_db import PostgresDatabase
from stork.store.postgres_schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from stork.translog import TransferRecord

log = logging.getLogger(__name__)

CHANNEL = "stork_jobs"
NOW = "extract(epoch from clock_timestamp())"  # the database's clock, in unix seconds
DEFAULT_LEASE_S = 30.0
_NOTIFY_BYTES = 7000  # a NOTIFY payload must stay below 8000 bytes

_SCHEMA_LOCK = 0x5374_6F72  # advisory lock key: one node creates or migrates the schema
_RUNNING = JobState.RUNNING.value
_IDLE = JobState.IDLE.value
_TERMINAL = tuple(s.value for s in JobState if s.terminal)

Conn = psycopg.Connection[tuple[Any, ...]]


def _key(text: str) -> int:
    """A 64-bit advisory lock key for a name (stable across processes and machines)."""
    return zlib.crc32(text.encode()) | (zlib.adler32(text.encode()) << 32) & 0x7FFF_FFFF_FFFF_FFFF


def _select_jobs(db: Conn, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
    found = db.execute(f"SELECT {rows.JOB_COLUMNS} FROM jobs {where}", params).fetchall()  # noqa: S608 - constant SQL; values are bound
    return [rows.job_from_row(row) for row in found]


def _get(db: Conn, job_id: int) -> Job:
    return rows.only_job(_select_jobs(db, "WHERE id = %s", (job_id,)), job_id)


def _event(db: Conn, job_id: int, now: float, kind: str,
           detail: dict[str, Any] | None = None) -> None:
    db.execute("INSERT INTO events (job_id, time, kind, detail) VALUES (%s, %s, %s, %s)",
               (job_id, now, kind, json.dumps(detail or {}, sort_keys=True)))


def _merge_result(db: Conn, job_id: int, values: dict[str, Any]) -> None:
    row = db.execute("SELECT result FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    db.execute("UPDATE jobs SET result = %s WHERE id = %s",
               (rows.merged_result(row[0], values), job_id))


def _insert_files(db: Conn, job_id: int, files: Sequence[DatasetFile]) -> None:
    with db.cursor().copy("COPY files (job_id, idx, src_url, dest_url, rel_path, size_bytes) "
                          "FROM STDIN") as copy:
        for i, f in enumerate(files):
            copy.write_row((job_id, i, f.src_url, f.dest_url, f.rel_path, f.size_bytes))
    db.execute("UPDATE jobs SET files_total = %s, bytes_total = %s WHERE id = %s",
               (len(files), rows.bytes_total(files), job_id))


class PostgresStore(JobStore):
    shared = True

    def __init__(self, url: str, node: str = "", lease_s: float = DEFAULT_LEASE_S) -> None:
        super().__init__(node)
        self.url = url
        self.lease_s = lease_s
        self._token = f"{self.node}/{os.getpid()}/{uuid.uuid4().hex[:8]}"  # whose NOTIFY
        self._database = PostgresDatabase(url)
        self.name = self._database.name
        try:
            self._init_schema()
        except psycopg.Error as exc:
            self._database.close()
            raise self._database.error("cannot prepare the schema", exc) from None
        except BaseException:
            self._database.close()
            raise
        self._stop = threading.Event()
        self._listener = threading.Thread(target=self._listen, name="pg-listen", daemon=True)
        self._listening = threading.Event()
        self._listener.start()
        self._listening.wait(10)

    def _init_schema(self) -> None:
        with self._database.tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            exists = db.execute("SELECT to_regclass('schema_version')").fetchone()
            tables.prepare(db, exists=exists is not None and exists[0] is not None,
                           schema=SCHEMA, version=SCHEMA_VERSION, migrations=MIGRATIONS,
                           mark="%s", name=self.name)

    @property
    def outage(self) -> Outage | None:
        return self._database.health.outage

    # -- announcing changes to the other nodes -------------------------------------------------

    def _announce(self, db: Conn, job_ids: Sequence[int]) -> None:
        """NOTIFY the other nodes (delivered at commit, not at all on rollback)."""
        ids = [str(i) for i in job_ids]
        while ids:
            payload, size = [], len(self._token) + 1
            while ids and size + len(ids[0]) + 1 < _NOTIFY_BYTES:
                size += len(ids[0]) + 1
                payload.append(ids.pop(0))
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self._token} {','.join(payload)}"))

    def _listen(self) -> None:
        """Other nodes' changes -> this store's listeners. Reconnects after a failure."""
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            token, _, text = note.payload.partition(" ")
                            if token != self._token and text:
                                self._notify([int(i) for i in text.split(",")], elsewhere=True)
                        conn.execute("SELECT 1")  # notice a dead connection
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.debug("%s: LISTEN connection lost (%s); reconnecting", self.name, exc)
                    self._stop.wait(1.0)

    # -- reads --------------------------------------------------------------------------------

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._database.reader() as db:
            return db.execute(sql, params).fetchall()

    def _read_jobs(self, where: str = "", params: Sequence[Any] = ()) -> list[Job]:
        with self._database.reader() as db:
            return _select_jobs(db, where, params)

    # -- JobStore -------------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec], owner_uid: int, owner: str, now: float,
               files: Mapping[int, Sequence[DatasetFile]] | None = None) -> list[int]:
        """One transaction; never retried (StoreUnavailable when it cannot be written)."""
        if not specs:
            return []
        files = files or {}

        def body(db: Conn) -> list[int]:
            ids = [int(r[0]) for r in db.execute(
                "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) "
                "FROM generate_series(1, %s) ORDER BY 1", (len(specs),)).fetchall()]
            with db.cursor().copy(
                    "COPY jobs (id, owner_uid, owner, state, spec, dap_type, src_url, dest_url, "
                    "submitted_at, updated_at) FROM STDIN") as copy:
                for job_id, spec in zip(ids, specs, strict=True):
                    copy.write_row((job_id, owner_uid, owner, _IDLE, spec.to_json(),
                                    spec.dap_type.value, spec.src_url, spec.dest_url, now, now))
            detail = json.dumps({"owner": owner}, sort_keys=True)
            with db.cursor().copy("COPY events (job_id, time, kind, detail) FROM STDIN") as copy:
                for job_id in ids:
                    copy.write_row((job_id, now, "submit", detail))
            for position, listed in files.items():
                _insert_files(db, ids[position], listed)
            self._announce(db, ids)
            return ids

        try:
            ids = self._database.write_once("submit", body, "refuse")
        except StoreUnavailable as exc:
            raise StoreUnavailable(f"cannot queue jobs: the job store {self.name} cannot be "
                                   f"written ({exc})") from None
        self._notify(ids)
        return ids

    def get(self, job_id: int) -> Job:
        return rows.only_job(self._read_jobs("WHERE id = %s", (job_id,)), job_id)

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        if states is None:
            return self._read_jobs("ORDER BY id")
        return self._read_jobs("WHERE state = ANY(%s) ORDER BY id", ([s.value for s in states],))

    def runnable(self, now: float, limit: int) -> list[Job]:
        return self._read_jobs("WHERE state = %s AND next_attempt_at <= %s AND dap_type = %s "
                               "ORDER BY next_attempt_at, id LIMIT %s",
                               (_IDLE, now, DapType.TRANSFER.value, limit))

    def waiting_transfers(self) -> list[tuple[int, float]]:
        found = self._read("SELECT id, next_attempt_at FROM jobs WHERE state = %s AND "
                           "dap_type = %s", (_IDLE, DapType.TRANSFER.value))
        return [(int(r[0]), float(r[1])) for r in found]

    def _check_limit(self, db: Conn, job_id: int, limit: HostLimit) -> None:
        """Raise HostLimitReached when a host of the job is at the cluster-wide limit. The
        advisory locks (held to the end of the transaction) serialise the claims of one
        host across nodes, so two nodes cannot both take its last place."""
        hosts = sorted({h for h in (limit.src_host, limit.dest_host) if h})
        for host in hosts:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_key(f"host {host}"),))
        for host in hosts:
            row = db.execute("SELECT count(*) FROM jobs WHERE state = %s AND "
                             "(src_host = %s OR dest_host = %s)", (_RUNNING, host, host)).fetchone()
            running = int(row[0]) if row else 0
            if running >= limit.max_running:
                raise HostLimitReached(job_id, host, running)

    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str, limit: HostLimit | None = None) -> Job | None:
        def body(db: Conn) -> Job | None:
            if db.execute("SELECT 1 FROM jobs WHERE id = %s AND state = %s FOR UPDATE SKIP LOCKED",
                          (job_id, _IDLE)).fetchone() is None:
                return None  # not IDLE, or another node is claiming it right now
            if limit is not None:
                self._check_limit(db, job_id, limit)
            hosts = (limit.src_host, limit.dest_host) if limit is not None else ("", "")
            db.execute(
                "UPDATE jobs SET state = %s, attempts = attempts + 1, started_at = %s, "  # noqa: S608 - constant SQL; values are bound
                "updated_at = %s, bytes_done = CASE WHEN files_total > 0 THEN bytes_done ELSE 0 "
                f"END, rate_mbps = 0, pid = NULL, claimed_by = %s, claimed_until = {NOW} + %s, "
                "src_host = %s, dest_host = %s WHERE id = %s",
                (_RUNNING, now, now, self.node, self.lease_s, *hosts, job_id))
            job = _get(db, job_id)
            db.execute("INSERT INTO attempts (job_id, number, started_at, src_url, dest_url, "
                       "module, node) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                       (job_id, job.attempts, now, src_url, dest_url, module, self.node))
            _event(db, job_id, now, "execute", {"attempt": job.attempts, "module": module,
                                                "src_url": src_url, "dest_url": dest_url})
            self._announce(db, [job_id])
            return job

        job = self._database.write(f"start of job {job_id}", body)
        if job is not None:
            self._notify([job_id])
        return job

    # the fence of every write of a running attempt: still this node's, and its lease valid
    _HELD = f"state = '{_RUNNING}' AND claimed_by = %s AND claimed_until > {NOW}"

    def _runs(self, db: Conn, job_id: int, attempt: int) -> bool:
        """Whether this node runs attempt `attempt` of the job and holds its lease (the row
        stays locked to the end of the transaction)."""
        return db.execute(f"SELECT 1 FROM jobs WHERE id = %s AND attempts = %s AND {self._HELD} "  # noqa: S608 - constant SQL; values are bound
                          "FOR UPDATE", (job_id, attempt, self.node)).fetchone() is not None

    def set_pid(self, job_id: int, attempt: int, pid: int | None) -> None:
        def body(db: Conn) -> None:
            db.execute(f"UPDATE jobs SET pid = %s WHERE id = %s AND attempts = %s AND {self._HELD}",  # noqa: S608 - constant SQL; values are bound
                       (pid, job_id, attempt, self.node))

        self._database.write(f"pid of job {job_id} attempt {attempt}", body)

    def record_progress(self, job_id: int, attempt: int, bytes_done: int, rate_mbps: float) -> None:
        def body(db: Conn) -> None:
            db.execute(f"UPDATE jobs SET bytes_done = %s, rate_mbps = %s WHERE id = %s AND "  # noqa: S608 - constant SQL; values are bound
                       f"attempts = %s AND {self._HELD}",
                       (bytes_done, rate_mbps, job_id, attempt, self.node))

        if self.outage is not None:  # dropped at once: never hold up the tool's output
            return
        with contextlib.suppress(StoreUnavailable):
            self._database.write_once(f"progress of job {job_id}", body, "drop")

    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        t = transition

        def body(db: Conn) -> Job | None:
            finished = now if t.state.terminal else None
            cursor = db.execute(
                "UPDATE jobs SET state = %s, updated_at = %s, failures = failures + %s, "  # noqa: S608 - constant SQL; values are bound
                "next_attempt_at = %s, finished_at = %s, last_error = COALESCE(%s, last_error), "
                "failure_kind = COALESCE(%s, failure_kind), "
                "bytes_done = COALESCE(%s, bytes_done), rate_mbps = 0, pid = NULL, "
                f"claimed_until = NULL WHERE id = %s AND attempts = %s AND {self._HELD}",
                (t.state.value, now, int(t.count_failure), t.next_attempt_at, finished, t.error,
                 t.failure_kind, t.bytes_done, job_id, attempt, self.node))
            if cursor.rowcount != 1:
                return None  # removed, requeued, finished, or the lease is lost: refused
            db.execute(
                "UPDATE attempts SET ended_at = %s, exit_code = %s, outcome = %s, error = %s, "
                "bytes_done = COALESCE(%s, bytes_done) WHERE job_id = %s AND number = %s "
                "AND ended_at IS NULL",
                (now, t.exit_code, t.outcome, t.error, t.bytes_done, job_id, attempt))
            if t.result:
                _merge_result(db, job_id, t.result)
            _event(db, job_id, now, t.event, rows.end_detail(attempt, t))
            self._announce(db, [job_id])
            return _get(db, job_id)

        job = self._database.write(f"end of job {job_id} attempt {attempt}", body)
        if job is not None:
            self._notify([job_id])
        return job

    def _requeue(self, where: str, params: Sequence[Any], now: float, reason: str,
                 what: str) -> list[Job]:
        def body(db: Conn) -> list[Job]:
            jobs = _select_jobs(db, f"WHERE {where} ORDER BY id FOR UPDATE SKIP LOCKED", params)
            for job in jobs:
                db.execute("UPDATE attempts SET ended_at = %s, outcome = 'interrupted', "
                           "error = %s WHERE job_id = %s AND number = %s AND ended_at IS NULL",
                           (now, reason, job.id, job.attempts))
                db.execute("UPDATE files SET state = %s, in_doubt = 1 WHERE job_id = %s AND "
                           "state = %s", (FileState.PENDING.value, job.id,
                                          FileState.RUNNING.value))
                db.execute("UPDATE jobs SET state = %s, failures = failures + 1, "
                           "updated_at = %s, next_attempt_at = 0, last_error = %s, "
                           "failure_kind = 'interrupted', rate_mbps = 0, pid = NULL, "
                           "claimed_until = NULL WHERE id = %s", (_IDLE, now, reason, job.id))
                _event(db, job.id, now, "requeue",
                       {"attempt": job.attempts, "reason": reason, "pid": job.pid})
            self._announce(db, [job.id for job in jobs])
            return jobs

        jobs = self._database.write(what, body)
        self._notify([job.id for job in jobs])
        return jobs

    def requeue_running(self, now: float, reason: str) -> list[Job]:
        """This node's own RUNNING jobs (it restarted: their attempts died with it)."""
        return self._requeue("state = %s AND claimed_by = %s", (_RUNNING, self.node), now,
                             reason, "requeue of running jobs")

    def requeue_expired(self, now: float, reason: str) -> list[Job]:
        return self._requeue(f"state = %s AND claimed_until < {NOW}", (_RUNNING,), now, reason,
                             "requeue of jobs whose lease expired")

    def remove(self, job_id: int, now: float, by: str) -> tuple[Job, Job]:
        def body(db: Conn) -> tuple[Job, Job]:
            before = _select_jobs(db, "WHERE id = %s FOR UPDATE", (job_id,))
            if not before:
                raise JobNotFound(job_id)
            if before[0].state.terminal:
                raise InvalidRequest(f"job {job_id} is already {before[0].state.value}")
            db.execute("UPDATE jobs SET state = %s, updated_at = %s, finished_at = %s, "
                       "rate_mbps = 0, claimed_until = NULL WHERE id = %s",
                       (JobState.REMOVED.value, now, now, job_id))
            db.execute("UPDATE files SET state = %s WHERE job_id = %s AND state = %s",
                       (FileState.PENDING.value, job_id, FileState.RUNNING.value))
            if before[0].state is JobState.RUNNING:
                db.execute("UPDATE attempts SET ended_at = %s, outcome = 'removed' "
                           "WHERE job_id = %s AND number = %s AND ended_at IS NULL",
                           (now, job_id, before[0].attempts))
            _event(db, job_id, now, "removed", {"by": by})
            self._announce(db, [job_id])
            return before[0], _get(db, job_id)

        changed = self._database.write(f"removal of job {job_id}", body)
        self._notify([job_id])
        return changed

    # -- the files of datasets ----------------------------------------------------------------

    def add_files(self, job_id: int, files: Sequence[DatasetFile]) -> bool:
        def body(db: Conn) -> bool:
            row = db.execute("SELECT state, files_total FROM jobs WHERE id = %s FOR UPDATE",
                             (job_id,)).fetchone()
            if row is None or row[1] or row[0] in _TERMINAL:
                return False
            _insert_files(db, job_id, files)
            return True

        return self._database.write(f"files of job {job_id}", body)

    def files(self, job_id: int, states: Sequence[FileState] | None = None,
              offset: int = 0, limit: int | None = None) -> list[DatasetFileRow]:
        where, params = "job_id = %s", [job_id]  # type: tuple[str, list[Any]]
        if states is not None:
            where += " AND state = ANY(%s)"
            params.append([s.value for s in states])
        found = self._read(f"SELECT {rows.FILE_COLUMNS} FROM files WHERE {where} ORDER BY idx "  # noqa: S608 - constant SQL; values are bound
                           "LIMIT %s OFFSET %s", (*params, limit, offset))
        return [rows.file_from_row(row) for row in found]

    def start_files(self, job_id: int, attempt: int, indexes: Sequence[int],
                    chunk: str) -> None:
        def body(db: Conn) -> None:
            if not self._runs(db, job_id, attempt):
                return
            db.execute("UPDATE files SET state = %s, attempts = attempts + 1, chunk = %s "
                       "WHERE job_id = %s AND idx = ANY(%s) AND state = %s",
                       (FileState.RUNNING.value, chunk, job_id, list(indexes),
                        FileState.PENDING.value))

        self._database.write(f"start of files of job {job_id}", body)

    def finish_files(self, job_id: int, attempt: int, results: Sequence[FileResult],
                     rate_mbps: float | None = None) -> bool:
        def body(db: Conn) -> bool:
            if not self._runs(db, job_id, attempt):
                return False
            old = {int(r[0]): (r[1], int(r[2])) for r in db.execute(
                "SELECT idx, state, bytes_done FROM files WHERE job_id = %s AND idx = ANY(%s)",
                (job_id, [r.index for r in results])).fetchall()}
            done = failed = moved = 0
            found = []
            for r in results:
                if r.index not in old:
                    continue
                was = rows.FILE_STATES[old[r.index][0]]
                d_done, d_failed, d_moved = rows.counter_changes(was, old[r.index][1], r)
                done, failed, moved = done + d_done, failed + d_failed, moved + d_moved
                found.append(rows.file_result_values(job_id, r))
            db.cursor().executemany(
                "UPDATE files SET state = %s, bytes_done = %s, failures = failures + %s, "
                "next_attempt_at = %s, last_error = %s, failure_kind = %s, "
                "checksum = COALESCE(%s, checksum), in_doubt = 0 WHERE job_id = %s AND idx = %s",
                found)
            db.execute("UPDATE jobs SET files_done = files_done + %s, files_failed = "
                       "files_failed + %s, bytes_done = bytes_done + %s, "
                       "rate_mbps = COALESCE(%s, rate_mbps) WHERE id = %s",
                       (done, failed, moved, rate_mbps, job_id))
            self._announce(db, [job_id])
            return True

        changed = self._database.write(f"end of files of job {job_id}", body)
        if changed:
            self._notify([job_id])
        return changed

    # -- events, attempts, housekeeping ---------------------------------------------------------

    def events(self, job_id: int) -> list[Event]:
        found = self._read(f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE job_id = %s "  # noqa: S608 - constant SQL; values are bound
                           "ORDER BY seq", (job_id,))
        return [rows.event_from_row(r) for r in found]

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._database.reader() as db:
            cursor = db.cursor(row_factory=dict_row)
            found = cursor.execute("SELECT * FROM attempts WHERE job_id = %s ORDER BY number",
                                   (job_id,)).fetchall()
        return [Attempt(**row) for row in found]

    def purge_finished(self, before: float) -> int:
        def body(db: Conn) -> int:
            ids = [int(r[0]) for r in db.execute(
                "DELETE FROM jobs WHERE state = ANY(%s) AND finished_at < %s RETURNING id",
                (list(_TERMINAL), before)).fetchall()]
            for table in ("events", "attempts", "files"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s)", (ids,))  # noqa: S608 - constant table names
            return len(ids)

        return self._database.write_once("purge of finished jobs", body, "fail")

    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        self._database.write(f"result of job {job_id}",
                             lambda db: _merge_result(db, job_id, values))

    def add_history(self, entry: HistoryEntry) -> None:
        def body(db: Conn) -> None:
            db.execute(rows.history_insert("%s"), rows.history_values(entry))

        self._database.write(f"history of {entry.src_host} -> {entry.dest_host}", body)

    def history(self, src_host: str, dest_host: str, *, symmetric: bool,
                arguments: str | None = None, kind: str | None = None,
                since: float = 0.0, limit: int = 100) -> list[HistoryEntry]:
        found = self._read(*rows.history_query(src_host, dest_host, symmetric=symmetric,
                                               arguments=arguments, kind=kind, since=since,
                                               limit=limit, mark="%s"))
        return [rows.history_from_row(r) for r in found]

    def add_transfers(self, records: Sequence[TransferRecord]) -> int:
        if not records:
            return 0

        def body(db: Conn) -> int:
            # writers one at a time, so that row ids are committed in their order and
            # `transfers_after` never passes a row another node has not committed yet
            db.execute("LOCK TABLE transfers IN EXCLUSIVE MODE")
            with db.cursor().copy(f"COPY transfers ({rows.TRANSFER_COLUMNS}) FROM STDIN") as copy:
                for r in records:
                    copy.write_row([int(v) if isinstance(v, bool) else v
                                    for v in (getattr(r, f) for f in rows.TRANSFER_FIELDS)])
            return len(records)

        return self._database.write(f"{len(records)} transfer log rows", body)

    def transfers(self, src_host: str | None = None, dest_host: str | None = None, *,
                  since: float = 0.0, limit: int | None = None) -> list[TransferRecord]:
        found = self._read(*rows.transfers_query(src_host, dest_host, since, limit, mark="%s"))
        return [rows.transfer_from_row(row) for row in found]

    def transfers_after(self, row_id: int = 0, limit: int | None = None
                        ) -> list[tuple[int, TransferRecord]]:
        found = self._read(f"SELECT id, {rows.TRANSFER_COLUMNS} FROM transfers WHERE id > %s "  # noqa: S608 - constant SQL; values are bound
                           "ORDER BY id LIMIT %s", (row_id, limit))
        return [rows.numbered_transfer(row) for row in found]

    # -- nodes and leases -------------------------------------------------------------------

    def heartbeat(self) -> None:
        def body(db: Conn) -> None:
            db.execute(f"INSERT INTO nodes (name, pid, started_at, last_seen) VALUES (%s, %s, "  # noqa: S608 - constant SQL; values are bound
                       f"{NOW}, {NOW}) ON CONFLICT (name) DO UPDATE SET last_seen = {NOW}, "
                       "pid = EXCLUDED.pid", (self.node, os.getpid()))

        self._database.write_once(f"heartbeat of node {self.node}", body, "fail")

    def renew_leases(self, job_ids: Sequence[int]) -> set[int]:
        """One statement: the leases still valid are extended, the others stay lost.
        Raises StoreUnavailable when the database cannot be reached (nothing renewed)."""
        if not job_ids:
            return set()

        def body(db: Conn) -> set[int]:
            found = db.execute(f"UPDATE jobs SET claimed_until = {NOW} + %s WHERE "  # noqa: S608 - constant SQL; values are bound
                               f"id = ANY(%s) AND {self._HELD} RETURNING id",
                               (self.lease_s, list(job_ids), self.node)).fetchall()
            return {int(r[0]) for r in found}

        return self._database.write_once(f"lease renewal of node {self.node}", body, "fail")

    def nodes(self) -> list[NodeInfo]:
        found = self._read(f"SELECT n.name, n.pid, n.started_at, {NOW} - n.last_seen, "  # noqa: S608 - constant SQL; values are bound
                           "(SELECT count(*) FROM jobs j WHERE j.state = %s AND "
                           "j.claimed_by = n.name) FROM nodes n ORDER BY n.name", (_RUNNING,))
        return [NodeInfo(r[0], int(r[1]), float(r[2]), max(0.0, float(r[3])), int(r[4]))
                for r in found]

    def host_load(self) -> dict[str, int]:
        found = self._read("SELECT host, count(*) FROM (SELECT src_host AS host FROM jobs WHERE "
                           "state = %s AND claimed_by <> %s UNION ALL SELECT dest_host FROM jobs "
                           "WHERE state = %s AND claimed_by <> %s) AS h GROUP BY host",
                           (_RUNNING, self.node, _RUNNING, self.node))
        return {str(r[0]): int(r[1]) for r in found if r[0]}

    @contextlib.contextmanager
    def _pair_lock(self, host_a: str, host_b: str) -> Iterator[object]:
        key = _key("pair " + " ".join(sorted((host_a, host_b))))
        with self._database.connection() as db:
            db.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield db
            finally:
                with contextlib.suppress(psycopg.Error):
                    db.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def pair_lock(self, host_a: str, host_b: str) -> AbstractContextManager[object]:
        """A session-level advisory lock on a connection held while sampling: released by
        the server when that connection ends, so a dead node frees its pairs at once."""
        return self._pair_lock(host_a, host_b)

    def close(self) -> None:
        self._stop.set()
        self._listener.join(5)
        self._database.close()

