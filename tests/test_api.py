"""The HTTP/JSON API over the real Unix socket (and TCP with a token)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import htcondor2
import httpx
import pytest

from stork.config import OPTIMIZER_NAMES
from tests.support import StorkServer, free_port, install_slow_module, make_file, wait_for

NOBODY = 65534


def ad(tmp: Path, name: str = "a", extra: str = "") -> str:
    return (f'[ dap_type = transfer; src_url = "file://{tmp}/{name}.src"; '
            f'dest_url = "file://{tmp}/{name}.dst"; {extra} ]')


def as_user(uid: int, socket_path: str, method: str, path: str,
            body: dict[str, Any] | None = None,
            gid: int | None = None) -> tuple[int, dict[str, Any]]:
    """Call the API from a forked child that has dropped to `uid`: a real other user."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(uid if gid is None else gid)
            os.setuid(uid)
            transport = httpx.HTTPTransport(uds=socket_path)
            with httpx.Client(transport=transport, base_url="http://stork") as client:
                response = client.request(method, path, json=body)
            os.write(write_fd, json.dumps([response.status_code, response.json()]).encode())
        except BaseException as exc:  # noqa: BLE001 - the forked child reports it to the parent
            os.write(write_fd, json.dumps([0, {"error": repr(exc)}]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 65536):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    status, payload = json.loads(data)
    return status, payload


@pytest.fixture
def shared_socket_server(tmp_path: Path) -> Iterator[StorkServer]:
    """A server whose socket lives in a directory every user can reach."""
    sock_dir = tempfile.mkdtemp(prefix="stork-sock-")
    os.chmod(sock_dir, 0o755)
    server = StorkServer(tmp_path, {"STORK_SOCKET": f"{sock_dir}/stork.sock",
                                    "STORK_RETRY_DELAY": "60"})
    server.start()
    yield server
    server.stop()


def test_ping_and_submit_and_list(stork: StorkServer, tmp_path: Path) -> None:
    ping = stork.api("GET", "/v1/ping").json()
    assert ping["server"] == "stork_server" and ping["caller"] == "root"
    r = stork.api("POST", "/v1/jobs", json={"text": ad(tmp_path) + ad(tmp_path, "b", "x = 1"),
                                            "filename": "two.dap", "iwd": str(tmp_path)})
    assert r.status_code == 201
    ids = r.json()["ids"]
    assert len(ids) == 2
    jobs = stork.api("GET", "/v1/jobs").json()["jobs"]
    assert [j["id"] for j in jobs] == ids and jobs[0]["owner"] == "root"
    only = stork.api("GET", "/v1/jobs", params={"constraint": "x == 1", "long": "1"}).json()["jobs"]
    assert [j["id"] for j in only] == [ids[1]] and "x = 1" in only[0]["ad"]
    status = stork.api("GET", f"/v1/jobs/{ids[0]}").json()
    assert status["events"][0]["kind"] == "submit" and status["job"]["id"] == ids[0]


@pytest.mark.parametrize("method, path, body, code, fragment", [
    ("POST", "/v1/jobs", b"{not json", 400, "not valid JSON"),
    ("POST", "/v1/jobs", b"[1, 2]", 400, "JSON object"),
    ("POST", "/v1/jobs", b'{"text": 5}', 400, "'text' must be"),
    ("GET", "/v1/jobs/999", None, 404, "no job with id 999"),
    ("DELETE", "/v1/jobs/999", None, 404, "no job with id 999"),
    ("GET", "/v1/nothing", None, 400, "no endpoint GET /v1/nothing"),
    ("POST", "/v1/jobs/1", None, 400, "no endpoint POST /v1/jobs/1"),
    ("GET", "/v1/jobs?constraint=a%20%3E", None, 400, "not a valid ClassAd expression"),
    ("GET", "/v1/jobs?state=SLEEPING", None, 400, "unknown state"),
])
def test_bad_requests_get_clear_errors(stork: StorkServer, method: str, path: str,
                                       body: bytes | None, code: int, fragment: str) -> None:
    r = stork.api(method, path, content=body)
    assert r.status_code == code and fragment in r.json()["error"]
    assert stork.api("GET", "/v1/ping").status_code == 200  # and the server is still fine


def test_an_invalid_ad_queues_nothing_from_its_file(stork: StorkServer, tmp_path: Path) -> None:
    text = ad(tmp_path) + "\n" + ad(tmp_path, "b", "optimization = 3")
    r = stork.api("POST", "/v1/jobs", json={"text": text, "filename": "mixed.dap",
                                            "iwd": str(tmp_path)})
    assert r.status_code == 400
    assert r.json()["problems"] == [(
        "mixed.dap:2: ad 2: attribute 'optimization': must be \"YES\" or \"NO\", or name an "
        f"optimizer of datasets ({', '.join(OPTIMIZER_NAMES)}); got 3")]
    assert stork.api("GET", "/v1/jobs").json()["jobs"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second, unprivileged user "
                                               "(uid 65534) against the same daemon")
def test_owner_comes_from_peer_credentials_and_rm_is_guarded(
        shared_socket_server: StorkServer, tmp_path: Path) -> None:
    server = shared_socket_server
    sock = server.socket
    # jobs that keep retrying (nothing listens on port 1), so they stay removable
    never = ('[ dap_type = transfer; src_url = "ftp://127.0.0.1:1/x"; max_retries = 99; '
             'dest_url = "file:///tmp/stork-never.dst" ]')
    # root's job cannot be removed by nobody
    [root_job] = server.submit(never)
    code, body = as_user(NOBODY, sock, "DELETE", f"/v1/jobs/{root_job}")
    assert code == 403 and "belongs to root" in body["error"]
    assert server.job(root_job)["job"]["state"] != "REMOVED"
    # nobody's own job is recorded with its uid, and root may remove it
    code, body = as_user(NOBODY, sock, "POST", "/v1/jobs",
                         {"text": never, "filename": "n.dap", "iwd": "/tmp"})
    assert code == 201, body
    [job_id] = body["ids"]
    job = server.job(job_id)["job"]
    assert (job["owner_uid"], job["owner"]) == (NOBODY, "nobody")
    r = server.api("DELETE", f"/v1/jobs/{job_id}")
    assert r.status_code == 200 and r.json()["job"]["state"] == "REMOVED"
    assert server.api("DELETE", f"/v1/jobs/{job_id}").status_code == 400  # already removed


def test_rm_of_a_running_job_stops_it_and_logs_an_abort(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.2, chunk=1024)
    make_file(tmp_path / "a.src", 512 * 1024)
    server = StorkServer(tmp_path, {"STORK_MODULE_DIR": str(modules)}).start()
    try:
        [job_id] = server.submit(ad(tmp_path, "a", f'log = "{tmp_path}/rm.log"'))
        wait_for(lambda: server.job(job_id)["job"]["bytes_done"] > 0, 20, what="transfer")
        assert server.cli("stork_rm", str(job_id), check=True).stdout.strip() == \
            f"Job {job_id} marked for removal"
        job = server.wait_state(job_id, ("REMOVED",))
        assert job["state"] == "REMOVED"
        events = list(htcondor2.JobEventLog(str(tmp_path / "rm.log")).events(stop_after=0))
        assert [int(e.type) for e in events] == [0, 1, 9]
        assert "removed by root" in events[-1]["Reason"]
        time_left = 3.0
        wait_for(lambda: not (tmp_path / "a.dst").exists(), time_left, what="partial file removal")
    finally:
        server.stop()


def test_tcp_api_needs_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-0123456789\n")
    token_file.chmod(0o600)
    port = free_port()
    server = StorkServer(tmp_path, {"STORK_API_ADDRESS": f"127.0.0.1:{port}",
                                    "STORK_API_TOKEN_FILE": str(token_file)}).start()
    try:
        base = f"http://127.0.0.1:{port}"
        r = httpx.get(f"{base}/v1/ping")
        assert r.status_code == 403 and "STORK_API_TOKEN_FILE" in r.json()["error"]
        r = httpx.get(f"{base}/v1/ping", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 403
        r = httpx.get(f"{base}/v1/ping",
                      headers={"Authorization": "Bearer s3cret-token-0123456789"})
        assert r.status_code == 200 and r.json()["caller"] == "remote"
        q = server.cli("stork_q", "-name", f"127.0.0.1:{port}")
        assert q.returncode == 0 and "0 job(s)" in q.stdout
    finally:
        server.stop()
    # without a token file the TCP API does not start at all
    bad = StorkServer(tmp_path / "b", {"STORK_API_ADDRESS": f"127.0.0.1:{port}"})
    result = bad.cli("stork_server", "-f")
    assert result.returncode == 3 and "STORK_API_TOKEN_FILE" in result.stderr


def test_many_clients_at_once(stork: StorkServer, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        r = stork.api("POST", "/v1/jobs", json={"text": ad(tmp_path, f"c{i}"), "filename": "c.dap",
                                                "iwd": "/"})
        return r.status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(one, range(64)))
    assert codes == [201] * 64
    ids = [j["id"] for j in stork.api("GET", "/v1/jobs").json()["jobs"]]
    assert sorted(ids) == list(range(1, 65))


def test_unix_socket_speaks_plain_http(stork: StorkServer) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(stork.socket)
        s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: stork\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and b'"server": "stork_server"' in data


def test_oversized_submissions_are_refused_naming_the_limit(tmp_path: Path) -> None:
    ad = '[ dap_type = transfer; src_url = "file:///tmp/a"; dest_url = "file:///tmp/b"; ]\n'
    with StorkServer(tmp_path, {"STORK_MAX_SUBMIT_BYTES": "4K",
                                "STORK_MAX_ADS_PER_SUBMIT": "3"}) as server:
        too_many = server.api("POST", "/v1/jobs", json={"text": ad * 4, "filename": "many.dap",
                                                        "iwd": "/"})
        assert too_many.status_code == 400
        assert "4 ads is more than the limit STORK_MAX_ADS_PER_SUBMIT = 3" in too_many.text
        assert "many.dap:" in too_many.text
        big = ad[:-3] + " pad = \"" + "x" * 5000 + "\"; ]\n"
        too_big = server.api("POST", "/v1/jobs", json={"text": big, "filename": "big.dap",
                                                       "iwd": "/"})
        assert too_big.status_code == 400
        assert "STORK_MAX_SUBMIT_BYTES = 4096" in too_big.text and "big.dap" in too_big.text
        # a body far past the limit is refused from its Content-Length, before it is read
        huge = server.api("POST", "/v1/jobs", content=b"{" + b" " * 200_000 + b"}",
                          headers={"Content-Type": "application/json"})
        assert huge.status_code == 400 and "STORK_MAX_SUBMIT_BYTES = 4096" in huge.text
        (tmp_path / "many.dap").write_text(ad * 4)
        cli = server.cli("stork_submit", "many.dap")
        assert cli.returncode != 0 and "STORK_MAX_ADS_PER_SUBMIT = 3" in cli.stderr
        assert server.api("GET", "/v1/jobs").json()["jobs"] == []  # nothing queued
        ok = server.api("POST", "/v1/jobs", json={"text": ad * 3, "filename": "ok.dap",
                                                  "iwd": "/"})
        assert ok.status_code == 201 and len(ok.json()["ids"]) == 3


def test_defaults_refuse_a_50_mb_ad_and_100000_ads(stork: StorkServer, tmp_path: Path) -> None:
    fifty = tmp_path / "fifty.dap"
    fifty.write_text('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
                     f'pad = "{"x" * (50 << 20)}"; ]')
    result = stork.cli("stork_submit", str(fifty))
    assert result.returncode != 0 and "STORK_MAX_SUBMIT_BYTES = 16777216" in result.stderr
    raw = stork.api("POST", "/v1/jobs", json={"text": fifty.read_text(), "iwd": "/"})
    assert raw.status_code == 400 and "STORK_MAX_SUBMIT_BYTES" in raw.text
    many = tmp_path / "many.dap"
    many.write_text('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b" ]\n'
                    * 100_000)
    result = stork.cli("stork_submit", str(many))
    assert result.returncode != 0
    assert "100000 ads is more than the limit STORK_MAX_ADS_PER_SUBMIT = 10000" in result.stderr
    assert stork.api("GET", "/v1/jobs").json()["jobs"] == []


def test_listing_by_columns_gives_rows_of_the_same_fields(stork: StorkServer,
                                                           tmp_path: Path) -> None:
    text = "\n".join(ad(tmp_path, f"c{n}", 'src_url = "ftp://127.0.0.1:1/x"') for n in range(3))
    r = stork.api("POST", "/v1/jobs", json={"text": text, "iwd": str(tmp_path)})
    assert r.status_code == 201
    full = stork.api("GET", "/v1/jobs").json()["jobs"]
    asked = ["state", "rate_mbps", "id", "src_url", "dest_url", "wait_reason"]
    answer = stork.api("GET", "/v1/jobs", params={"columns": ",".join(asked)}).json()
    assert sorted(answer["columns"]) == sorted(asked)  # in the order the rows carry them
    rows = [dict(zip(answer["columns"], row, strict=True)) for row in answer["rows"]]
    assert [(r["id"], r["src_url"], r["dest_url"]) for r in rows] == [
        (j["id"], j["src_url"], j["dest_url"]) for j in full]
    assert all(r["state"] in {"IDLE", "RUNNING", "FAILED", "COMPLETED"} for r in rows)
    assert all(isinstance(r["rate_mbps"], float) for r in rows)
    bad = stork.api("GET", "/v1/jobs", params={"columns": "id,password"})
    assert bad.status_code == 400 and "unknown column(s) password" in bad.json()["error"]
