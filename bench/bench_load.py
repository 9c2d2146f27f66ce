"""Load: 1,000 concurrent clients for 60 s, then 100,000 queued jobs.

    .venv/bin/python bench/bench_load.py [--clients 1000] [--seconds 60] [--queued 100000]

Part 1: each client (a thread with its own connection) submits a one-ad job, asks for its
status, and again, until the time is up; every failed request is counted (the target is
none) and the latencies are reported. The jobs run through a trivial external module.
Part 2: a daemon with 100,000 queued jobs (one runs, the rest wait): its resident memory
(target under 500 MB) and how long `stork_q` takes to answer.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import BIN, StorkServer  # noqa: E402

QUICK = "#!/bin/sh\n: > \"${2#file://}\"\n"
FOREVER = "#!/bin/sh\nexec sleep 3600\n"


def module_dir(root: Path, body: str) -> Path:
    path = root / "modules"
    path.mkdir(parents=True, exist_ok=True)
    module = path / "stork.transfer.load-file"
    module.write_text(body)
    module.chmod(0o755)
    return path


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def clients(root: Path, count: int, seconds: float) -> dict[str, float]:
    server = StorkServer(root / "load", {"STORK_MODULE_DIR": str(module_dir(root, QUICK)),
                                         "STORK_MAX_NUM_JOBS": "4"}).start()
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count)

    def client(n: int) -> None:
        transport = httpx.HTTPTransport(uds=server.socket)
        mine: list[float] = []
        with httpx.Client(transport=transport, base_url="http://stork", timeout=120) as http:
            barrier.wait()  # the window opens when every client is ready, not before
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                ad = (f'[ dap_type = transfer; src_url = "load://client/{n}"; '
                      f'dest_url = "file://{root}/out/{n}-{len(mine)}" ]')
                for method, path, body in (("POST", "/v1/jobs", {"text": ad, "iwd": "/"}),
                                           ("GET", None, None)):
                    started = time.monotonic()
                    try:
                        if method == "POST":
                            response = http.post(path, json=body)
                            job = response.json().get("ids", [0])[0]
                        else:
                            response = http.get(f"/v1/jobs/{job}")
                        ok = response.status_code < 400
                        error = response.text[:200]
                    except Exception as exc:  # noqa: BLE001
                        ok, error = False, repr(exc)
                    mine.append(time.monotonic() - started)
                    if not ok:
                        with lock:
                            failures.append(error)
        with lock:
            latencies.extend(mine)

    (root / "out").mkdir(exist_ok=True)
    threads = [threading.Thread(target=client, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = server.proc is not None and server.proc.poll() is None
    memory = rss_mb(server.proc.pid) if alive and server.proc else 0.0
    server.stop()
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print(f"\n## {count} concurrent clients for {seconds:g} s (submit + status, one socket "
          "each)\n")
    print("| requests | failed | per second | p50 | p99 | max | daemon alive | daemon RSS |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    print(f"| {len(latencies)} | {len(failures)} | {len(latencies) / seconds:.0f} | "
          f"{p50:.0f} ms | {p99:.0f} ms | {latencies[-1] * 1000:.0f} ms | {alive} | "
          f"{memory:.0f} MB |")
    if failures:
        print(f"\nfirst failures: {failures[:3]}")
    return {"requests": len(latencies), "failed": len(failures), "alive": alive,
            "p50_ms": p50, "p99_ms": p99}


def queued(root: Path, count: int) -> dict[str, float]:
    server = StorkServer(root / "queued", {"STORK_MODULE_DIR": str(module_dir(root, FOREVER)),
                                           "STORK_MAX_NUM_JOBS": "1"}).start()
    assert server.proc is not None
    batch = 10_000
    started = time.monotonic()
    for first in range(0, count, batch):
        ads = "".join(f'[ dap_type = transfer; src_url = "load://q/{i}"; '
                      f'dest_url = "file:///tmp/stork-load-never/{i}" ]\n'
                      for i in range(first, min(count, first + batch)))
        response = server.api("POST", "/v1/jobs", json={"text": ads, "iwd": "/"})
        assert response.status_code == 201, response.text[:300]
    submit_s = time.monotonic() - started
    time.sleep(2)
    memory = rss_mb(server.proc.pid)
    started = time.monotonic()
    result = subprocess.run([str(BIN / "stork_q")], env=server.env(), capture_output=True,
                            text=True, timeout=600)
    q_s = time.monotonic() - started
    lines = len(result.stdout.splitlines())
    server.stop(timeout_s=10)
    print(f"\n## {count} queued jobs\n")
    print("| submit time (batches of 10,000) | daemon RSS | target | stork_q time | stork_q exit "
          "| lines |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    print(f"| {submit_s:.1f} s | {memory:.0f} MB | < 500 MB | {q_s:.1f} s | "
          f"{result.returncode} | {lines} |")
    return {"rss_mb": memory, "stork_q_exit": result.returncode, "lines": lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--queued", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stork-load-") as tmp:
        clients(Path(tmp), args.clients, args.seconds)
        queued(Path(tmp), args.queued)
    return 0


if __name__ == "__main__":
    sys.exit(main())
