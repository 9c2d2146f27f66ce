"""Telling a store outage: when writes start failing and when they land again.

Any store keeps one `OutageTracker` and reports each write's fate to it. The tracker logs
the start of an outage once (per kind of consequence: writes retried, submissions refused,
progress dropped) and its end once, so a full disk gives a few log lines, not one traceback
per request, and it answers `JobStore.outage` without I/O. `Writes` is the loop both
databases write through: retried until the write lands, or tried once.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

from stork.errors import StoreError, StoreUnavailable
from stork.store.base import Outage

log = logging.getLogger(__name__)

C = TypeVar("C")  # a connection
T = TypeVar("T")

RETRY_FIRST_S = 0.05  # first pause before a failed write is tried again
RETRY_MAX_S = 2.0  # pauses double up to this

_WHAT = {
    "retry": "store write retried: %s; %s (%s); work waits until it lands",
    "refuse": "store write failed: %s; %s (%s); submissions are refused "
              "until the store can be written",
    "fail": "store write failed: %s; %s (%s); it will be tried again later",
    "drop": "store write dropped: %s; %s (%s); progress of running attempts "
            "is not recorded until the store can be written",
}


def retry_delays_s(first_s: float = RETRY_FIRST_S, max_s: float = RETRY_MAX_S) -> Iterator[float]:
    """Pauses between tries of a write: doubling from `first_s`, capped at `max_s`."""
    delay = first_s
    while True:
        yield delay
        delay = min(delay * 2, max_s)


class OutageTracker:
    """The store's write health, shared by every thread that writes."""

    def __init__(self, location: str, clock: Callable[[], float] = time.time) -> None:
        self.location = location  # as messages name it: "state directory /var/lib/stork"
        self._clock = clock
        self._lock = threading.Lock()
        self._cause: str | None = None
        self._since = 0.0
        self._retrying = 0
        self._retried_total = 0  # writes that had to be retried in this outage
        self._logged: set[tuple[str, str]] = set()  # (consequence, cause) said this outage

    @property
    def outage(self) -> Outage | None:
        cause = self._cause
        if cause is None:
            return None
        return Outage(cause, self.location, self._since, self._retrying)

    def failed(self, cause: str, what: str, consequence: str) -> None:
        """A write failed for a transient `cause`; `consequence` is "retry" (the write will be
        tried again), "refuse" (a submission was refused), "fail" (the caller will try
        again some other time) or "drop" (the write is lost)."""
        with self._lock:
            if self._cause is None:
                self._since = self._clock()
                self._logged.clear()
                self._retried_total = 0
            self._cause = cause
            first = (consequence, cause) not in self._logged
            self._logged.add((consequence, cause))
        if first:
            log.warning(_WHAT[consequence], cause, self.location, what)
        else:
            log.debug("store write failed again (%s): %s", what, cause)

    def retry_started(self) -> None:
        """A write will be retried until it lands (or the store closes)."""
        with self._lock:
            self._retrying += 1
            self._retried_total += 1

    def retry_ended(self) -> None:
        with self._lock:
            self._retrying -= 1

    def landed(self) -> None:
        """A write committed. The outage ends when no other write is still being retried."""
        if self._cause is None:  # the common case: no lock taken
            return
        with self._lock:
            if self._cause is None or self._retrying > 0:
                return
            cause, since, retried = self._cause, self._since, self._retried_total
            self._cause = None
        log.warning("store writable again after %.1f s of %s; %s; %d write(s) "
                    "were retried and landed", self._clock() - since, cause, self.location,
                    retried)


class Writes(ABC, Generic[C]):
    """`write` (retried until it lands) and `write_once` over a database's transactions,
    each write's fate reported to `health`: what the SQLite and the PostgreSQL databases
    (`sqlite_db`, `postgres_db`) share. A database sets `name` (how messages name it),
    `health`, `errors` (its driver's exceptions) and `_closed` (set by its `close`), and
    defines `tx`, `error` and `transient_cause`."""

    name: str
    health: OutageTracker
    errors: tuple[type[BaseException], ...]
    _closed: threading.Event

    @abstractmethod
    def tx(self) -> AbstractContextManager[C]:
        """One write transaction: committed at the end, rolled back on any error."""

    @abstractmethod
    def error(self, doing: str, exc: BaseException) -> StoreError:
        """The exception for a failed database call: StoreUnavailable when the database
        cannot be written now, StoreError otherwise."""

    @abstractmethod
    def transient_cause(self, exc: BaseException) -> str | None:
        """What keeps the database from being written now, when `exc` says so; None for an
        error that retrying cannot cure."""

    def write(self, what: str, body: Callable[[C], T]) -> T:
        """Run `body` in a write transaction until it commits. A transient failure is
        retried with capped backoff, outside any lock of `tx`, so that other writes (a
        submission to refuse) are not held up meanwhile; a permanent one raises StoreError,
        and `body`'s own exceptions pass through. `close` ends the retries with
        StoreUnavailable."""
        delays = retry_delays_s()
        retrying = False
        try:
            while True:
                try:
                    with self.tx() as db:
                        result = body(db)
                except self.errors as exc:
                    cause = self.transient_cause(exc)
                    if cause is None:
                        raise self.error(what, exc) from exc
                    self.health.failed(cause, what, "retry")
                    if not retrying:
                        retrying = True
                        self.health.retry_started()
                    if self._closed.wait(next(delays)):
                        raise StoreUnavailable(f"{self.name}: closed while retrying {what} "
                                               f"({cause})") from exc
                    continue
                if retrying:
                    retrying = False
                    self.health.retry_ended()
                self.health.landed()
                return result
        finally:
            if retrying:
                self.health.retry_ended()

    def write_once(self, what: str, body: Callable[[C], T], consequence: str) -> T:
        """Run `body` in one write transaction; StoreUnavailable when the database cannot be
        written now (reported to `health` with `consequence`, "refuse", "drop" or "fail")."""
        try:
            with self.tx() as db:
                result = body(db)
        except self.errors as exc:
            cause = self.transient_cause(exc)
            if cause is not None:
                self.health.failed(cause, what, consequence)
            raise self.error(what, exc) from exc
        self.health.landed()
        return result
