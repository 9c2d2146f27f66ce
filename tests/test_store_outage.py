"""A full disk under the job store, for real: a 3 MB tmpfs filled by a filler file.

While the disk is full, submissions are refused with a message naming the state directory
and the cause, the writes that record work already done wait (on their own thread) and land
once the filler is removed, and afterwards every job completes exactly once. The daemon-level
test runs a real stork_server with its state directory on the tmpfs.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stork.errors import StoreUnavailable
from stork.job import DapType, JobSpec, JobState
from stork.store import SqliteStore, Transition
from tests.support import StorkServer, install_slow_module, make_file, md5, wait_for

SPEC = JobSpec(DapType.TRANSFER, "file:///a", "file:///b", ad_text='[ dap_type = "transfer" ]')
DONE = Transition(JobState.COMPLETED, "completed", "completed", exit_code=0, bytes_done=1)
DISK_SIZE = "3M"


def mount_problem(directory: Path) -> str | None:
    """Mount a small tmpfs on `directory`; None when mounted, else why it cannot be."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount not installed (Debian package mount)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0755", "tmpfs",
                           str(directory)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`mount -t tmpfs` failed: {done.stderr.strip() or done.returncode}"
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs, unmounted afterwards."""
    directory = tmp_path / "small-disk"
    directory.mkdir()
    problem = mount_problem(directory)
    if problem is not None:
        pytest.skip(f"cannot fill a small disk here: {problem}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path) -> Path:
    """A filler file taking every free byte of the file system of `directory`."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):  # big pieces, then the last partial page
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler


class Background:
    """A store call on a thread of its own: does it wait, and what did it return?"""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: list[Any] = []
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(call,))
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result.append(call())
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.error.append(exc)

    def join(self, timeout_s: float = 30) -> Any:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the write did not land after the disk was freed"
        assert self.error == [], self.error
        return self.result[0]


def test_full_disk_refuses_submissions_and_lands_the_work_done(small_disk: Path) -> None:
    store = SqliteStore(str(small_disk / "stork.db"))
    ids = store.submit([SPEC] * 10, 0, "root", now=1.0)
    for job_id in ids[:3]:
        assert store.start_attempt(job_id, 2.0, "file:///a", "file:///b", "m") is not None
    filler = fill(small_disk)

    # a submission is refused, naming the state directory and the cause; nothing is queued
    accepted: list[int] = []
    for _ in range(50):  # a write that fits in a page already allocated may still land
        try:
            accepted += store.submit([SPEC] * 5, 0, "root", now=3.0)
        except StoreUnavailable as exc:
            refused = str(exc)
            break
    else:
        pytest.fail("50 submissions were accepted on a full disk")
    assert str(small_disk) in refused and "disk full" in refused, refused
    listed = [j.id for j in store.list_jobs()]  # reads answer during the outage
    assert listed == ids + accepted
    outage = store.outage
    assert outage is not None and outage.cause == "disk full"
    assert outage.location == f"state directory {small_disk}" and not store.available

    # writes recording work already done wait on their own threads, and do not fail
    finish = Background(lambda: store.finish_attempt(ids[0], 1, 4.0, DONE))
    begin = Background(lambda: store.start_attempt(ids[3], 4.0, "file:///a", "file:///b", "m"))
    store.record_progress(ids[1], 1, 100, 1.0)  # dropped: returns at once
    time.sleep(1.5)
    assert finish.thread.is_alive() and begin.thread.is_alive(), (finish.error, begin.error)
    assert store.outage is not None and store.outage.retrying == 2
    assert store.get(ids[0]).state is JobState.RUNNING
    with pytest.raises(StoreUnavailable, match="disk full"):
        store.submit([SPEC], 0, "root", now=4.5)

    os.unlink(filler)
    finished, begun = finish.join(), begin.join()
    assert finished is not None and finished.state is JobState.COMPLETED
    assert begun is not None and begun.attempts == 1
    assert store.available and store.outage is None

    # every job completes, each exactly once
    for job in store.list_jobs([JobState.IDLE]):
        assert store.start_attempt(job.id, 5.0, "file:///a", "file:///b", "m") is not None
    for job in store.list_jobs([JobState.RUNNING]):
        assert store.finish_attempt(job.id, 1, 6.0, DONE) is not None
    store.close()
    store = SqliteStore(str(small_disk / "stork.db"))  # what is on disk, not in a cache
    jobs = store.list_jobs()
    assert [j.id for j in jobs] == ids + accepted
    assert all(j.state is JobState.COMPLETED and j.attempts == 1 and j.failures == 0
               for j in jobs), jobs
    for job in jobs:
        assert [e.kind for e in store.events(job.id)] == ["submit", "execute", "completed"]
        [attempt] = store.attempts(job.id)
        assert attempt.outcome == "completed" and attempt.ended_at is not None
    store.close()
    db = sqlite3.connect(small_disk / "stork.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == len(ids + accepted)
    db.close()


# --- a real daemon ------------------------------------------------------------------------

def test_daemon_rides_out_a_full_state_directory(small_disk: Path, tmp_path: Path) -> None:
    """The issue's scenario: the state directory fills up while transfers run and jobs wait;
    once space is freed every job completes exactly once, without a restart."""
    work = small_disk.parent / "daemon"
    state = work / "state"
    state.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(small_disk), str(state)], check=True)
    try:
        run_daemon_through_outage(work, state, tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def run_daemon_through_outage(work: Path, state: Path, tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.1, chunk=64 << 10)  # 0.4 s a file
    src_dir, dst_dir = tmp_path / "src", tmp_path / "dst"
    src_dir.mkdir()
    dst_dir.mkdir()
    sources = [make_file(src_dir / f"f{i}.dat", 256 << 10, seed=i) for i in range(12)]
    server = StorkServer(work, {"STORK_MODULE_DIR": str(modules), "STORK_MAX_NUM_JOBS": "2",
                                "STORK_MAX_RETRY": "0"})
    ads = "".join(f'[ dap_type = transfer; src_url = "file://{s}"; '
                  f'dest_url = "file://{dst_dir / s.name}" ]\n' for s in sources)
    with server:
        ids = server.api("POST", "/v1/jobs", json={"text": ads, "filename": "a.dap",
                                                   "iwd": str(tmp_path)}).json()["ids"]
        wait_for(lambda: any(j["state"] == "RUNNING" for j in jobs(server)), 20,
                 what="a transfer to start")
        filler = fill(state)
        refused = None
        for i in range(50):
            answer = server.api("POST", "/v1/jobs", json={
                "text": f'[ dap_type = transfer; src_url = "file://{sources[0]}"; '
                        f'dest_url = "file://{dst_dir}/late{i}.dat" ]', "iwd": str(tmp_path)})
            if not answer.is_success:
                refused = answer
                break
            ids += answer.json()["ids"]  # landed in an allocated page: it must complete too
        assert refused is not None, "50 submissions were accepted on a full disk"
        assert refused.status_code >= 500, refused.text
        error = refused.json()["error"]
        assert str(state) in error and "disk full" in error, error
        # a transfer ends; its end waits for the disk, and so does all the work after it
        wait_for(lambda: "store write retried: disk full" in server.stderr_path.read_text(),
                 20, what="an attempt's end to wait for the full disk")
        listing = jobs(server)  # stork_q answers during the outage
        assert sorted(j["id"] for j in listing) == sorted(ids)
        time.sleep(1.5)
        assert jobs(server) == listing  # nothing moves while the disk is full
        assert [j["state"] for j in listing].count("RUNNING") == 2  # the slots, held
        os.unlink(filler)
        again = server.api("POST", "/v1/jobs", json={  # accepted again, no restart
            "text": f'[ dap_type = transfer; src_url = "file://{sources[1]}"; '
                    f'dest_url = "file://{dst_dir}/after.dat" ]', "iwd": str(tmp_path)})
        assert again.is_success, again.text
        ids += again.json()["ids"]
        done = [server.wait_state(i, timeout_s=120) for i in ids]
        assert [j["state"] for j in done] == ["COMPLETED"] * len(ids), done
        details = [server.job(i) for i in ids]
    for detail in details:
        attempts = detail["attempts"]
        assert len(attempts) == 1 and attempts[0]["outcome"] == "completed", detail
        kinds = [e["kind"] for e in detail["events"]]
        assert kinds == ["submit", "execute", "completed"], detail
    for source in sources:
        assert md5(dst_dir / source.name) == md5(source)
    stderr = server.stderr_path.read_text()
    assert "store write retried: disk full; state directory" in stderr, stderr[-3000:]
    assert "store writable again" in stderr
    assert "cannot record the end of attempt" not in stderr
    assert "Traceback" not in stderr  # the outage is told in a few lines, not per request
    assert "dispatch tick failed" not in stderr


def jobs(server: StorkServer) -> list[dict[str, Any]]:
    return server.api("GET", "/v1/jobs").json()["jobs"]
