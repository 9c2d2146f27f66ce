"""Faults in the middle of a transfer, each against the real GridFTP server: the server
killed mid-transfer, the destination directory missing, permission denied at the
destination, the destination full. Transient faults are retried with backoff and permanent
ones fail at once; either way the job carries the tool's own error and `failure_kind`.
(The unreachable server and the missing source are in test_transfers.py.) The last tests run
globus-url-copy itself against the server and check the class its judgement picks."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from stork.errors import (
    AccessDenied,
    BadUrl,
    CredentialError,
    NetworkError,
    NotFound,
    ServerBusy,
    TransferError,
)
from stork.transfer.base import TransferRequest
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.options import TransferOptions
from tests.support import (
    GRIDFTP_SERVER,
    GridFtpServer,
    StorkServer,
    free_port,
    kill_group,
    make_file,
    md5,
    missing_tools,
    wait_for,
)
from tests.test_security import server, shared_dir, submit_as  # noqa: F401 - pytest fixtures


def test_server_killed_mid_transfer_is_retried_and_the_file_arrives_whole(
        tmp_path: Path) -> None:
    root = tmp_path / "ftp"
    root.mkdir()
    src = make_file(root / "big.dat", 1 << 30, seed=4)
    dest = tmp_path / "big.out"
    gridftp = GridFtpServer(root).start()
    port = gridftp.port
    with StorkServer(tmp_path / "stork", {"STORK_RETRY_DELAY": "1"}) as stork:
        # -p 1 and a small block size keep loopback slow enough to be caught mid-way
        [job_id] = stork.submit(f'[ dap_type = transfer; max_retries = 10; '
                                f'arguments = "-p 1 -bs 4K"; src_url = "{gridftp.url(src)}"; '
                                f'dest_url = "file://{dest}" ]')
        # caught mid-way for certain: the server is frozen as soon as data arrives, then killed
        wait_for(lambda: dest.exists() and dest.stat().st_size > 0, 60, interval_s=0.002,
                 what="the transfer to move bytes")
        assert gridftp.proc is not None
        os.killpg(gridftp.proc.pid, signal.SIGSTOP)
        assert 0 < dest.stat().st_size < src.stat().st_size
        gridftp.stop()  # the server and the process serving this transfer die
        failed = wait_for(lambda: stork.job(job_id)["job"]["failures"] >= 1 and
                          stork.job(job_id)["job"], 60, what="the attempt to fail")
        assert failed["failure_kind"] == "transient", failed
        assert failed["last_error"]  # the tool's own words
        assert failed["state"] in ("IDLE", "RUNNING")  # retried, not failed
        gridftp = GridFtpServer(root, port=port).start()
        try:
            job = stork.wait_state(job_id, timeout_s=180)
        finally:
            gridftp.stop()
    assert job["state"] == "COMPLETED" and job["failures"] >= 1
    assert md5(dest) == md5(src)
    assert job["attempts"] >= 2 and job["attempts"] == job["failures"] + 1


def test_missing_destination_directory_fails_at_once(stork: StorkServer,
                                                     gridftp: GridFtpServer,
                                                     gridftp_root: Path,
                                                     tmp_path: Path) -> None:
    src = make_file(gridftp_root / "small.dat", 100_000)
    ids = stork.submit(
        f'[ dap_type = transfer; max_retries = 5; src_url = "{gridftp.url(src)}"; '
        f'dest_url = "file://{tmp_path}/no/such/dir/x.dat" ]\n'
        f'[ dap_type = transfer; max_retries = 5; src_url = "file://{src}"; '
        f'dest_url = "{gridftp.url(gridftp_root / "no-such-dir" / "x.dat")}" ]')
    for job_id in ids:
        job = stork.wait_state(job_id)
        assert job["state"] == "FAILED" and job["attempts"] == 1, job
        assert job["failure_kind"] == "permanent"
        assert "No such file or directory" in job["last_error"] or \
            "PATH_NOT_FOUND" in job["last_error"], job["last_error"]


def test_permission_denied_at_the_destination_fails_at_once(
        users: list[pwd.struct_passwd], server: StorkServer,  # noqa: F811 - the fixture, by name
        gridftp: GridFtpServer, gridftp_root: Path, shared_dir: Path) -> None:  # noqa: F811 - fixture
    src = make_file(gridftp_root / "pd.dat", 100_000)
    locked = shared_dir / "locked"
    locked.mkdir(mode=0o755)  # root's; the job's owner may not write here
    job_id = submit_as(users[0], server, f'[ dap_type = transfer; max_retries = 5; '
                       f'src_url = "{gridftp.url(src)}"; dest_url = "file://{locked}/x.dat" ]')
    job = server.wait_state(job_id)
    assert job["state"] == "FAILED" and job["attempts"] == 1
    assert job["failure_kind"] == "permanent" and "Permission denied" in job["last_error"]
    assert not (locked / "x.dat").exists()


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit (util-linux) is missing")
def test_destination_full_fails_at_once_and_leaves_no_partial_file(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / "8M.dat", 8 << 20)
    dest = tmp_path / "full" / "x.dat"
    dest.parent.mkdir()
    # the daemon and so its modules may write files of at most 4 MiB: "File too large"
    with StorkServer(tmp_path / "stork", prefix=["prlimit", f"--fsize={4 << 20}"]) as stork:
        [job_id] = stork.submit(f'[ dap_type = transfer; max_retries = 5; '
                                f'src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]')
        job = stork.wait_state(job_id)
    assert job["state"] == "FAILED" and job["attempts"] == 1, job
    assert job["failure_kind"] == "permanent"
    assert "killed by SIGXFSZ: file size limit exceeded" in job["last_error"], job["last_error"]
    assert not dest.exists()  # the partial file is gone


def _judged(src_url: str, dest_url: str, *prefix: str) -> TransferError:
    """Run globus-url-copy as the daemon would, and judge its failure."""
    module = GridFtpModule()
    argv = [*prefix, *module.command(TransferRequest(src_url, dest_url, TransferOptions(), 1))]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    code = result.returncode if result.returncode >= 0 else 128 - result.returncode
    assert code != 0, result
    return module.judge(code, result.stderr.strip())


def test_globus_url_copy_failures_are_judged_to_their_class(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / "judged.dat", 100_000)
    (gridftp_root / "a-directory").mkdir(exist_ok=True)
    cases = [
        (gridftp.url(gridftp_root / "nope.dat"), f"file://{tmp_path}/x.dat", NotFound),
        (f"file://{src}", gridftp.url(gridftp_root / "no-such-dir" / "x.dat"), NotFound),
        (gridftp.url(src), f"file://{tmp_path}/no/such/dir/x.dat", NotFound),
        (gridftp.url(src), f"file://{gridftp_root}/a-directory", BadUrl),
        (f"ftp://127.0.0.1:{free_port()}/x", f"file://{tmp_path}/x.dat", NetworkError),
        (gridftp.url(src).replace("ftp://", "gsiftp://", 1), f"file://{tmp_path}/x.dat",
         CredentialError),
    ]
    for src_url, dest_url, expected in cases:
        failure = _judged(src_url, dest_url)
        assert type(failure) is expected, (src_url, dest_url, str(failure))
        assert failure.retryable is expected.retryable and not failure.tool_killed


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run globus-url-copy as nobody")
def test_globus_url_copy_permission_denied_is_access_denied(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / "judged-pd.dat", 1000)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    failure = _judged(gridftp.url(src), f"file://{locked}/x.dat",
                      "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    assert type(failure) is AccessDenied and "Permission denied" in str(failure)


@pytest.mark.skipif(bool(missing_tools()), reason="GridFTP tools not installed; run `make setup`")
def test_a_server_at_its_connection_limit_is_busy(gridftp_root: Path, tmp_path: Path) -> None:
    """globus-gridftp-server -connections-max 1 with one session held open answers 421."""
    port = free_port()
    busy = subprocess.Popen(
        [GRIDFTP_SERVER, "-aa", "-anonymous-user", "root", "-allow-root", "-p", str(port),
         "-control-interface", "127.0.0.1", "-data-interface", "127.0.0.1",
         "-connections-max", "1", "-d", "ERROR", "-l", str(tmp_path / "gridftp.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        held = wait_for(lambda: _connect(port), 15, what="the GridFTP server to listen")
        with held:
            assert held.recv(200).startswith(b"220")  # the one session the server may have
            src = make_file(gridftp_root / "busy.dat", 1000)
            failure = _judged(f"ftp://127.0.0.1:{port}{src}", f"file://{tmp_path}/x.dat")
        assert type(failure) is ServerBusy and failure.retryable
        assert failure.kind.value == "transient" and "421" in str(failure)
    finally:
        kill_group(busy)


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
