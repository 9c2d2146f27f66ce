"""The API under many clients: long-poll waiters, and backpressure past the in-flight limit.

Real daemons over the real Unix socket. The 300 waiters are `stork_submit --wait` run
in-process on threads (300 interpreters would not fit two cores): each is the command's own
code path, with its own connection, long poll and exit code.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from stork.cli import submit as submit_cli
from stork.client import Client
from tests.support import BIN, StorkServer, wait_for

# A transfer module that holds every job until the gate file exists; URLs naming "bad" fail.
GATE_MODULE = """#!{python}
import os, sys, time
src, dest = sys.argv[1], sys.argv[2]
while not os.path.exists({gate!r}):
    time.sleep(0.05)
if "bad" in src:
    sys.stderr.write("550 no such file: " + src + "\\n")
    sys.exit(1)
open(dest[len("file://"):], "w").write("x")
"""


def _gate_server(tmp_path: Path, **knobs: str) -> tuple[StorkServer, Path]:
    modules = tmp_path / "modules"
    modules.mkdir()
    gate = tmp_path / "gate"
    module = modules / "stork.transfer.gate-file"
    module.write_text(GATE_MODULE.format(python=sys.executable, gate=str(gate)))
    module.chmod(0o755)
    server = StorkServer(tmp_path, {"STORK_MODULE_DIR": str(modules),
                                    "STORK_MAX_NUM_JOBS": "40", **knobs})
    return server, gate


def test_300_waiters_return_with_the_right_exit_codes(tmp_path: Path) -> None:
    server, gate = _gate_server(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    files = []
    for n in range(300):
        name = f"bad{n}" if n % 3 == 0 else f"ok{n}"
        path = tmp_path / f"{name}.dap"
        path.write_text(f'[ dap_type = transfer; max_retries = 0; src_url = "gate://h/{name}"; '
                        f'dest_url = "file://{out}/{name}" ]')
        files.append(path)
    codes: dict[str, int] = {}

    def one(path: Path) -> None:
        codes[path.stem] = submit_cli.main(["-c", str(server.config), "--wait", str(path)])

    with server, contextlib.redirect_stdout(io.StringIO()):  # the commands' "assigned id"s
        threads = [threading.Thread(target=one, args=(p,)) for p in files]
        for thread in threads:
            thread.start()
        # every command has submitted and is waiting on the server, none has ended
        wait_for(lambda: server.api("GET", "/v1/ping").json()["api"]["waiting"] == 300, 120,
                 what="300 long polls held by the server")
        assert not codes
        busy = server.api("GET", "/v1/ping").json()
        gate.touch()
        for thread in threads:
            thread.join(300)
        assert not any(t.is_alive() for t in threads)
    assert busy["api"]["refused"] == 0
    assert len(codes) == 300
    wrong = {name: code for name, code in codes.items()
             if code != (1 if name.startswith("bad") else 0)}
    assert wrong == {}
    assert len(list(out.iterdir())) == 200


def test_a_flood_past_the_inflight_limit_gets_503_and_commands_retry(tmp_path: Path) -> None:
    """STORK_API_MAX_INFLIGHT = 1: while a large submission is being worked on, other
    requests are refused at once with 503 and Retry-After; the commands wait and retry,
    say so on stderr, and succeed."""
    server = StorkServer(tmp_path, {"STORK_API_MAX_INFLIGHT": "1", "STORK_MAX_NUM_JOBS": "1",
                                    "STORK_DISPATCH_INTERVAL": "60"})
    big = "\n".join(f'[ dap_type = transfer; src_url = "ftp://127.0.0.1:1/f{n}"; '
                    f'dest_url = "file://{tmp_path}/d{n}" ]' for n in range(8000))
    with server:
        done = threading.Event()
        accepted: list[int] = []

        def submit_big() -> None:  # through the client, which retries a busy server too
            client = Client(server.socket, notice=lambda _message: None)
            try:
                accepted.append(len(client.submit(big, "big.dap", "/")))
            finally:
                client.close()
                done.set()

        refused: list[httpx.Response] = []
        thread = threading.Thread(target=submit_big)
        thread.start()
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline and not refused:
            response = server.api("GET", "/v1/ping")
            if response.status_code == 503:
                refused.append(response)
        assert refused, "no request was refused while the large submission was in flight"
        assert refused[0].headers["Retry-After"].isdigit()
        assert "STORK_API_MAX_INFLIGHT = 1" in refused[0].json()["error"]
        # a command meeting a busy server retries and succeeds
        commands = []
        thread.join(120)
        for _ in range(3):
            thread2 = threading.Thread(target=submit_big)
            thread2.start()
            wait_for(lambda: server.api("GET", "/v1/ping").status_code == 503, 30,
                     interval_s=0.01, what="the server to be busy again")
            commands.append(server.cli("stork_q", "-constraint", "false"))
            thread2.join(120)
    assert accepted == [8000] * 4
    assert all(c.returncode == 0 for c in commands), [c.stderr for c in commands]
    assert any("busy (503" in c.stderr and "retrying in" in c.stderr for c in commands)


def test_stork_status_wait_returns_when_the_job_ends(tmp_path: Path) -> None:
    server, gate = _gate_server(tmp_path)
    with server:
        [ok] = server.submit(f'[ dap_type = transfer; src_url = "gate://h/ok"; '
                             f'dest_url = "file://{tmp_path}/ok.out" ]')
        [bad] = server.submit('[ dap_type = transfer; max_retries = 0; src_url = "gate://h/bad"; '
                              f'dest_url = "file://{tmp_path}/bad.out" ]')
        waiting = subprocess.Popen([str(BIN / "stork_status"), "-wait", str(ok), str(bad)],
                                   env=server.env(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        wait_for(lambda: server.api("GET", "/v1/ping").json()["api"]["waiting"] == 1, 30,
                 what="stork_status -wait to hold a long poll")
        assert waiting.poll() is None  # still waiting: neither job can end before the gate
        gate.touch()
        out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 1, err  # one of them failed
    assert f"Job {ok}: COMPLETED" in out and f"Job {bad}: FAILED" in out
