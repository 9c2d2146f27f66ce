"""The one child-process launcher (stork.process), with small real children."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from stork.process import SETPRIV, TIMEOUT, Child, spawn_args
from stork.transfer.base import Progress, format_progress

PY = sys.executable


def script(text: str) -> list[str]:
    return [PY, "-c", text]


def test_output_progress_and_stderr_tail() -> None:
    lines = "".join(f"print({format_progress(n * 1000, 1.0, 2.0)!r}, end='\\r', flush=True);"
                    for n in (1, 2, 3))
    out, err = io.BytesIO(), io.BytesIO()
    seen: list[Progress] = []
    chunks: list[bytes] = []
    child = Child(script(f"import sys; {lines} sys.stderr.write('x' * 5000 + 'the end')"),
                  stdout=out, stderr=err, on_progress=seen.append, on_stdout=chunks.append)
    ended = child.run()
    assert ended.code == 0 and ended.stopped is None
    assert [p.bytes_done for p in seen] == [1000, 2000, 3000] and ended.bytes_done == 3000
    assert b"".join(chunks) == out.getvalue() and out.getvalue().count(b"MB/sec avg") == 3
    assert len(err.getvalue()) == 5007  # all of it in the file, the tail in the result
    assert ended.stderr_tail.endswith("the end") and len(ended.stderr_tail) == 4096
    assert child.pid is not None and ended.duration_s > 0


def test_exit_status_and_signal() -> None:
    assert Child(script("raise SystemExit(3)")).run().code == 3
    ended = Child(script("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)")).run()
    assert ended.code == 128 + signal.SIGUSR1


def test_no_shell_and_environment() -> None:
    ended = Child(["/bin/echo", "$HOME;", "`id`"], on_stdout=lambda b: None).run()
    assert ended.code == 0
    out: list[bytes] = []
    Child(script("import os; print(os.environ['STORK_T'], os.environ['PATH'] != '')"),
          env={"STORK_T": "here"}, on_stdout=out.append).run()
    assert b"".join(out).strip() == b"here True"


def test_stop_reaches_the_process_group_and_keeps_the_reason() -> None:
    child = Child(["/bin/sh", "-c", "sleep 30 & wait"])
    child.start()
    time.sleep(0.2)
    child.stop("removed")
    child.stop("shutdown")  # the first reason stays
    ended = child.wait()
    assert ended.stopped == "removed" and ended.code == 128 + signal.SIGTERM
    assert ended.duration_s < 10


def test_stop_before_start_never_starts_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    child = Child(["/bin/touch", str(marker)])
    child.stop("removed")
    child.start()
    ended = child.wait()
    assert ended.stopped == "removed" and child.pid is None and not marker.exists()


def test_a_child_that_ended_keeps_no_stop_reason() -> None:
    child = Child(["/bin/true"])
    child.start()
    time.sleep(0.3)
    child.stop("timeout")
    assert child.wait().stopped is None


def test_timeout() -> None:
    ended = Child(["/bin/sleep", "30"]).run(timeout_s=0.3)
    assert ended.stopped == TIMEOUT and ended.duration_s < 10


def test_unknown_program() -> None:
    with pytest.raises(FileNotFoundError):
        Child(["/nonexistent/tool"]).start()
    with pytest.raises(FileNotFoundError):
        Child(["stork-no-such-tool"]).start()  # looked up on PATH, as exec would


def test_a_program_that_cannot_be_run(tmp_path: Path) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(PermissionError):
        Child([str(plain)]).start()


def test_children_with_the_daemons_rights_start_through_setpriv() -> None:
    """vfork needs no preexec_fn: setpriv sets PDEATHSIG (the death test below proves it)."""
    argv, extra = spawn_args(["true", "x"], None, None)
    assert SETPRIV is not None, "setpriv (util-linux) is missing"
    assert argv[:4] == [SETPRIV, "--pdeathsig", "KILL", "--"] and argv[5:] == ["x"]
    assert argv[4].endswith("/true") and extra == {}


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a parent killed by SIGKILL takes its child with it."""
    pid_file = tmp_path / "pid"
    repo = str(Path(__file__).resolve().parent.parent)
    parent = script(
        f"import sys, time; sys.path.insert(0, {repo!r}); from stork.process import Child; "
        f"c = Child(['/bin/sleep', '60']); c.start(); open({str(pid_file)!r}, 'w')"
        ".write(str(c.pid)); time.sleep(60)")
    import subprocess

    proc = subprocess.Popen(parent)
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child_pid = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{child_pid}/stat") as handle:
                    if handle.read().split()[2] == "Z":
                        break  # dead, waiting to be reaped by init
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the child outlived its parent")
    finally:
        if proc.poll() is None:
            proc.kill()
