"""Datasets in the commands a user runs: stork_q's files column, stork_status -files and the
progress bar of stork_submit --wait, against a real daemon and real GridFTP servers."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import tempfile
import termios
import time
from pathlib import Path

from stork.cli.q import table
from stork.cli.status import FILES_PAGE
from tests.support import BIN, GridFtpServer, StorkServer, make_file, removed_after
from tests.test_dataset_jobs import make_tree

FILES = 20


def dataset_ad(src_dir_url: str, dest: Path, extra: str = "") -> str:
    return (f'[ dap_type = transfer; src_url = "{src_dir_url}/"; dest_url = "file://{dest}/"; '
            f"{extra} ]\n")


def single_ad(tmp: Path) -> str:
    return (f'[ dap_type = transfer; src_url = "file://{tmp}/one.src"; '
            f'dest_url = "file://{tmp}/one.dst" ]\n')


def row_of(table_text: str, job_id: int) -> list[str]:
    [row] = [line for line in table_text.splitlines() if line.startswith(f"{job_id:>6} ")]
    return row.split()


def test_table_of_single_file_jobs_is_as_before() -> None:
    job = {"id": 7, "owner": "alice", "state": "COMPLETED", "attempts": 1, "bytes_done": 1024,
           "rate_mbps": 0.0, "next_attempt_at": 0.0, "wait_reason": None,
           "dap_type": "transfer", "result": {}, "failure_kind": None, "src_url": "file:///a",
           "dest_url": "file:///b", "files_total": 0, "files_done": 0, "files_failed": 0,
           "bytes_total": None}
    assert table([job], now=0.0).splitlines()[:2] == [
        "    ID OWNER      STATE     ATT  PROGRESS                   SOURCE -> DESTINATION",
        "     7 alice      COMPLETED   1  1.0 KiB                    file:///a -> file:///b"]
    dataset = {**job, "id": 8, "state": "RUNNING", "files_total": 500, "files_done": 412,
               "files_failed": 3, "bytes_done": 412 << 20, "bytes_total": 500 << 20,
               "rate_mbps": 450.3}
    assert row_of(table([job, dataset], now=0.0), 8)[4:9] == [
        "412/500+3F", "412.0/500.0", "MiB", "@", "450"]


def test_q_shows_files_of_a_dataset_and_status_lists_them(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / f"cli-q-{tmp_path.name}"
    made = make_tree(src, FILES, 1000)
    make_file(tmp_path / "one.src", 100_000)
    dest = tmp_path / "out"
    ids = stork.submit(dataset_ad(gridftp.url(src), dest) + single_ad(tmp_path))
    for job_id in ids:
        assert stork.wait_state(job_id)["state"] == "COMPLETED"
    ds, single = ids

    q = stork.cli("stork_q", check=True).stdout
    assert row_of(q, ds)[2:7] == ["COMPLETED", "1", f"{FILES}/{FILES}", "19.5/19.5", "KiB"]
    assert row_of(q, single)[2:] == ["COMPLETED", "1", "97.7", "KiB", f"file://{tmp_path}/one.src",
                                     "->", f"file://{tmp_path}/one.dst"]

    for option in ("-files", "--files"):
        listing = stork.cli("stork_status", str(ds), option, check=True).stdout.splitlines()
        assert listing[0].startswith(f"Job {ds}: COMPLETED ({FILES}/{FILES} ")
        rows = [line.split() for line in listing if line.startswith("  ") and "INDEX" not in line]
        assert [r[:5] for r in rows] == [[str(i), "DONE", "1000", "B", "1"]
                                        for i in range(FILES)]
        assert sorted(r[5] for r in rows) == sorted(made)
        assert listing[-1] == f"{FILES} of {FILES} file(s)"
    failed = stork.cli("stork_status", "-files", "FAILED", str(ds), check=True).stdout
    assert failed.splitlines()[-1] == f"0 of {FILES} file(s)"
    none = stork.cli("stork_status", "-files", str(single), check=True).stdout
    assert f"Job {single} is a single-file job: it has no file list" in none


def test_status_files_pages_through_a_dataset_larger_than_a_page(
        stork: StorkServer, tmp_path: Path) -> None:
    count = 2 * FILES_PAGE + 500  # three pages
    src = tmp_path / "many"
    src.mkdir()
    for i in range(count):
        (src / f"f{i:05d}").touch()
    [job_id] = stork.submit(dataset_ad(f"file://{src}", tmp_path / "out"))
    assert stork.wait_state(job_id)["state"] == "COMPLETED"
    listing = stork.cli("stork_status", str(job_id), "--files", "done", check=True).stdout
    rows = [line.split() for line in listing.splitlines()[3:-1]]
    assert [int(r[0]) for r in rows] == list(range(count))
    assert {r[1] for r in rows} == {"DONE"}
    assert listing.splitlines()[-1] == f"{count} of {count} file(s)"
    q = stork.cli("stork_q", check=True).stdout
    assert row_of(q, job_id)[4:6] == [f"{count}/{count}", "0/0"]


def test_status_files_failed_shows_the_unreadable_file_and_its_error(
        stork: StorkServer, tmp_path: Path) -> None:
    # the server's sessions run as nobody: pytest's own directories are closed to it
    top = Path(tempfile.mkdtemp(prefix="stork-cli-unreadable-"))
    os.chmod(top, 0o755)
    src = top / "ds"
    make_tree(src, FILES, 1000)
    os.chmod(src / "f00013.dat", 0)
    with GridFtpServer(tmp_path / "gf", user="nobody") as server, removed_after(top):
        [job_id] = stork.submit(dataset_ad(server.url(src), tmp_path / "out",
                                           'max_retries = 1; arguments = "-cc 4"'))
        assert stork.wait_state(job_id, timeout_s=120)["state"] == "FAILED"

    q = stork.cli("stork_q", check=True).stdout
    assert row_of(q, job_id)[4] == f"{FILES - 1}/{FILES}+1F"
    result = stork.cli("stork_status", str(job_id), "-files", "FAILED")
    assert result.returncode == 1, result.stderr  # the job failed, as without -files
    lines = result.stdout.splitlines()
    [row] = [line for line in lines if "f00013.dat" in line]
    assert row.split()[:2] == ["13", "FAILED"]
    assert "error:" in row and "Permission denied" in row
    assert len(row.splitlines()) == 1
    assert lines[-1] == f"1 of {FILES} file(s)"
    every = stork.cli("stork_status", str(job_id), "-files").stdout.splitlines()
    assert sum(" DONE " in line for line in every) == FILES - 1
    bad = stork.cli("stork_status", str(job_id), "-files", "LOST")
    assert bad.returncode == 3 and "unknown file state" in bad.stderr


def test_submit_wait_without_a_terminal_prints_only_the_ends(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / f"cli-pipe-{tmp_path.name}"
    make_tree(src, FILES, 1000)
    make_file(tmp_path / "one.src", 1000)
    (tmp_path / "w.dap").write_text(dataset_ad(gridftp.url(src), tmp_path / "out")
                                    + single_ad(tmp_path))
    result = stork.cli("stork_submit", "--wait", "w.dap")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Request assigned id: 1", "Request assigned id: 2",
                                          "job 1: COMPLETED", "job 2: COMPLETED"]


def test_submit_wait_on_a_terminal_shows_a_progress_bar(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / f"cli-tty-{tmp_path.name}"
    make_tree(src, FILES, 1000)
    (tmp_path / "t.dap").write_text(dataset_ad(gridftp.url(src), tmp_path / "out"))
    code, out = run_on_a_terminal([str(BIN / "stork_submit"), "--wait", "t.dap"], stork)
    assert code == 0, out
    assert "Request assigned id: 1" in out
    assert f"{FILES}/{FILES} files" in out and "19.5/19.5 KiB" in out
    last = [line for line in out.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert last == "job 1: COMPLETED"


def run_on_a_terminal(argv: list[str], stork: StorkServer,
                      timeout_s: float = 60) -> tuple[int, str]:
    """Run a command with a pseudo-terminal (120 columns) as its stdout; its exit code and
    everything it wrote there."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=stork.env(),
                                cwd=stork.workdir)
    finally:
        os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal (it ended)
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
    return code, out.decode(errors="replace") + err
