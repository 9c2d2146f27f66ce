"""Telling a store outage: when writes start failing and when they land again.

Any store keeps one `OutageTracker` and reports each write's fate to it. The tracker logs
the start of an outage once (per kind of consequence: writes retried, submissions refused,
progress dropped) and its end once, so a full disk gives a few log lines, not one traceback
per request, and it answers `JobStore.outage` without I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from stork.store.base import Outage

log = logging.getLogger(__name__)

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
