"""Connections to one SQLite file in WAL mode, and what to do when it cannot be written.

One write connection serves the process, guarded by a lock (SQLite serialises writers
anyway); write transactions use ``BEGIN IMMEDIATE`` and ``synchronous = FULL``. Reads use
read-only connections from a small pool (one per reading thread at a time, kept between
reads): in WAL mode a reader sees the last commit and never waits for a writer, nor for the
write lock. A pool rather than one connection per thread, because the API serves each
request connection on a thread of its own.

A failed write transaction is always rolled back (SQLite may have done it already after a
full disk or an I/O error), so the connection is usable afterwards; `write` (from
`stork.store.outage.Writes`) retries a write that failed for a transient cause until it
lands, `write_once` raises `StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from stork.errors import StoreError, StoreUnavailable
from stork.store.outage import OutageTracker, Writes

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 30.0  # how long one try of a write waits for another process's write lock
MAX_IDLE_READERS = 8  # read connections kept open between reads

# primary SQLite result codes that say "cannot be written now", not "this write is wrong"
_TRANSIENT = {
    sqlite3.SQLITE_FULL: "disk full",
    sqlite3.SQLITE_IOERR: "I/O error",
    sqlite3.SQLITE_BUSY: "database locked by another process",
    sqlite3.SQLITE_LOCKED: "database table locked",
    sqlite3.SQLITE_CANTOPEN: "cannot open a file in the state directory",
    sqlite3.SQLITE_READONLY: "database or file system read-only",
}


def transient_cause(exc: BaseException) -> str | None:
    """What keeps the database from being written, when `exc` says so; None for an error
    that retrying cannot cure (constraint, schema, misuse)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or code is None:
        return None
    return _TRANSIENT.get(code & 0xFF)


class SqliteDatabase(Writes[sqlite3.Connection]):
    errors = (sqlite3.Error,)

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = path  # as messages name the database
        self.directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(self.directory, mode=0o755, exist_ok=True)
        self.health = OutageTracker(f"state directory {self.directory}")
        self.lock = threading.RLock()  # the write connection
        self._closed = threading.Event()
        self._writer_db: sqlite3.Connection | None = None  # opened by _writer
        self._readers_lock = threading.Lock()
        self._readers: list[sqlite3.Connection] = []  # idle read connections
        try:
            db = self._writer()
            os.chmod(path, 0o600)  # the queue holds every user's jobs: readable by the daemon only
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise self.error("cannot open database", exc) from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                             check_same_thread=False)
        db.row_factory = sqlite3.Row
        return db

    def _writer(self) -> sqlite3.Connection:
        """The write connection (call with the lock held, or from __init__)."""
        if self._writer_db is None:
            db = self._connect()
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            self._writer_db = db
        return self._writer_db

    def error(self, doing: str, exc: BaseException) -> StoreError:
        cause = transient_cause(exc)
        if cause is not None:
            return StoreUnavailable(f"{self.path}: {doing}: {cause} ({exc}); state directory "
                                    f"{self.directory}")
        return StoreError(f"{self.path}: {doing}: {exc}")

    # -- writing ------------------------------------------------------------------------------

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any error, the commit's own included."""
        with self.lock:
            if self._closed.is_set():
                raise StoreUnavailable(f"{self.path}: the job store is closed")
            db = self._writer()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                self._rollback(db)
                raise

    def transient_cause(self, exc: BaseException) -> str | None:
        return transient_cause(exc)

    def _rollback(self, db: sqlite3.Connection) -> None:
        """End a failed transaction so the next one can begin. SQLite may have rolled it
        back already (disk full, I/O error); when the rollback fails too, the connection is
        closed and the next write opens a new one."""
        if not db.in_transaction:
            return
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("%s: rollback failed (%s); reopening the write connection", self.path, exc)
            self._writer_db = None
            with contextlib.suppress(sqlite3.Error):
                db.close()

    # -- reading ------------------------------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection for this thread alone while the block runs; sqlite3 errors
        raised inside come out as StoreError."""
        with self._readers_lock:
            db = self._readers.pop() if self._readers else None
        if db is None:
            if self._closed.is_set():
                raise StoreError(f"{self.path}: the job store is closed")
            try:
                db = self._connect()
                db.execute("PRAGMA query_only = ON")
            except sqlite3.Error as exc:
                raise self.error("cannot open a read connection", exc) from None
        try:
            yield db
        except sqlite3.Error as exc:
            db.close()  # whatever went wrong stays with this connection
            raise self.error("read failed", exc) from None
        except BaseException:
            db.close()
            raise
        with self._readers_lock:
            if not self._closed.is_set() and len(self._readers) < MAX_IDLE_READERS:
                self._readers.append(db)
                return
        db.close()

    def close(self) -> None:
        self._closed.set()  # writes being retried give up; reads open no new connection
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for db in readers:
            db.close()
        with self.lock:
            if self._writer_db is not None:
                self._writer_db.close()
                self._writer_db = None


class GcPause:
    """Pauses the cyclic garbage collector while a listing builds many objects: building
    100,000 jobs otherwise starts dozens of collections, each scanning every object built so
    far, for nothing (no job forms a cycle). Nested and concurrent pauses count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._resume:
                    gc.enable()
