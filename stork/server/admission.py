"""Admission: which transfers may start now, and why the others wait.

Transfers enter the dispatcher's task matrix (`exclusive_pairs=False`: every transfer is its
own row, so only STORK_MAX_NUM_JOBS and the host penalties limit what runs at once) when
they are submitted (`admit_new`), when their retry time comes (`enqueue` with a due time)
and from a re-read of the runnable jobs every RESYNC_S seconds (start-up and safety net).
A selected transfer keeps its place (its slot and its hosts' penalties) while it is being
optimized and while its attempt runs, until `release`.

Nothing here reads the store: the dispatcher reads it outside the lock and hands the
answers in, so the lock is held only for work in memory. `wait_reason` takes no lock at all:
it reads a `View` (host penalties and the running set) published after each change, and the
id -> task map with single dictionary look-ups, so a listing of 100,000 jobs never waits
behind a dispatch tick.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from stork.config import LiveSettings, Settings
from stork.sched import Task, TaskMatrix
from stork.urls import parse_url

RESYNC_S = 10.0  # how often the runnable jobs are re-read from the store as a safety net
WAITING = "waiting for the next dispatch"
SLOTS_FULL = "slots full"


def _job_id(task: Task) -> int:
    """The job a task stands for: admission makes every task with its job id as the id."""
    assert isinstance(task.id, int)
    return task.id


def host_of(url: str) -> str:
    """The machine a URL touches (file URLs: this one), for host penalties."""
    if url.endswith("/"):  # a dataset's directory
        url += "_"
    elif "://" in url and any(c in url.rsplit("/", 1)[-1] for c in "*?["):  # a glob
        url = url.rsplit("/", 1)[0] + "/_"
    return parse_url(url).host or "localhost"


@dataclass(frozen=True)
class View:
    """What wait reasons need from the matrix, as it was after its last change."""

    penalties: Mapping[object, float] = field(default_factory=dict)  # host -> running load
    running: frozenset[int] = frozenset()  # selected job ids (optimizing or running)


def reason_for(task: Task | None, job_id: int, view: View, alpha: float, n: int,
               penalty_limit: float) -> str | None:
    """Why the transfer `task` (None: not in the matrix yet) is not running. Pure."""
    if task is None:
        return WAITING
    if job_id in view.running:
        return None  # selected: starting now
    full = [h for h in sorted(task.pair, key=str)
            if view.penalties.get(h, 0.0) + alpha > penalty_limit + 1e-12]
    if full:
        return f"host {full[0]} at penalty limit"
    if len(view.running) >= n:
        return SLOTS_FULL
    return WAITING


class Admission:
    def __init__(self, settings: Settings | LiveSettings) -> None:
        self._live = LiveSettings.of(settings)
        settings = self._live.current  # EOS_ALPHA and EOS_BETA are restart-only
        self.matrix = TaskMatrix(settings.eos_alpha, settings.eos_beta, exclusive_pairs=False)
        self._lock = threading.Lock()
        self._tasks: dict[int, Task] = {}  # job id -> its task in the matrix
        self._due: dict[int, float] = {}  # known jobs not yet in the matrix -> when runnable
        self._last_resync = float("-inf")
        self._view = View()
        self._elsewhere: dict[Hashable, float] = {}  # host -> penalty of other nodes' transfers

    @property
    def settings(self) -> Settings:
        return self._live.current

    # -- getting in ---------------------------------------------------------------------------

    def enqueue(self, job_ids: Iterable[int], due: float = 0.0) -> None:
        """Transfer jobs runnable from `due` on (unix seconds); they enter the matrix when
        `pop_due` hands them to the dispatcher and it finds them still IDLE."""
        with self._lock:
            for job_id in job_ids:
                if job_id not in self._tasks:
                    self._due[job_id] = due

    def admit_new(self, jobs: Iterable[tuple[int, str, str]]) -> None:
        """Freshly submitted transfers (id, src_url, dest_url): into the matrix at once."""
        with self._lock:
            for job_id, src_url, dest_url in jobs:
                self._add(job_id, src_url, dest_url)

    def add(self, job_id: int, src_url: str, dest_url: str) -> None:
        """A transfer the dispatcher found runnable: into the matrix."""
        with self._lock:
            self._add(job_id, src_url, dest_url)

    def _add(self, job_id: int, src_url: str, dest_url: str) -> None:
        if job_id not in self._tasks:
            self._due.pop(job_id, None)
            task = Task(host_of(src_url), host_of(dest_url), f"job {job_id}", job_id)
            self._tasks[job_id] = task
            self.matrix.add(task)

    def resync_due(self, now: float) -> bool:
        """True (once per RESYNC_S) when the runnable jobs should be re-read from the store."""
        with self._lock:
            if now - self._last_resync < RESYNC_S:
                return False
            self._last_resync = now
            return True

    def note_waiting(self, rows: Iterable[tuple[int, float]]) -> None:
        """(id, next_attempt_at) of the IDLE transfers the store holds: pick up the ones not
        known here (start-up, or anything missed)."""
        with self._lock:
            for job_id, due in rows:
                if job_id not in self._tasks and job_id not in self._due:
                    self._due[job_id] = due

    def pop_due(self, now: float) -> list[int]:
        """The known jobs whose time has come, taken out of the waiting list (the caller
        checks each in the store, then `add`s or re-`enqueue`s it)."""
        with self._lock:
            ready = [job_id for job_id, due in self._due.items() if due <= now]
            for job_id in ready:
                del self._due[job_id]
            return ready

    # -- selecting and leaving ----------------------------------------------------------------

    def select(self) -> list[int]:
        """Job ids to start now, at most STORK_MAX_NUM_JOBS running in all and no host beyond
        EOS_PENALTY_LIMIT (each selected transfer adds EOS_ALPHA to both its hosts). They
        hold their place until `release`."""
        s = self.settings
        with self._lock:
            chosen = self.matrix.select(s.max_num_jobs, s.eos_penalty_limit, int(s.eos_selection),
                                        self._elsewhere)
            if chosen:
                self._publish()
        return [_job_id(task) for task in chosen]

    def release(self, job_id: int) -> None:
        """The job's attempt is over, never started, or the job left: free its place."""
        with self._lock:
            self._due.pop(job_id, None)
            task = self._tasks.pop(job_id, None)
            if task is None:
                return
            if task in self.matrix.running():
                self.matrix.complete(task)
            else:
                self.matrix.discard(task)
            self._publish()

    def note_elsewhere(self, running: Mapping[str, int]) -> None:
        """Transfers other nodes sharing the store run per host: they count toward the host
        penalties here (the store holds the limit exactly when an attempt starts; this keeps
        the selection from choosing what it would refuse)."""
        alpha = self.matrix.alpha
        with self._lock:
            self._elsewhere = {host: count * alpha for host, count in running.items()}
            self._publish()

    def forget(self, job_id: int) -> None:
        """A removed job that was only waiting for its due time."""
        with self._lock:
            self._due.pop(job_id, None)

    def _publish(self) -> None:
        """Publish a new View (call with the lock held)."""
        penalties: dict[object, float] = dict(self.matrix.penalties())
        for host, load in self._elsewhere.items():
            penalties[host] = penalties.get(host, 0.0) + load
        self._view = View(penalties, frozenset(_job_id(t) for t in self.matrix.running()))

    # -- looking ------------------------------------------------------------------------------

    def is_selected(self, job_id: int) -> bool:
        return job_id in self._view.running

    def wait_reason(self, job_id: int) -> str | None:
        """Why the IDLE transfer `job_id` is not running (no lock; see the module doc)."""
        s = self.settings
        return reason_for(self._tasks.get(job_id), job_id, self._view, self.matrix.alpha,
                          s.max_num_jobs, s.eos_penalty_limit)

    def snapshot(self) -> dict[str, object]:
        """The matrix for `stork_q -matrix`, with n, the penalty limit and the algorithm."""
        with self._lock:
            snapshot = self.matrix.snapshot()
        snapshot["n"] = self.settings.max_num_jobs
        snapshot["penalty_limit"] = self.settings.eos_penalty_limit
        snapshot["selection"] = int(self.settings.eos_selection)
        return snapshot

    def __len__(self) -> int:
        return len(self._tasks)
