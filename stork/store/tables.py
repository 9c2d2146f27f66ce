"""The tables both job stores hold, written once for either SQL dialect, and the creation or
migration of a store's schema.

A `Dialect` names the few column types that differ (SQLite's ``REAL`` is PostgreSQL's
``DOUBLE PRECISION``, its ``INTEGER`` holds what PostgreSQL keeps in ``BIGINT``); each
backend adds its own columns, indexes and tables (`stork.store.sqlite`,
`stork.store.postgres_schema`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from stork.errors import SchemaError


@dataclass(frozen=True)
class Dialect:
    serial: str  # an id column numbered by the database
    real: str  # a float
    bigint: str  # an integer that may pass 2**31 (ids, bytes)


SQLITE = Dialect(serial="INTEGER PRIMARY KEY AUTOINCREMENT", real="REAL", bigint="INTEGER")
POSTGRES = Dialect(serial="BIGSERIAL PRIMARY KEY", real="DOUBLE PRECISION", bigint="BIGINT")

SCHEMA_VERSION_TABLE = "CREATE TABLE schema_version (version INTEGER NOT NULL)"


def _table(name: str, d: Dialect, columns: Sequence[str], extra: Sequence[str] = (),
           suffix: str = "") -> str:
    """CREATE TABLE `name` with `columns` ({serial}, {real}, {bigint} replaced by `d`'s
    types), then the backend's own `extra` columns and `suffix`."""
    lines = [c.format(**asdict(d)) for c in columns] + list(extra)
    return f"CREATE TABLE {name} (\n        " + ",\n        ".join(lines) + "\n    )" + suffix


def jobs_table(d: Dialect, extra: Sequence[str] = ()) -> str:
    return _table("jobs", d, (
        "id {serial}",
        "owner_uid INTEGER NOT NULL",
        "owner TEXT NOT NULL",
        "state TEXT NOT NULL",
        "spec TEXT NOT NULL",
        "dap_type TEXT NOT NULL",
        "src_url TEXT NOT NULL",
        "dest_url TEXT NOT NULL",
        "submitted_at {real} NOT NULL",
        "updated_at {real} NOT NULL",
        "attempts INTEGER NOT NULL DEFAULT 0",
        "failures INTEGER NOT NULL DEFAULT 0",
        "next_attempt_at {real} NOT NULL DEFAULT 0",
        "started_at {real}",
        "finished_at {real}",
        "last_error TEXT",
        "failure_kind TEXT",
        "bytes_done {bigint} NOT NULL DEFAULT 0",
        "rate_mbps {real} NOT NULL DEFAULT 0",
        "pid INTEGER",
        "result TEXT NOT NULL DEFAULT '{{}}'",
        "files_total INTEGER NOT NULL DEFAULT 0",
        "files_done INTEGER NOT NULL DEFAULT 0",
        "files_failed INTEGER NOT NULL DEFAULT 0",
        "bytes_total {bigint}",
    ), extra)


JOBS_RUNNABLE_INDEX = "CREATE INDEX jobs_runnable ON jobs (state, next_attempt_at, id)"


def events_tables(d: Dialect) -> tuple[str, ...]:
    return (_table("events", d, (
        "seq {serial}",
        "job_id {bigint} NOT NULL",
        "time {real} NOT NULL",
        "kind TEXT NOT NULL",
        "detail TEXT NOT NULL DEFAULT '{{}}'",
    )), "CREATE INDEX events_job ON events (job_id, seq)")


def history_tables(d: Dialect) -> tuple[str, ...]:
    return (_table("history", d, (
        "id {serial}",
        "time {real} NOT NULL",
        "src_host TEXT NOT NULL",
        "dest_host TEXT NOT NULL",
        "arguments TEXT NOT NULL",
        "kind TEXT NOT NULL",
        "streams INTEGER NOT NULL",
        "throughput_mbps {real} NOT NULL",
        "bytes_moved {bigint} NOT NULL DEFAULT 0",
        "duration_s {real} NOT NULL DEFAULT 0",
        "model TEXT NOT NULL DEFAULT ''",
        "samples TEXT NOT NULL DEFAULT '[]'",
        "job_id {bigint}",
    )), "CREATE INDEX history_pair ON history (src_host, dest_host, kind, time)")


def attempts_table(d: Dialect, extra: Sequence[str] = ()) -> str:
    return _table("attempts", d, (
        "job_id {bigint} NOT NULL",
        "number INTEGER NOT NULL",
        "started_at {real} NOT NULL",
        "src_url TEXT NOT NULL",
        "dest_url TEXT NOT NULL",
        "module TEXT NOT NULL",
        "ended_at {real}",
        "exit_code INTEGER",
        "outcome TEXT",
        "error TEXT",
        "bytes_done {bigint} NOT NULL DEFAULT 0",
    ), [*extra, "PRIMARY KEY (job_id, number)"])


def files_tables(d: Dialect, suffix: str = "") -> tuple[str, ...]:
    """The files of datasets (`suffix`: the table's options, such as SQLite's WITHOUT ROWID)."""
    return (_table("files", d, (
        "job_id {bigint} NOT NULL",
        "idx INTEGER NOT NULL",
        "src_url TEXT NOT NULL",
        "dest_url TEXT NOT NULL",
        "rel_path TEXT NOT NULL",
        "size_bytes {bigint}",
        "state TEXT NOT NULL DEFAULT 'PENDING'",
        "bytes_done {bigint} NOT NULL DEFAULT 0",
        "attempts INTEGER NOT NULL DEFAULT 0",
        "failures INTEGER NOT NULL DEFAULT 0",
        "next_attempt_at {real} NOT NULL DEFAULT 0",
        "last_error TEXT",
        "failure_kind TEXT",
        "checksum TEXT",
        "chunk TEXT",
        "in_doubt INTEGER NOT NULL DEFAULT 0",
        "PRIMARY KEY (job_id, idx)",
    ), suffix=suffix), "CREATE INDEX files_state ON files (job_id, state, idx)")


def transfers_tables(d: Dialect) -> tuple[str, ...]:
    """The transfer log: one row per finished chunk or file (stork.translog.TransferRecord);
    rows are added, never rewritten."""
    return (_table("transfers", d, (
        "id {serial}",
        "time {real} NOT NULL",
        "src_host TEXT NOT NULL",
        "dest_host TEXT NOT NULL",
        "rtt_s {real}",
        "bandwidth_bps {real}",
        "buffer_bytes {bigint}",
        "file_size_bytes {real} NOT NULL",
        "file_count INTEGER NOT NULL",
        "cc INTEGER NOT NULL",
        "p INTEGER NOT NULL",
        "pp INTEGER NOT NULL",
        "fast INTEGER NOT NULL",
        "bytes_moved {bigint} NOT NULL",
        "duration_s {real} NOT NULL",
        "throughput_mbps {real} NOT NULL",
        "sharing INTEGER NOT NULL",
        "outcome TEXT NOT NULL",
        "origin TEXT NOT NULL",
    )), "CREATE INDEX transfers_pair ON transfers (src_host, dest_host, time)")


def transfers_spread(d: Dialect) -> str:
    """The transfer log's spread column (added after the table: migrated databases and new
    ones reach the same shape): the standard deviation of a flow stretch's 1-second rates,
    NULL for a row that is not a stretch of a flow."""
    return f"ALTER TABLE transfers ADD COLUMN spread_mbps {d.real}"


def transfers_job(d: Dialect) -> str:
    """The transfer log's job column (added after the table, like the spread): the job whose
    transfer the row is, so that one table holds every finished transfer, the EOS's history
    of transfers included."""
    return f"ALTER TABLE transfers ADD COLUMN job_id {d.bigint}"


# -- creating and migrating --------------------------------------------------------------------

class _Cursor(Protocol):
    def fetchone(self) -> Any: ...


class Connection(Protocol):
    """What `prepare` needs of a connection: sqlite3's and psycopg's both have it."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> _Cursor: ...


def prepare(db: Connection, *, exists: bool, schema: Sequence[str], version: int,
            migrations: Mapping[int, Sequence[str]], mark: str, name: str) -> None:
    """In the caller's transaction: create `schema` at `version` when the database has none
    yet (`exists` False: no schema_version table), else take it from its version to
    `version` by `migrations` (N: the statements from N to N + 1). Raises SchemaError
    naming the database `name` for a version it cannot reach `version` from. `mark` is the
    backend's placeholder."""
    if not exists:
        for statement in schema:
            db.execute(statement)
        db.execute(f"INSERT INTO schema_version (version) VALUES ({mark})", (version,))  # noqa: S608 - constant SQL; values are bound
        return
    row = db.execute("SELECT version FROM schema_version").fetchone()
    found = int(row[0]) if row else -1
    while found in migrations:
        for statement in migrations[found]:
            db.execute(statement)
        found += 1
        db.execute(f"UPDATE schema_version SET version = {mark}", (found,))  # noqa: S608 - constant SQL; values are bound
    if found != version:
        raise SchemaError(name, found, version)
