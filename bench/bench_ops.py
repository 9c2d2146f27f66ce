"""What the operator's view costs the dispatcher (not a test).

    .venv/bin/python bench/bench_ops.py [--jobs 400] [--rounds 2]

The core benchmark's dispatch overhead (bench_core.py: from one module's exit to the next
module's first instruction, STORK_MAX_NUM_JOBS = 1, a /bin/sh module) measured on a real
stork_server with its TCP API, three ways, in alternating rounds:

- alone: nobody looks;
- watched: a scraper asks GET /metrics every 5 s and one status page (headless Chromium)
  refreshes every 2 s (its default);
- watched, no browser: the same requests, the page's GET /v1/overview made by a plain HTTP
  client (the daemon's side alone: on this 2-core machine the browser's own rendering
  competes with the daemon for the CPU, where an operator's browser runs elsewhere);
- 10x: the scraper every 0.5 s and the page every 0.5 s.

Also the daemon's CPU seconds per job (utime + stime from /proc) and the latency of the
scrapes. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import STAMPER, ad, module
from tests.browser import chromium, missing_browser
from tests.support import StorkServer, free_port, wait_for

# mode -> (seconds between scrapes, between page refreshes, the page in a real browser)
MODES: dict[str, tuple[float | None, float | None, bool]] = {
    "alone": (None, None, False), "watched": (5.0, 2.0, True),
    "watched, no browser": (5.0, 2.0, False), "10x": (0.5, 0.5, True)}


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    import os

    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Scraper(threading.Thread):
    def __init__(self, url: str, token: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.every_s = url, token, every_s
        self.latencies_ms: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {self.token}"}, timeout=30) as c:
            while not self.stop.is_set():
                began = time.perf_counter()
                answer = c.get(self.url)
                answer.raise_for_status()
                self.latencies_ms.append((time.perf_counter() - began) * 1000)
                self.stop.wait(self.every_s)


def one_run(work: Path, mode: str, jobs: int) -> dict[str, float]:
    scrape_s, page_s, in_browser = MODES[mode]
    run_dir = work / f"{mode.replace(' ', '-').replace(',', '')}-{time.monotonic_ns()}"
    modules = run_dir / "modules"
    stamps = run_dir / "stamps.txt"
    module(modules, "bench-file", STAMPER.format(out=stamps))
    token = secrets.token_hex(16)
    token_file = run_dir / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    port = free_port()
    server = StorkServer(run_dir / "d", {
        "STORK_MODULE_DIR": str(modules), "STORK_MAX_NUM_JOBS": "1",
        "STORK_DISPATCH_INTERVAL": "1", "STORK_API_ADDRESS": f"127.0.0.1:{port}",
        "STORK_API_TOKEN_FILE": str(token_file)}).start()
    scraper = None
    pager = None
    driver = None
    refreshes = 0
    try:
        assert server.proc is not None
        if scrape_s is not None and page_s is not None:
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics", token, scrape_s)
            scraper.start()
        if page_s is not None and not in_browser:
            pager = Scraper(f"http://127.0.0.1:{port}/v1/overview", token, page_s)
            pager.start()
        if page_s is not None and in_browser:
            driver = chromium(1400, 1200)
            driver.get(f"http://127.0.0.1:{port}/?every={page_s}#token={token}")
            wait_for(lambda: driver.find_element("id", "banner").get_attribute("data-state")
                     == "ok", 30, what="the status page")
            refreshes = -int(driver.find_element("id", "updated").get_attribute("data-count"))
        cpu0 = cpu_s(server.proc.pid)
        r = server.api("POST", "/v1/jobs", json={"text": "".join(ad(i) for i in range(jobs)),
                                                 "filename": "d.dap", "iwd": "/tmp"})
        ids = r.json()["ids"]
        wait_for(lambda: server.job(ids[-1])["job"]["state"] in ("COMPLETED", "FAILED"),
                 600, 0.2, what="the jobs")
        cpu1 = cpu_s(server.proc.pid)
        if driver is not None:
            refreshes += int(driver.find_element("id", "updated").get_attribute("data-count"))
        if pager is not None:
            refreshes = len(pager.latencies_ms)
    finally:
        for thread in (scraper, pager):
            if thread is not None:
                thread.stop.set()
        if driver is not None:
            driver.quit()
        server.stop()
    lines = [line.split() for line in stamps.read_text().splitlines()]
    starts = [float(t) for kind, t in lines if kind == "start"]
    ends = [float(t) for kind, t in lines if kind == "end"]
    gaps = sorted((starts[i + 1] - ends[i]) * 1000 for i in range(len(ends) - 1))
    span_s = ends[-1] - starts[0]
    return {"median": statistics.median(gaps), "p95": gaps[int(len(gaps) * 0.95)],
            "max": gaps[-1], "cpu_ms_per_job": (cpu1 - cpu0) * 1000 / jobs, "span_s": span_s,
            "scrapes": len(scraper.latencies_ms) if scraper else 0,
            "scrape_ms": statistics.median(scraper.latencies_ms) if scraper and
            scraper.latencies_ms else 0.0, "refreshes": refreshes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    why = missing_browser()
    if why:
        print(why, file=sys.stderr)
        return 1
    Path("/tmp/stork-bench").mkdir(exist_ok=True)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="stork-bench-ops-") as tmp:
        for _ in range(args.rounds):
            for mode in MODES:
                results[mode].append(one_run(Path(tmp), mode, args.jobs))
    print(f"\n## The operator's view: dispatch overhead with and without observers "
          f"({args.jobs} jobs x {args.rounds} rounds each, STORK_MAX_NUM_JOBS = 1)\n")
    print("| who looks | median gap | 95th pct | max | daemon CPU per job | scrapes "
          "(median latency) | page refreshes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, runs in results.items():
        scrape_s, page_s, in_browser = MODES[mode]
        who = ("nobody" if scrape_s is None else
               f"/metrics every {scrape_s:g} s + page every {page_s:g} s"
               + ("" if in_browser else " (plain HTTP, no browser)"))
        med = statistics.median(r["median"] for r in runs)
        p95 = statistics.median(r["p95"] for r in runs)
        worst = max(r["max"] for r in runs)
        cpu = statistics.median(r["cpu_ms_per_job"] for r in runs)
        scrapes = sum(int(r["scrapes"]) for r in runs)
        latency = statistics.median(r["scrape_ms"] for r in runs)
        refreshes = sum(int(r["refreshes"]) for r in runs)
        per_round = " / ".join(f"{r['median']:.1f}" for r in runs)
        print(f"| {who} | {med:.1f} ms ({per_round}) | {p95:.1f} ms | {worst:.1f} ms | "
              f"{cpu:.2f} ms | {scrapes} ({latency:.1f} ms) | {refreshes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
