"""Connections to a PostgreSQL database shared by several stork_servers, and what to do when
it cannot be written.

A pool of connections (psycopg_pool) in autocommit mode: a read is one statement (its own
snapshot, never waiting for a writer under MVCC), a write is one explicit transaction.
Connections are checked when taken from the pool, so a server restart or a cut network
costs a failed try, not a dead pool. A write that failed for a transient cause (the server
unreachable, a serialization conflict or deadlock, a full disk) is retried until it lands
(`write`, from `stork.store.outage.Writes`), or raises `StoreUnavailable` (`write_once`); any
other database error is a `StoreError` naming the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from stork.errors import StoreError, StoreUnavailable
from stork.store.outage import OutageTracker, Writes

log = logging.getLogger(__name__)

Conn = psycopg.Connection[tuple[Any, ...]]

CONNECT_TIMEOUT_S = 5  # one connection attempt (libpq's connect_timeout)
POOL_WAIT_S = 5.0  # longest wait for a free connection of the pool
POOL_MIN = 2
POOL_MAX = 24  # threads of one node that may talk to the database at once


def safe_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    user = f"{parts.username}:***@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{user}{host}{port}", parts.path, parts.query,
                       parts.fragment))


def transient_cause(exc: BaseException) -> str | None:
    """What keeps the database from being written now, when `exc` says so; None for an error
    that retrying cannot cure (constraint, syntax, schema)."""
    if isinstance(exc, PoolTimeout):
        return "no database connection"
    if isinstance(exc, pg_errors.DiskFull):
        return "disk full"
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return "write conflict"
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return "database read-only"
    if isinstance(exc, psycopg.OperationalError):  # connection lost, server shutting down
        return "database unreachable"
    if isinstance(exc, psycopg.InterfaceError):  # a connection closed under us
        return "database connection lost"
    return None


class PostgresDatabase(Writes[Conn]):
    errors = (psycopg.Error, PoolTimeout)

    def __init__(self, url: str, pool_max: int = POOL_MAX) -> None:
        self.url = url
        self.name = safe_url(url)
        self.health = OutageTracker(f"database {self.name}")
        self._closed = threading.Event()
        self.pool = ConnectionPool(
            url, min_size=POOL_MIN, max_size=pool_max, open=False, timeout=POOL_WAIT_S,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S,
                    "application_name": "stork_server"},
            check=ConnectionPool.check_connection, name="stork")
        try:  # one connection first: libpq's own message when it fails (the pool's: timeout)
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
            self.pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except (psycopg.Error, PoolTimeout) as exc:
            self.pool.close()
            raise StoreError(f"STORK_DATABASE {self.name}: cannot connect: "
                             f"{str(exc).strip()}") from None

    def error(self, doing: str, exc: BaseException) -> StoreError:
        cause = transient_cause(exc)
        if cause is not None:
            return StoreUnavailable(f"{self.name}: {doing}: {cause} ({str(exc).strip()})")
        return StoreError(f"{self.name}: {doing}: {str(exc).strip()}")

    def transient_cause(self, exc: BaseException) -> str | None:
        return transient_cause(exc)

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        if self._closed.is_set():
            raise StoreUnavailable(f"{self.name}: the job store is closed")
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def tx(self) -> Iterator[Conn]:
        """One write transaction: committed at the end, rolled back on any error."""
        with self.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def reader(self) -> Iterator[Conn]:
        """A connection for reads (autocommit: each statement sees the last commit)."""
        try:
            with self.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            raise self.error("read failed", exc) from None

    def close(self) -> None:
        self._closed.set()
        self.pool.close()
