"""The one way Stork starts a child process: transfer attempts and EOS samples alike.

A child never runs through a shell. It gets PR_SET_PDEATHSIG = SIGKILL, so if the daemon dies
(even by SIGKILL) the child dies with it and cannot finish behind the back of a requeued job;
it runs in a session of its own, so a stop reaches every process of the tool; it runs with
the rights of `run_as` (the job's owner when the daemon is root, see `stork.identity`).
Its stdout is copied (to a file and/or a callback) and read for ``-vb`` progress lines; its
stderr is copied to a file and its tail kept for the error message.

    child = Child(argv, run_as=owner, stdout=out_file, on_progress=show)
    child.start()            # OSError when the program cannot be run
    ended = child.wait()     # ChildExit: code, stderr tail, bytes, duration, stop reason

`stop(reason)` may be called from any thread at any time, before `start` too (the child is
then never started, and `wait` reports the reason at once).

How PDEATHSIG is set: a child that runs with the daemon's own rights is started through
`setpriv --pdeathsig KILL --` (util-linux), so Python can start it with vfork: forking a
daemon of a few hundred megabytes costs milliseconds of its interpreter per transfer, and a
busy daemon starts hundreds a second. A child that changes user cannot be vforked anyway and
sets PDEATHSIG in a `preexec_fn`. Either way the program is looked up first, so a missing
one is an OSError from `start`, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from stork.identity import RunAs, popen_kwargs
from stork.transfer.base import Progress, read_progress
from stork.transfer.tokens import TOKEN_VARIABLES

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
TAIL_BYTES = 4096
STOP_GRACE_S = 5.0  # SIGTERM first; SIGKILL if the child is still there after this long
TIMEOUT = "timeout"  # the stop reason `wait(timeout_s=...)` gives
SETPRIV = shutil.which("setpriv")  # util-linux (Debian: essential); None: preexec_fn only


def child_setup() -> None:
    """In the child before exec: die with the parent (PR_SET_PDEATHSIG = SIGKILL)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def scrubbed(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The daemon's environment as a child inherits it: without the daemon's own bearer
    token (``BEARER_TOKEN``, ``BEARER_TOKEN_FILE``), which must never reach a job's tool;
    `environ` itself when it holds none."""
    if not any(name in environ for name in TOKEN_VARIABLES):
        return environ
    return {k: v for k, v in environ.items() if k not in TOKEN_VARIABLES}


def _program(name: str, env: Mapping[str, str] | None) -> str:
    """The executable `name` resolves to (as execvp would), or the OSError exec would give."""
    if os.sep in name:
        if not os.path.exists(name):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        if not os.access(name, os.X_OK) or os.path.isdir(name):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
        return name
    path = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which(name, path=path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    return found


def spawn_args(argv: Sequence[str], run_as: RunAs | None,
               env: Mapping[str, str] | None) -> tuple[list[str], dict[str, Any]]:
    """The argv and Popen keywords that start `argv` with PDEATHSIG set (see the module doc)."""
    if run_as is None and SETPRIV is not None:
        return [SETPRIV, "--pdeathsig", "KILL", "--", _program(argv[0], env), *argv[1:]], {}
    return list(argv), {"preexec_fn": child_setup, **popen_kwargs(run_as)}


@dataclass(frozen=True)
class ChildExit:
    """How a child ended."""

    code: int  # exit status; 128 + N when signal N ended it
    stderr_tail: str  # the last TAIL_BYTES of its stderr, stripped
    bytes_done: int  # from its last -vb progress line (0 without one)
    duration_s: float  # from start to exit
    stopped: str | None  # the reason given to `stop`, when Stork stopped it


class Child:
    """One child process, started by `start` and followed to its end by `wait`."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 run_as: RunAs | None = None, stdout: BinaryIO | None = None,
                 stderr: BinaryIO | None = None,
                 on_progress: Callable[[Progress], None] | None = None,
                 on_stdout: Callable[[bytes], None] | None = None,
                 on_next_file: Callable[[], None] | None = None,
                 stdin: bytes | None = None, interactive: bool = False) -> None:
        """`env` is added to the daemon's environment (with the owner's HOME, USER and
        LOGNAME when `run_as` is set; without the daemon's bearer token, `scrubbed`);
        `stdout` and `stderr` are open files the output is copied to; `on_stdout` sees every
        raw stdout chunk, `on_progress` every -vb line, `on_next_file` every file a
        globus-url-copy list begins (`read_progress`); `stdin` is written to the child's
        standard input (else it reads /dev/null), or, `interactive`, the input stays open for
        `send` until `close_input`."""
        self.argv = list(argv)
        self._stdin = stdin
        self._interactive = interactive
        self.run_as = run_as
        extra = {**(run_as.env() if run_as else {}), **(env or {})}
        inherited = scrubbed(os.environ)
        self.env = {**inherited, **extra} if extra or inherited is not os.environ else None
        self._stdout = stdout
        self._stderr = stderr
        self._on_progress = on_progress
        self._on_stdout = on_stdout
        self._on_next_file = on_next_file
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped: str | None = None
        self._ended = False
        self.pid: int | None = None
        self.start_time = time.monotonic()
        self.bytes_done = 0

    @property
    def stop_reason(self) -> str | None:
        return self._stopped

    def start(self) -> None:
        """Start the child (OSError when it cannot be run). Does nothing when `stop` was
        called first."""
        with self._lock:
            if self._stopped is not None:
                return
            self.start_time = time.monotonic()
            argv, extra = spawn_args(self.argv, self.run_as, self.env)
            piped = self._stdin is not None or self._interactive
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                close_fds=True, env=self.env, **extra)
            self.pid = self._proc.pid
            if self._stdin is not None:
                threading.Thread(target=self._feed, args=(self._proc, self._stdin),
                                 daemon=True).start()

    def send(self, data: bytes) -> None:
        """Write `data` to an interactive child's input now (OSError once it is gone)."""
        proc = self._proc
        if proc is None or proc.stdin is None or not self._interactive:
            raise OSError(errno.EPIPE, "the child takes no input")
        proc.stdin.write(data)
        proc.stdin.flush()

    def close_input(self) -> None:
        """End an interactive child's input (it reads end of file)."""
        proc = self._proc
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    @staticmethod
    def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
        """Write `data` to the child's stdin and close it (a child that exits early just
        stops reading)."""
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.write(data)
        with contextlib.suppress(OSError):
            proc.stdin.close()

    def stop(self, reason: str, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the child for `reason`: SIGTERM to its process group, SIGKILL after `grace_s`.
        The first reason is kept; a child that already exited on its own keeps none."""
        with self._lock:
            proc = self._proc
            if self._ended or (proc is not None and proc.poll() is not None):
                return
            if self._stopped is None:
                self._stopped = reason
        if proc is None:
            return  # not started: `start` will not start it
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        threading.Thread(target=self._reap, args=(proc, grace_s), daemon=True).start()

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes], grace_s: float) -> None:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def wait(self, timeout_s: float | None = None) -> ChildExit:
        """Copy the output until the child exits, then say how it ended. Past `timeout_s`
        (from now) the child is stopped with the reason TIMEOUT."""
        proc = self._proc
        if proc is None:  # stopped before it started
            with self._lock:
                self._ended = True
            return ChildExit(128 + signal.SIGTERM, "", 0, 0.0, self._stopped)
        timer = threading.Timer(timeout_s, self.stop, args=(TIMEOUT,)) if timeout_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        tail = bytearray()
        err_thread = threading.Thread(target=self._pump_stderr, args=(proc, tail), daemon=True)
        err_thread.start()
        try:
            self._pump_stdout(proc)
            err_thread.join()
            code = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
        with self._lock:
            self._ended = True
        return ChildExit(code=code if code >= 0 else 128 - code,
                         stderr_tail=tail.decode(errors="replace").strip(),
                         bytes_done=self.bytes_done,
                         duration_s=time.monotonic() - self.start_time,
                         stopped=self._stopped)

    def run(self, timeout_s: float | None = None) -> ChildExit:
        """`start` then `wait`."""
        self.start()
        return self.wait(timeout_s)

    def _pump_stdout(self, proc: subprocess.Popen[bytes]) -> None:
        assert isinstance(proc.stdout, io.BufferedReader)  # stdout=PIPE, buffered

        def copy(chunk: bytes) -> None:
            if self._stdout is not None:
                self._stdout.write(chunk)
                self._stdout.flush()
            if self._on_stdout is not None:
                self._on_stdout(chunk)

        for progress in read_progress(proc.stdout, copy, self._on_next_file):
            self.bytes_done = progress.bytes_done
            if self._on_progress is not None:
                self._on_progress(progress)

    def _pump_stderr(self, proc: subprocess.Popen[bytes], tail: bytearray) -> None:
        assert isinstance(proc.stderr, io.BufferedReader)  # stderr=PIPE, buffered
        while chunk := proc.stderr.read1(65536):
            if self._stderr is not None:
                self._stderr.write(chunk)
                self._stderr.flush()
            tail.extend(chunk)
            del tail[:-TAIL_BYTES]
