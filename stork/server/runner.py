"""Runs one transfer attempt as a child process and watches it.

The child never runs through a shell. It gets PR_SET_PDEATHSIG = SIGKILL, so if the daemon
dies (even by SIGKILL) the transfer dies with it and cannot complete behind the back of the
requeued job. Its stdout goes to the job's `output` file and is read for progress lines;
its stderr goes to the job's `err` file and its tail is kept for `last_error`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from stork.identity import IdentityError, RunAs, open_as, popen_kwargs
from stork.transfer.base import Progress, read_progress

_PR_SET_PDEATHSIG = 1
_TAIL_BYTES = 4096
_LIBC = ctypes.CDLL(None, use_errno=True)


def child_setup() -> None:
    """In the child before exec: die with the parent (PR_SET_PDEATHSIG = SIGKILL)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True)
class AttemptResult:
    exit_code: int
    stderr_tail: str
    bytes_done: int
    duration_s: float
    killed_reason: str | None  # set when Stork stopped the child (timeout, removal, shutdown)


class AttemptProcess:
    """One running child process. `start` returns at once; `on_exit` runs on its thread."""

    def __init__(self, argv: list[str] | Callable[[], list[str]], *, output: str | None,
                 err: str | None, env: dict[str, str] | None = None,
                 run_as: RunAs | None = None,
                 on_progress: Callable[[Progress], None],
                 on_exit: Callable[[AttemptResult], None]) -> None:
        self.argv = argv
        self.output = output
        self.err = err
        self.run_as = run_as  # the job's owner when the daemon is root
        extra = {**(run_as.env() if run_as else {}), **(env or {})}
        self.env = {**os.environ, **extra} if extra else None
        self._on_progress = on_progress
        self._on_exit = on_exit
        self._pid_callback: Callable[[int], None] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed_reason: str | None = None
        self._started = threading.Event()
        self._lock = threading.Lock()
        self.start_time = time.monotonic()
        self.bytes_done = 0
        self.pid: int | None = None

    def start(self) -> None:
        """Start the attempt's thread; waits for the child to exist unless the command is
        still to be built (sampling can take minutes, and the dispatcher must not wait)."""
        thread = threading.Thread(target=self._run, name="attempt", daemon=True)
        thread.start()
        if not callable(self.argv):
            self._started.wait()

    def on_pid(self, callback: Callable[[int], None]) -> None:
        """Call `callback(pid)` on the attempt's thread as soon as the child exists."""
        self._pid_callback = callback

    def kill(self, reason: str) -> None:
        """Stop the child (SIGTERM to its process group, SIGKILL after 5 s)."""
        with self._lock:
            if self._killed_reason is None:
                self._killed_reason = reason
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        threading.Thread(target=self._reap, args=(proc,), daemon=True).start()

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _run(self) -> None:
        if callable(self.argv):  # parameters still to be chosen (the EOS samples first)
            try:
                self.argv = self.argv()
            except Exception as exc:
                self._started.set()
                self._on_exit(AttemptResult(1, f"choosing parameters failed: {exc}", 0,
                                            time.monotonic() - self.start_time, None))
                return
        with self._lock:
            if self._killed_reason is not None:  # stopped while its parameters were chosen
                self._started.set()
                self._on_exit(AttemptResult(143, "", 0, 0.0, self._killed_reason))
                return
        self.start_time = time.monotonic()  # the transfer itself starts now
        tail = bytearray()
        try:  # as the job's owner: the daemon must not write where they could not
            out_file = self._open(self.output)
            err_file = self._open(self.err)
        except IdentityError as exc:
            self._started.set()
            self._on_exit(AttemptResult(1, str(exc), 0, 0.0, None))
            return
        try:
            try:
                proc = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, preexec_fn=child_setup, start_new_session=True,
                    close_fds=True, env=self.env, **popen_kwargs(self.run_as))
            except OSError as exc:
                self._started.set()
                self._on_exit(AttemptResult(127, f"cannot run {self.argv[0]}: {exc.strerror}", 0,
                                            0.0, None))
                return
            with self._lock:
                self._proc = proc
                self.pid = proc.pid
                late_kill = self._killed_reason is not None
            if late_kill:
                os.killpg(proc.pid, signal.SIGTERM)
            self._started.set()
            if self._pid_callback is not None:
                self._pid_callback(proc.pid)
            err_thread = threading.Thread(target=self._pump_stderr,
                                          args=(proc, err_file, tail), daemon=True)
            err_thread.start()
            self._pump_stdout(proc, out_file)
            err_thread.join()
            code = proc.wait()
        finally:
            for handle in (out_file, err_file):
                if handle:
                    handle.close()
        result = AttemptResult(
            exit_code=code if code >= 0 else 128 - code,
            stderr_tail=tail.decode(errors="replace").strip(),
            bytes_done=self.bytes_done,
            duration_s=time.monotonic() - self.start_time,
            killed_reason=self._killed_reason)
        self._on_exit(result)

    def _open(self, path: str | None) -> BinaryIO | None:
        if not path:
            return None
        fd = open_as(self.run_as, path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        return os.fdopen(fd, "ab")

    def _pump_stdout(self, proc: subprocess.Popen[bytes], out_file: BinaryIO | None) -> None:
        assert proc.stdout is not None

        def copy(chunk: bytes) -> None:
            if out_file is not None:
                out_file.write(chunk)
                out_file.flush()

        for progress in read_progress(proc.stdout, copy):
            self.bytes_done = progress.bytes_done
            self._on_progress(progress)

    @staticmethod
    def _pump_stderr(proc: subprocess.Popen[bytes], err_file: object, tail: bytearray) -> None:
        assert proc.stderr is not None
        while chunk := proc.stderr.read1(65536):
            if err_file is not None:
                err_file.write(chunk)  # type: ignore[attr-defined]
                err_file.flush()  # type: ignore[attr-defined]
            tail.extend(chunk)
            del tail[:-_TAIL_BYTES]
