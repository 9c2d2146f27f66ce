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

from tests.support import EosServer, GridFtpServer, StorkServer, make_file, md5
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
    assert f"cannot open /root/stork-out as {user.pw_name}: Permission denied" in \
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
    assert code == 403 and f"belongs to {first.pw_name}" in body["error"]
    code, body = as_user(second.pw_uid, server.socket, "GET", f"/v1/jobs/{job}",
                         gid=second.pw_gid)
    assert code == 403 and f"belongs to {first.pw_name}" in body["error"]
    code, body = as_user(first.pw_uid, server.socket, "GET", f"/v1/jobs/{job}",
                         gid=first.pw_gid)
    assert code == 200 and body["job"]["owner"] == first.pw_name
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


def test_estimate_endpoint_runs_as_the_caller(users: list[pwd.struct_passwd], server: StorkServer,
                                              gridftp: GridFtpServer, gridftp_root: Path,
                                              shared_dir: Path) -> None:
    """POST /v1/estimate on the daemon's socket: an ordinary user cannot have root's daemon
    read /etc/shadow and send it to a server of theirs; their own file can be estimated."""
    user = users[0]
    out = gridftp_root / "estimate-leak"
    out.mkdir(exist_ok=True)
    body = {"src_url": "file:///etc/shadow", "dest_url": gridftp.url(out / "s")}
    code, answer = as_user(user.pw_uid, server.socket, "POST", "/v1/estimate", body,
                           gid=user.pw_gid)
    assert code == 403, answer
    assert "file:///etc/shadow" in answer["error"]
    assert f"{user.pw_name} cannot read" in answer["error"]
    assert list(out.iterdir()) == []  # not a byte reached the destination server
    # the user's own readable file is sampled (as them), and the scratch files are gone
    mine = make_file(shared_dir / "mine.dat", 300_000, seed=5)
    os.chown(mine, user.pw_uid, user.pw_gid)
    mine.chmod(0o600)
    body = {"src_url": f"file://{mine}", "dest_url": gridftp.url(out / "m")}
    code, answer = as_user(user.pw_uid, server.socket, "POST", "/v1/estimate", body,
                           gid=user.pw_gid)
    assert code == 200 and answer["result"]["optimal_streams"] >= 1, answer
    assert list(out.iterdir()) == []
    # samples into a directory the caller may not write fail, and nothing lands there
    body = {"src_url": gridftp.url(_public(gridftp_root)),
            "dest_url": "file:///root/stork-estimate.dat"}
    code, answer = as_user(user.pw_uid, server.socket, "POST", "/v1/estimate", body,
                           gid=user.pw_gid)
    assert code >= 400 and "Permission denied" in answer["error"], answer
    assert not [p for p in Path("/root").iterdir() if p.name.startswith(".stork-sample")]
    # another user's file as x509proxy is refused: the proxy must be the caller's own
    code, answer = as_user(user.pw_uid, server.socket, "POST", "/v1/estimate",
                           {**body, "x509proxy": "/etc/shadow"}, gid=user.pw_gid)
    assert code == 403 and "x509proxy" in answer["error"], answer


def _public(root: Path) -> Path:
    path = root / "public-est.dat"
    if not path.exists():
        make_file(path, 300_000, seed=6)
    return path


def test_eos_server_needs_its_token_and_refuses_local_sources(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    out = gridftp_root / "eos-server-leak"
    out.mkdir(exist_ok=True)
    shadow = {"src_url": "file:///etc/shadow", "dest_url": gridftp.url(out / "s")}
    with EosServer(tmp_path / "eos") as eos:
        no_token = eos.call("POST", "/v1/estimate", token="", json=shadow)
        assert no_token.status_code == 403 and "EOS_API_TOKEN_FILE" in no_token.json()["error"]
        wrong = eos.call("POST", "/v1/estimate", token="x" * 30, json=shadow)
        assert wrong.status_code == 403
        local = eos.call("POST", "/v1/estimate", json=shadow)
        assert local.status_code == 403, local.text
        error = local.json()["error"]
        assert "file:///etc/shadow" in error and "EOS_ALLOW_LOCAL_SOURCES" in error
        assert list(out.iterdir()) == []
        # a remote source and destination are what eos_server is for
        src = _public(gridftp_root)
        ok = eos.call("POST", "/v1/estimate",
                      json={"src_url": gridftp.url(src), "dest_url": gridftp.url(out / "r")})
        assert ok.status_code == 200 and ok.json()["result"]["optimal_streams"] >= 1, ok.text
        assert list(out.iterdir()) == []


def test_eos_server_samples_as_its_sample_user(tmp_path: Path, gridftp: GridFtpServer,
                                               gridftp_root: Path) -> None:
    """Even where the operator allows local sources, eos_server started as root samples
    with EOS_SAMPLE_USER's rights (nobody), never its own."""
    if os.geteuid() != 0:
        pytest.skip("needs root: eos_server drops to EOS_SAMPLE_USER only when root")
    out = gridftp_root / "eos-sample-user"
    out.mkdir(exist_ok=True)
    with EosServer(tmp_path / "eos", {"EOS_ALLOW_LOCAL_SOURCES": "true"}) as eos:
        answer = eos.call("POST", "/v1/estimate", json={"src_url": "file:///etc/shadow",
                                                       "dest_url": gridftp.url(out / "s")})
        assert answer.status_code == 403, answer.text
        assert "nobody cannot read" in answer.json()["error"]
        assert list(out.iterdir()) == []


def test_a_dataset_never_looks_at_files_with_the_daemons_rights(
        users: list[pwd.struct_passwd], server: StorkServer, shared_dir: Path) -> None:
    """After a batch the daemon checks the destinations' sizes: as the job's owner. Here the
    owner's copy into root's private directory fails, and a file of the same size that root
    put there must not make the daemon count it done."""
    user = users[0]
    src = shared_dir / "src"
    src.mkdir()
    (src / "mine.dat").write_bytes(b"x" * 1000)
    os.chown(src / "mine.dat", user.pw_uid, user.pw_gid)
    private = Path(tempfile.mkdtemp(prefix="stork-root-only-"))  # 0700, root's
    try:
        (private / "mine.dat").write_bytes(b"y" * 1000)
        text = (f'[ dap_type = transfer; src_url = "file://{src}/"; '
                f'dest_url = "file://{private}/"; max_retries = 0 ]')
        code, body = as_user(user.pw_uid, server.socket, "POST", "/v1/jobs",
                             {"text": text, "filename": "u.dap", "iwd": "/tmp",
                              "datasets": {"1": {"rel": [["mine.dat", 1000]]}}},
                             gid=user.pw_gid)
        assert code == 201, body
        job = server.wait_state(int(body["ids"][0]), timeout_s=60)
        assert job["state"] == "FAILED" and job["files_done"] == 0, job
        assert "Permission denied" in job["last_error"]
        assert (private / "mine.dat").read_bytes() == b"y" * 1000
    finally:
        shutil.rmtree(private, ignore_errors=True)
