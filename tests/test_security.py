"""Users in their own lane: with the daemon running as root, modules, samples, output files
and user logs act with the job owner's rights. Real unprivileged users are created for this
(and removed afterwards); the transfers use the real globus-url-copy (in /usr/bin, so any
user can run it) against the real GridFTP server."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import GridFtpServer, StorkServer, make_file, md5
from tests.test_api import as_user


@pytest.fixture
def server(tmp_path: Path) -> Iterator[StorkServer]:
    sock_dir = tempfile.mkdtemp(prefix="stork-sock-")
    os.chmod(sock_dir, 0o755)
    with StorkServer(tmp_path, {"STORK_SOCKET": f"{sock_dir}/stork.sock"}) as running:
        yield running
    shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory outside pytest's private tree that every user can reach."""
    path = Path(tempfile.mkdtemp(prefix="stork-users-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submit_as(user: pwd.struct_passwd, server: StorkServer, text: str) -> int:
    code, body = as_user(user.pw_uid, server.socket, "POST", "/v1/jobs",
                         {"text": text, "filename": "u.dap", "iwd": "/tmp"},
                         gid=user.pw_gid)
    assert code == 201, body
    return int(body["ids"][0])


def test_modules_run_as_the_job_owner(users: list[pwd.struct_passwd], server: StorkServer,
                                      gridftp: GridFtpServer, gridftp_root: Path,
                                      shared_dir: Path) -> None:
    user = users[0]
    mine = shared_dir / "mine"
    mine.mkdir()
    os.chown(mine, user.pw_uid, user.pw_gid)
    src = make_file(gridftp_root / "public.dat", 200_000, seed=3)
    out = gridftp_root / "leak"
    out.mkdir(exist_ok=True)
    # an ordinary user cannot read /etc/shadow through Stork ...
    shadow = submit_as(user, server, f'[ dap_type = transfer; max_retries = 0; '
                       f'src_url = "file:///etc/shadow"; dest_url = "{gridftp.url(out / "s")}" ]')
    # ... nor write where they may not, nor have the daemon write their output there
    rootdir = submit_as(user, server, f'[ dap_type = transfer; max_retries = 0; '
                        f'src_url = "{gridftp.url(src)}"; dest_url = "file:///root/stork-x" ]')
    output = submit_as(user, server, f'[ dap_type = transfer; max_retries = 0; '
                       f'output = "/root/stork-out"; src_url = "{gridftp.url(src)}"; '
                       f'dest_url = "file://{mine}/o.dat" ]')
    # but their own transfer works, and the file is theirs
    ok = submit_as(user, server, f'[ dap_type = transfer; log = "{mine}/job.log"; '
                   f'src_url = "{gridftp.url(src)}"; dest_url = "file://{mine}/ok.dat" ]')
    # root's job reading /etc/shadow works
    [root_job] = server.submit(f'[ dap_type = transfer; src_url = "file:///etc/shadow"; '
                               f'dest_url = "{gridftp.url(out / "root-copy")}" ]')
    states = {j: server.wait_state(j, timeout_s=60) for j in (shadow, rootdir, output, ok,
                                                              root_job)}
    assert states[shadow]["state"] == "FAILED"
    assert "Permission denied" in states[shadow]["last_error"]
    assert not (out / "s").exists()
    assert states[rootdir]["state"] == "FAILED" and not Path("/root/stork-x").exists()
    assert states[output]["state"] == "FAILED"
    assert "cannot open /root/stork-out as storkt1: Permission denied" in \
        states[output]["last_error"]
    assert not Path("/root/stork-out").exists()
    assert states[ok]["state"] == "COMPLETED", states[ok]
    assert md5(mine / "ok.dat") == md5(src)
    assert (mine / "ok.dat").stat().st_uid == user.pw_uid
    assert (mine / "job.log").stat().st_uid == user.pw_uid  # the user log too
    assert states[root_job]["state"] == "COMPLETED"
    assert (out / "root-copy").read_bytes() == Path("/etc/shadow").read_bytes()
    (out / "root-copy").unlink()


def test_one_user_cannot_touch_anothers_job(users: list[pwd.struct_passwd],
                                            server: StorkServer) -> None:
    first, second = users
    never = ('[ dap_type = transfer; src_url = "ftp://127.0.0.1:1/x"; max_retries = 99; '
             'dest_url = "file:///tmp/stork-never.dst" ]')
    job = submit_as(first, server, never)
    code, body = as_user(second.pw_uid, server.socket, "DELETE", f"/v1/jobs/{job}",
                         gid=second.pw_gid)
    assert code == 403 and "belongs to storkt1" in body["error"]
    code, body = as_user(second.pw_uid, server.socket, "GET", f"/v1/jobs/{job}",
                         gid=second.pw_gid)
    assert code == 403 and "belongs to storkt1" in body["error"]
    code, body = as_user(first.pw_uid, server.socket, "GET", f"/v1/jobs/{job}",
                         gid=first.pw_gid)
    assert code == 200 and body["job"]["owner"] == "storkt1"
    code, body = as_user(first.pw_uid, server.socket, "DELETE", f"/v1/jobs/{job}",
                         gid=first.pw_gid)
    assert code == 200 and body["job"]["state"] == "REMOVED"


def test_eos_samples_run_as_the_job_owner(users: list[pwd.struct_passwd], server: StorkServer,
                                          gridftp: GridFtpServer, gridftp_root: Path) -> None:
    out = gridftp_root / "eos-leak"
    out.mkdir(exist_ok=True)
    ad = (f'[ dap_type = estimation; src_url = "file:///etc/shadow"; '
          f'dest_url = "{gridftp.url(out / "s")}" ]')
    job = server.wait_state(submit_as(users[0], server, ad), timeout_s=60)
    assert job["state"] == "FAILED" and "Permission denied" in job["last_error"], job
    [root_job] = server.submit(ad)
    assert server.wait_state(root_job, timeout_s=60)["state"] == "COMPLETED"
    assert list(out.iterdir()) == []  # samples are scratch files, removed either way
