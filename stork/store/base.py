"""The job store interface. No SQL or SQLite detail leaks out of the implementations.

Every state change goes through `start_attempt`, `finish_attempt`, `requeue_running` or
`remove`, each of which writes the new state and its event in one transaction, and only
succeeds when the job is still in the state the caller saw (so a job never completes twice).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stork.job import Event, Job, JobSpec, JobState


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
class HistoryEntry:
    """One remembered result for a host pair: an optimization or a finished transfer."""

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


class JobStore(ABC):
    @abstractmethod
    def submit(self, specs: Sequence[JobSpec], owner_uid: int, owner: str, now: float) -> list[int]:
        """Queue every spec (IDLE) with a submit event, all in one transaction."""

    @abstractmethod
    def get(self, job_id: int) -> Job:
        """The job, or JobNotFound."""

    @abstractmethod
    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[Job]:
        """Jobs in id order, optionally only those in `states`."""

    @abstractmethod
    def runnable(self, now: float, limit: int) -> list[Job]:
        """IDLE transfer jobs whose retry time has come, oldest first (estimation jobs are
        run by the EOS, never by the dispatcher)."""

    @abstractmethod
    def waiting_transfers(self) -> list[tuple[int, float]]:
        """(id, next_attempt_at) of every IDLE transfer job: cheap, for the dispatcher."""

    @abstractmethod
    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str) -> Job | None:
        """IDLE -> RUNNING with attempts + 1 and an execute event; None if no longer IDLE."""

    @abstractmethod
    def set_pid(self, job_id: int, attempt: int, pid: int | None) -> None:
        """Record the child process of the running attempt."""

    @abstractmethod
    def record_progress(self, job_id: int, attempt: int, bytes_done: int, rate_mbps: float) -> None:
        """Bytes moved and current rate of the running attempt (no event)."""

    @abstractmethod
    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        """RUNNING -> transition.state; None if the job moved on (removed, requeued)."""

    @abstractmethod
    def requeue_running(self, now: float, reason: str) -> list[Job]:
        """After a crash: every RUNNING job back to IDLE, the interrupted attempt counted."""

    @abstractmethod
    def remove(self, job_id: int, now: float, by: str) -> tuple[Job, Job]:
        """Non-terminal -> REMOVED with an event; returns (before, after)."""

    @abstractmethod
    def events(self, job_id: int) -> list[Event]:
        """The job's events in order."""

    @abstractmethod
    def attempts(self, job_id: int) -> list[Attempt]:
        """The job's attempts in order."""

    @abstractmethod
    def purge_finished(self, before: float) -> int:
        """Delete terminal jobs finished before `before`, with their events and attempts."""

    @abstractmethod
    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        """Merge `values` into the job's result attributes (shown on its ad; no event)."""

    @abstractmethod
    def add_history(self, entry: HistoryEntry) -> None:
        """Remember an optimization or a finished transfer."""

    @abstractmethod
    def history(self, src_host: str, dest_host: str, *, symmetric: bool,
                arguments: str | None = None, kind: str | None = None,
                since: float = 0.0, limit: int = 100) -> list[HistoryEntry]:
        """Entries for the pair (either direction when `symmetric`), newest first."""

    @abstractmethod
    def close(self) -> None:
        """Release the database."""
