"""The job store interface. No SQL or SQLite detail leaks out of the implementations.

Every state change goes through `start_attempt`, `finish_attempt`, `requeue_running` or
`remove`, each of which writes the new state and its event in one transaction, and only
succeeds when the job is still in the state the caller saw (so a job never completes twice).

Reads (`get`, `list_jobs`, `runnable`, `waiting_transfers`, `events`, `attempts`, `history`)
never wait for a write transaction: they see the last committed state.

When the store cannot be written (disk full, I/O error, database locked) the contract is:

- `submit` does not wait: it raises `StoreUnavailable` naming the database and the cause,
  and nothing of the request is queued.
- The writes that record work already done (`start_attempt`, `set_pid`, `finish_attempt`,
  `requeue_running`, `remove`, `update_result`, `add_history`) are retried, with capped
  backoff, until they land; they block only the calling thread meanwhile and never raise for
  such a transient cause (a permanent error, such as a constraint violation or a schema
  problem, still raises `StoreError`). So the thread of an attempt whose end cannot be
  written waits in `finish_attempt`, and the caller frees the attempt's slot after it returns:
  the slot and the job's state agree again as soon as the write lands, with no restart.
- `record_progress` is dropped (and logged once per outage) when it cannot be written.
- `purge_finished` raises `StoreUnavailable`; housekeeping tries again next time.
- `outage` says what is wrong meanwhile; the log says it once when the outage starts and
  once when it ends. `close` makes writes still retrying raise `StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from stork.dataset.expand import DatasetFile
from stork.job import DatasetFileRow, Event, FileState, Job, JobSpec, JobState
from stork.translog import TransferRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    job_id: int
    number: int
    started_at: float
    src_url: str
    dest_url: str
    module: str
    ended_at: float | None = None
    exit_code: int | None = None
    outcome: str | None = None  # completed, failed, interrupted, timeout
    error: str | None = None
    bytes_done: int = 0
    node: str | None = None  # the node that ran it (shared stores; None in SQLite)


@dataclass(frozen=True)
class NodeInfo:
    """One stork_server sharing the store, as `stork_q -nodes` shows it."""

    name: str
    pid: int
    started_at: float  # unix seconds
    heartbeat_age_s: float  # since its last heartbeat, by the database's clock
    running: int  # attempts it holds the lease of now


@dataclass(frozen=True)
class HostLimit:
    """The cluster-wide host limit a shared store enforces when an attempt starts: no host
    carries more than `max_running` running transfers across all nodes."""

    src_host: str
    dest_host: str
    max_running: int


@dataclass(frozen=True)
class Transition:
    """How an attempt ended, decided by the dispatcher and applied by the store."""

    state: JobState  # IDLE (retry or requeue), COMPLETED or FAILED
    event: str
    outcome: str
    count_failure: bool = False
    next_attempt_at: float = 0.0
    exit_code: int | None = None
    error: str | None = None
    failure_kind: str | None = None
    bytes_done: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)  # merged into the job's result


@dataclass(frozen=True)
class FileResult:
    """How one file of a dataset ended in an attempt, applied by `finish_files`."""

    index: int
    state: FileState  # DONE, FAILED, or PENDING (to be retried at next_attempt_at)
    bytes_done: int = 0
    count_failure: bool = False  # the file's failures + 1 (its retry rules)
    next_attempt_at: float = 0.0
    error: str | None = None
    failure_kind: str | None = None
    checksum: str | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One EOS optimization for a host pair (its samples and decision). Finished transfers
    are the transfer log's (`TransferRecord`); rows of kind "transfer" here are only those
    an older Stork wrote."""

    time: float
    src_host: str
    dest_host: str
    arguments: str  # normalised transfer options other than -p (they define the triple)
    kind: str  # "optimization" or "transfer"
    streams: int
    throughput_mbps: float
    bytes_moved: int = 0
    duration_s: float = 0.0
    model: str = ""
    samples: list[list[float]] = field(default_factory=list)
    job_id: int | None = None


@dataclass(frozen=True)
class Outage:
    """Why the store cannot be written now, for the log, `stork_status` and the API."""

    cause: str  # "disk full", "I/O error", "database locked", ...
    location: str  # what cannot be written, as the log names it: "state directory /var/lib/stork"
    since: float  # unix seconds of the first failed write
    retrying: int  # writes being retried now (each blocks its caller until it lands)

    def __str__(self) -> str:
        return f"job store cannot be written: {self.cause}; {self.location}"


Listener = Callable[[Sequence[int]], None]


class JobStore(ABC):
    """Implementations call `super().__init__()` and `_notify(ids)` after each committed
    state change (outside any lock of theirs)."""

    shared = False  # several stork_servers may use the store at once (leases, nodes)

    def __init__(self, node: str = "") -> None:
        self.node = node or socket.gethostname()  # STORK_NODE_NAME
        self._listeners: tuple[Listener, ...] = ()
        self._elsewhere: tuple[Listener, ...] = ()
        self._listeners_lock = threading.Lock()

    # -- change notification (the same for every store) ---------------------------------------

    def add_listener(self, callback: Listener) -> None:
        """Call `callback(job_ids)` after every committed state change: `submit` (the ids of
        that call), `start_attempt`, `finish_attempt`, `requeue_running` and `remove` (the job
        or jobs that changed). Not for a refused change (None returned, exception raised),
        nor for progress, pid, result or history writes.

        The callback runs on the writing thread after the commit, with no store lock held; it
        should be quick (wake a waiter, put the ids on a queue). Its exceptions are logged
        and swallowed: they never undo or fail the write."""
        with self._listeners_lock:
            self._listeners = (*self._listeners, callback)

    def remove_listener(self, callback: Listener) -> None:
        """Stop calling `callback`; unknown callbacks are ignored."""
        with self._listeners_lock:
            self._listeners = tuple(c for c in self._listeners if c != callback)

    def add_elsewhere_listener(self, callback: Listener) -> None:
        """Call `callback(job_ids)` for jobs another node changed (shared stores only), after
        the `add_listener` callbacks heard of them: a node learns of jobs submitted,
        requeued or removed elsewhere. Same rules as `add_listener`."""
        with self._listeners_lock:
            self._elsewhere = (*self._elsewhere, callback)

    def _notify(self, job_ids: Sequence[int], elsewhere: bool = False) -> None:
        if not job_ids:
            return
        ids = tuple(job_ids)
        callbacks = self._listeners + (self._elsewhere if elsewhere else ())
        for callback in callbacks:  # a snapshot: listeners may be added meanwhile
            try:
                callback(ids)
            except Exception:
                log.exception("job store listener %r failed for jobs %s", callback,
                              ", ".join(map(str, ids)))

    # -- health -------------------------------------------------------------------------------

    @property
    def outage(self) -> Outage | None:
        """What keeps the store from being written now, or None when the last write landed.
        Cheap (no I/O): the API may show it on every request."""
        return None

    @property
    def available(self) -> bool:
        """True unless writes are failing now (see `outage`)."""
        return self.outage is None

    # -- nodes and leases (shared stores; a store of one node keeps these defaults) -----------

    def heartbeat(self) -> None:
        """Tell the other nodes this one is alive."""
        return None

    def renew_leases(self, job_ids: Sequence[int]) -> set[int]:
        """Extend this node's leases on the jobs whose attempts it runs; returns those it
        still holds (a job missing from the answer was removed, or its lease was lost and
        another node may run it: its attempt must stop without writing anything)."""
        return set(job_ids)

    def requeue_expired(self, now: float, reason: str) -> list[Job]:
        """RUNNING jobs whose lease expired (their node died or lost the database) back to
        IDLE, as `requeue_running` does for this node's own after a crash."""
        return []

    def nodes(self) -> list[NodeInfo]:
        """The nodes sharing the store, by name."""
        return []

    def host_load(self) -> dict[str, int]:
        """Running transfers per host on the other nodes (what they add to this node's host
        penalties)."""
        return {}

    def pair_lock(self, host_a: str, host_b: str) -> AbstractContextManager[object]:
        """Held while the EOS samples the unordered pair (host_a, host_b): across nodes, one
        sampling run per pair at a time (blocks until the pair is free)."""
        return contextlib.nullcontext()

    # -- jobs ---------------------------------------------------------------------------------

    @abstractmethod
    def submit(self, specs: Sequence[JobSpec], owner_uid: int, owner: str, now: float,
               files: Mapping[int, Sequence[DatasetFile]] | None = None) -> list[int]:
        """Queue every spec (IDLE) with a submit event, all in one transaction; `files`
        maps the position of a dataset spec in `specs` to its files (listed at submission),
        each stored PENDING. Never waits for an outage to end: raises `StoreUnavailable`
        (nothing queued) when the store cannot be written."""

    # -- the files of datasets ----------------------------------------------------------------

    @abstractmethod
    def add_files(self, job_id: int, files: Sequence[DatasetFile]) -> bool:
        """Store the files of a dataset listed after submission (by the daemon); only once,
        and only while the job is not terminal: False (nothing written) otherwise. Retried
        until it lands."""

    @abstractmethod
    def files(self, job_id: int, states: Sequence[FileState] | None = None,
              offset: int = 0, limit: int | None = None) -> list[DatasetFileRow]:
        """The job's files in index order, optionally only those in `states`."""

    @abstractmethod
    def start_files(self, job_id: int, attempt: int, indexes: Sequence[int],
                    chunk: str) -> None:
        """PENDING -> RUNNING (their attempts + 1, the chunk they run in) for files handed
        to the tool by attempt `attempt` of the job (only while it runs that attempt).
        Retried until it lands."""

    @abstractmethod
    def finish_files(self, job_id: int, attempt: int, results: Sequence[FileResult],
                     rate_mbps: float | None = None) -> bool:
        """Apply the files' results and the job's counters (files done and failed, bytes
        done: the sizes of its DONE files; the rate, when given) in one transaction, only
        while the job runs `attempt`; False (nothing written) otherwise. Listeners hear of
        it. Retried until it lands."""

    @abstractmethod
    def get(self, job_id: int) -> Job:
        """The job, or JobNotFound."""

    @abstractmethod
    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        """Jobs in id order, optionally only those in `states`."""

    def count_by_state(self) -> dict[str, int]:
        """How many jobs are in each state (every state, 0 included): for metrics and the
        status page. A store may answer it without reading the jobs."""
        counts = dict.fromkeys((s.value for s in JobState), 0)
        for job in self.list_jobs():
            counts[job.state.value] += 1
        return counts

    @abstractmethod
    def runnable(self, now: float, limit: int) -> list[Job]:
        """IDLE transfer jobs whose retry time has come, oldest first (estimation jobs are
        run by the EOS, never by the dispatcher)."""

    @abstractmethod
    def waiting_transfers(self) -> list[tuple[int, float]]:
        """(id, next_attempt_at) of every IDLE transfer job: cheap, for the dispatcher."""

    @abstractmethod
    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str, limit: HostLimit | None = None) -> Job | None:
        """IDLE -> RUNNING with attempts + 1, an attempts row and an execute event; None if
        no longer IDLE (of two racing callers exactly one gets the job). Retried until it
        lands when the store cannot be written (blocks the caller meanwhile).

        A shared store also gives this node the job's lease (renewed by `renew_leases`;
        writes for the attempt are refused once it is lost) and, with `limit`, raises
        `HostLimitReached` (nothing changes) when a host already runs `limit.max_running`
        transfers across the cluster. A store of one node ignores `limit` (the
        dispatcher's task matrix holds it)."""

    @abstractmethod
    def set_pid(self, job_id: int, attempt: int, pid: int | None) -> None:
        """Record the child process of the running attempt (retried until it lands)."""

    @abstractmethod
    def record_progress(self, job_id: int, attempt: int, bytes_done: int, rate_mbps: float) -> None:
        """Bytes moved and current rate of the running attempt (no event; dropped, not
        retried, when the store cannot be written)."""

    @abstractmethod
    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        """RUNNING -> transition.state, closing the attempts row, with the transition's
        event; only when the job is RUNNING `attempt` (the number the caller started), else
        None and nothing changes (removed, requeued, already finished).

        Retried until it lands when the store cannot be written: the calling attempt thread
        blocks here meanwhile, and must free the attempt's slot only after this returns."""

    @abstractmethod
    def requeue_running(self, now: float, reason: str) -> list[Job]:
        """After a crash: every RUNNING job back to IDLE, the interrupted attempt counted;
        their RUNNING files back to PENDING, marked in doubt (retried until it lands)."""

    @abstractmethod
    def remove(self, job_id: int, now: float, by: str) -> tuple[Job, Job]:
        """Non-terminal -> REMOVED with an event; returns (before, after). Raises
        JobNotFound, or InvalidRequest for a terminal job (retried until it lands when the
        store cannot be written)."""

    @abstractmethod
    def events(self, job_id: int) -> list[Event]:
        """The job's events in order."""

    @abstractmethod
    def attempts(self, job_id: int) -> list[Attempt]:
        """The job's attempts in order."""

    @abstractmethod
    def purge_finished(self, before: float) -> int:
        """Delete terminal jobs finished before `before`, with their events and attempts;
        raises `StoreUnavailable` when the store cannot be written."""

    @abstractmethod
    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        """Merge `values` into the job's result attributes (shown on its ad; no event);
        JobNotFound for an unknown job (retried until it lands)."""

    @abstractmethod
    def add_history(self, entry: HistoryEntry) -> None:
        """Remember an optimization or a finished transfer (retried until it lands)."""

    @abstractmethod
    def history(self, src_host: str, dest_host: str, *, symmetric: bool,
                arguments: str | None = None, kind: str | None = None,
                since: float = 0.0, limit: int = 100) -> list[HistoryEntry]:
        """Entries for the pair (either direction when `symmetric`), newest first."""

    # -- the transfer log ---------------------------------------------------------------------

    @abstractmethod
    def add_transfers(self, records: Sequence[TransferRecord]) -> int:
        """Append rows to the transfer log (never rewritten); returns how many. Retried
        until it lands."""

    @abstractmethod
    def transfers(self, src_host: str | None = None, dest_host: str | None = None, *,
                  since: float = 0.0, limit: int | None = None) -> list[TransferRecord]:
        """Transfer log rows, newest first, optionally for one source and/or destination
        host and from `since` on."""

    @abstractmethod
    def transfers_after(self, row_id: int = 0, limit: int | None = None
                        ) -> list[tuple[int, TransferRecord]]:
        """Transfer log rows added after the row `row_id` (0: from the first), in the order
        they were added, each with its row id: what an additive analysis has not read yet
        (`stork.asm`; a row's time is when it started, not when it was added)."""

    @abstractmethod
    def close(self) -> None:
        """Release the database; writes still being retried raise `StoreUnavailable`."""
