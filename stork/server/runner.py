"""One transfer attempt as a child process (through `stork.process.Child`), on its own thread.

The job's `output` and `err` files are opened with the rights of the job's owner and receive
the tool's stdout and stderr; progress comes from its -vb lines. The attempt's thread reports
the pid as soon as the child exists and the `AttemptResult` when it ends.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import BinaryIO

from stork.errors import IdentityError, TransferError
from stork.identity import RunAs, open_as
from stork.process import Child
from stork.transfer.base import Progress

log = logging.getLogger(__name__)


class StopReason(enum.Enum):
    """Why Stork stopped an attempt's child."""

    TIMEOUT = "timeout"  # ran past STORK_MAXDELAY_INMINUTES
    REMOVED = "removed"  # stork_rm
    SHUTDOWN = "shutdown"  # stork_server stopping
    LEASE_LOST = "lease lost"  # a shared store: another node may run the job now


@dataclass(frozen=True)
class AttemptResult:
    exit_code: int  # 128 + N when signal N ended the tool
    stderr_tail: str
    bytes_done: int  # from the tool's last progress line
    duration_s: float
    killed_reason: StopReason | None = None  # set when Stork stopped the child
    failure: TransferError | None = None  # judged already (an engine run's failed range)
    streams: int | None = None  # an engine run's streams at its end (cc x p), not the plan's


class AttemptProcess:
    """One attempt's child. `start` returns once the child exists (or failed to start);
    `on_exit` runs on the attempt's thread."""

    def __init__(self, argv: list[str], *, output: str | None, err: str | None,
                 env: dict[str, str] | None = None, run_as: RunAs | None = None,
                 on_progress: Callable[[Progress], None],
                 on_exit: Callable[[AttemptResult], None],
                 on_pid: Callable[[int], None] | None = None) -> None:
        self.argv = argv
        self.output = output
        self.err = err
        self.run_as = run_as  # the job's owner when the daemon is root
        self._env = env
        self._on_progress = on_progress
        self._on_exit = on_exit
        self._on_pid = on_pid
        self._child: Child | None = None
        self._stop: StopReason | None = None
        self._lock = threading.Lock()
        self._started = threading.Event()
        self.start_time = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> None:
        self.start_time = time.monotonic()
        threading.Thread(target=self._run, name="attempt", daemon=True).start()
        self._started.wait()

    def kill(self, reason: StopReason) -> None:
        """Stop the child (SIGTERM to its group, SIGKILL after 5 s); before it exists, it is
        never started. The first reason is kept."""
        with self._lock:
            if self._stop is None:
                self._stop = reason
            child = self._child
        if child is not None:
            child.stop(reason.value)

    def _run(self) -> None:
        try:
            result = self._attempt()
        except Exception as exc:  # never leave the attempt without an end (its slot)
            log.exception("attempt %s failed inside stork_server", self.argv[:1])
            result = AttemptResult(1, f"stork_server could not run the attempt: {exc}", 0, 0.0)
        finally:
            self._started.set()
        self._on_exit(result)

    def _attempt(self) -> AttemptResult:
        with ExitStack() as files:
            try:  # as the job's owner: the daemon must not write where they could not
                out_file = self._open(self.output, files)
                err_file = self._open(self.err, files)
            except IdentityError as exc:
                return AttemptResult(1, str(exc), 0, 0.0, None)
            child = Child(self.argv, env=self._env, run_as=self.run_as, stdout=out_file,
                          stderr=err_file, on_progress=self._on_progress)
            with self._lock:
                self._child = child
                stop = self._stop
            if stop is not None:
                child.stop(stop.value)  # removed or stopped before it started
            try:
                child.start()
            except OSError as exc:
                return AttemptResult(127, f"cannot run {self.argv[0]}: {exc.strerror}", 0, 0.0)
            self.start_time = child.start_time
            self._started.set()
            if child.pid is not None and self._on_pid is not None:
                self._on_pid(child.pid)
            ended = child.wait()
        return AttemptResult(ended.code, ended.stderr_tail, ended.bytes_done, ended.duration_s,
                             StopReason(ended.stopped) if ended.stopped else None)

    def _open(self, path: str | None, files: ExitStack) -> BinaryIO | None:
        return open_output(self.run_as, path, files)


def open_output(run_as: RunAs | None, path: str | None, files: ExitStack) -> BinaryIO | None:
    """The job's `output` or `err` file opened for appending as its owner (None: no file);
    closed with `files`. IdentityError when the owner may not write it."""
    if not path:
        return None
    fd = open_as(run_as, path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    return files.enter_context(os.fdopen(fd, "ab"))
