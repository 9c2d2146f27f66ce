"""Core benchmarks (not tests): submission rate, stork_q with a full queue, dispatch overhead.

    .venv/bin/python bench/bench_core.py [--jobs 10000]

Runs real stork_server processes on scratch directories and prints Markdown tables with the
targets beside the figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import BIN, StorkServer, wait_for

SLEEPER = "#!/bin/sh\nexec sleep 3600\n"
STAMPER = ("#!/bin/sh\necho start $(date +%s.%N) >> {out}\n: > \"${{2#file://}}\"\n"
           "echo end $(date +%s.%N) >> {out}\n")


def module(dirpath: Path, pair: str, text: str) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / f"stork.transfer.{pair}"
    path.write_text(text)
    path.chmod(0o755)


def ad(i: int) -> str:
    return (f'[ dap_type = transfer; src_url = "bench://h/src{i}"; '
            f'dest_url = "file:///tmp/stork-bench/dst{i}"; run = {i} ]\n')


class _UnixHTTPConnection(http.client.HTTPConnection):
    """The standard library's HTTP client on a Unix socket: the lightest possible client."""

    def __init__(self, path: str) -> None:
        super().__init__("stork", timeout=120)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def submit_rate(server: StorkServer, jobs: int, per_request: int, threads: int,
                light: bool = False) -> float:
    requests = [("".join(ad(i) for i in range(start, min(start + per_request, jobs))))
                for start in range(0, jobs, per_request)]
    local = threading.local()

    def send_light(text: str) -> int:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = _UnixHTTPConnection(server.socket)
        body = json.dumps({"text": text, "filename": "b.dap", "iwd": "/tmp"})
        conn.request("POST", "/v1/jobs", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = json.loads(response.read())
        assert response.status == 201, data
        return len(data["ids"])

    def send(text: str) -> int:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(transport=httpx.HTTPTransport(uds=server.socket),
                                                 base_url="http://stork", timeout=120)
        r = client.post("/v1/jobs", json={"text": text, "filename": "b.dap", "iwd": "/tmp"})
        assert r.status_code == 201, r.text
        return len(r.json()["ids"])

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        done = sum(pool.map(send_light if light else send, requests))
    elapsed = time.perf_counter() - start
    assert done == jobs
    return jobs / elapsed


def timed(argv: list[str], server: StorkServer, repeat: int = 5) -> tuple[float, str]:
    times = []
    out = ""
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(argv, env=server.env(), capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
        out = result.stdout
    return statistics.median(times), out


def queue_benchmarks(work: Path, jobs: int) -> None:
    modules = work / "modules"
    module(modules, "bench-file", SLEEPER)
    server = StorkServer(work / "q", {"STORK_MODULE_DIR": str(modules), "STORK_MAX_NUM_JOBS": "1",
                                      "STORK_DISPATCH_INTERVAL": "1"}).start()
    try:
        one = submit_rate(server, jobs, 1, 8)
        q_one, q_out = timed([str(BIN / "stork_q")], server)
        assert f"{jobs} job(s)" in q_out
        light = submit_rate(server, jobs, 1, 8, light=True)
        batched = submit_rate(server, jobs, 100, 4)
        total = 3 * jobs
        q_time, q_out = timed([str(BIN / "stork_q")], server)
        c_time, _ = timed([str(BIN / "stork_q"), "-constraint", "run < 100"], server)
        l_time, _ = timed([str(BIN / "stork_q"), "-l"], server, repeat=3)
        h_time, _ = timed([str(BIN / "stork_q"), "--help"], server)
        client = httpx.Client(transport=httpx.HTTPTransport(uds=server.socket),
                              base_url="http://stork", timeout=120)
        start = time.perf_counter()
        listed = len(client.get("/v1/jobs").json()["jobs"])
        api_time = time.perf_counter() - start
        assert listed == total and f"{total} job(s)" in q_out
        print(f"\n## Submission and listing ({jobs:,} jobs per submission test; clients and "
              "server share the machine's cores)\n")
        print("| measurement | figure | target |")
        print("| --- | ---: | --- |")
        print(f"| submissions/s, one ad per request, 8 threads, httpx client (as stork_submit) "
              f"| {one:,.0f} | >= 500/s |")
        print(f"| submissions/s, one ad per request, 8 threads, http.client (lighter client) "
              f"| {light:,.0f} | >= 500/s |")
        print(f"| submissions/s, 100 ads per request, 4 client threads "
              f"| {batched:,.0f} | >= 500/s |")
        print(f"| `stork_q` with {jobs:,} queued jobs (median of 5, whole command) "
              f"| {q_one:.2f} s | < 1 s |")
        print(f"| `stork_q` with {total:,} queued jobs (median of 5, whole command) "
              f"| {q_time:.2f} s | - |")
        print(f"| `stork_q -constraint 'run < 100'` with {total:,} jobs | {c_time:.2f} s | - |")
        print(f"| `stork_q -l` with {total:,} jobs (median of 3) | {l_time:.2f} s | - |")
        print(f"| GET /v1/jobs alone ({total:,} jobs) | {api_time:.2f} s | - |")
        print(f"| `stork_q --help` (interpreter start-up and imports) | {h_time:.2f} s | - |")
    finally:
        server.stop()


def dispatch_overhead(work: Path, count: int = 60) -> None:
    modules = work / "modules2"
    stamps = work / "stamps.txt"
    module(modules, "bench-file", STAMPER.format(out=stamps))
    server = StorkServer(work / "d", {"STORK_MODULE_DIR": str(modules), "STORK_MAX_NUM_JOBS": "1",
                                      "STORK_DISPATCH_INTERVAL": "1"}).start()
    try:
        r = server.api("POST", "/v1/jobs", json={"text": "".join(ad(i) for i in range(count)),
                                                 "filename": "d.dap", "iwd": "/tmp"})
        ids = r.json()["ids"]
        wait_for(lambda: server.job(ids[-1])["job"]["state"] in ("COMPLETED", "FAILED"), 120,
                 what="dispatch benchmark")
        states = {server.job(i)["job"]["state"] for i in ids}
        assert states == {"COMPLETED"}, states
    finally:
        server.stop()
    lines = [line.split() for line in stamps.read_text().splitlines()]
    starts = [float(t) for kind, t in lines if kind == "start"]
    ends = [float(t) for kind, t in lines if kind == "end"]
    gaps_ms = sorted((starts[i + 1] - ends[i]) * 1000 for i in range(len(ends) - 1))
    print(f"\n## Dispatch overhead (STORK_MAX_NUM_JOBS = 1, {count} jobs, "
          "module = /bin/sh script)\n")
    print("From one module's exit to the next module's first instruction: the attempt is judged")
    print("(destination checked, COMPLETED written with its event), the slot freed, the next job")
    print("claimed in a transaction and its process started.\n")
    print("| statistic | figure | target |")
    print("| --- | ---: | --- |")
    print(f"| median | {statistics.median(gaps_ms):.1f} ms | < 50 ms |")
    print(f"| 95th percentile | {gaps_ms[int(len(gaps_ms) * 0.95)]:.1f} ms | - |")
    print(f"| max | {gaps_ms[-1]:.1f} ms | - |")


def main() -> int:
    Path("/tmp/stork-bench").mkdir(exist_ok=True)
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=10_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="stork-bench-") as tmp:
        work = Path(tmp)
        queue_benchmarks(work, args.jobs)
        dispatch_overhead(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
