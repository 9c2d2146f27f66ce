"""Load on stork_server's API, measured from separate asynchronous client processes.

    .venv/bin/python bench/bench_load.py                 # old (471c2cb) and new: about 3 min
    .venv/bin/python bench/bench_load.py --no-baseline   # this working tree only
    .venv/bin/python bench/bench_load.py --seconds 60 --waiters 1000 --queued 100000

The clients are asyncio programs (aiohttp over the Unix socket, one connection per client,
opened before the window) in `--processes` processes of this script (`--worker`), released
together, so the figures are the daemon's and not the load generator's; the output says how
much CPU the generators and the daemon used. Every scenario runs on a fresh daemon:

(a) `--waiters` idle `stork_submit --wait` clients (their jobs never end in the window: they
    wait behind a held host pair) plus `--active` clients each submitting a one-ad job and
    asking for its status, in a loop. A new daemon's waiters hold one long poll each (GET
    /v1/jobs/{id}/wait, as `stork_submit --wait` does now); an old daemon has no such
    endpoint, so its waiters ask for the status every 0.5 s, as `stork_submit --wait` did.
(b) `--status-clients` clients asking for a job's status, in a loop.
(c) `--queued` jobs queued: the daemon's memory, `stork_q` (the real command) on them, and
    `stork_q` again while a further 10,000 jobs are being submitted.

A request answered 503 is retried after Retry-After as `stork.client` does; its latency is
the whole wait. A request that fails (a transport error, a 4xx/5xx other than 503, no answer
within --timeout) counts as failed. `--baseline REV` runs the same scenarios on the daemon of
commit REV (a temporary git worktree on PYTHONPATH) and prints it beside the new one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from stork.client import backoff_s  # noqa: E402
from tests.support import BIN, StorkServer  # noqa: E402

QUICK = "#!/bin/sh\n: > \"${2#file://}\"\n"  # load://... -> file://...: done at once
HOLD = "#!/bin/sh\nexec sleep 900\n"  # hold://... -> hold://...: runs for the whole bench
OLD_POLL_S = 0.5  # how often the old `stork_submit --wait` asked for the status
WAIT_ASK_S = 55  # what the new `stork_submit --wait` asks the server to wait (stork.client)
DRAIN_S = 60.0  # how long past the window a 503'd request keeps retrying
WARMUP_PARALLEL = 16  # connections a worker opens at once before the window
CLK_TCK = os.sysconf("SC_CLK_TCK")

# the targets
TARGET_STATUS_P99_S = 1.0
TARGET_SUBMITS_PER_S = 500.0
TARGET_STORK_Q_S = 2.0
TARGET_RSS_MB = 500.0


def load_ad(client: int, n: int, out: Path) -> str:
    return (f'[ dap_type = transfer; src_url = "load://client{client}/{n}"; '
            f'dest_url = "file://{out}/{client}-{n}" ]')


def hold_ads(first: int, count: int) -> str:
    """Jobs that never end: all on one host pair, so 4 run (sleeping) and the rest wait."""
    return "".join(f'[ dap_type = transfer; src_url = "hold://holdsrc/{i}"; '
                   f'dest_url = "hold://holddst/{i}" ]\n' for i in range(first, first + count))


def module_dir(root: Path) -> Path:
    path = root / "modules"
    path.mkdir(parents=True, exist_ok=True)
    for name, body in (("stork.transfer.load-file", QUICK), ("stork.transfer.hold-hold", HOLD)):
        module = path / name
        module.write_text(body)
        module.chmod(0o755)
    return path


# -- the process we measure -----------------------------------------------------------------

def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores, steal included)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def memory_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass(frozen=True)
class Build:
    """Which stork_server runs: this working tree (tree None) or a checkout put on PYTHONPATH."""

    label: str
    tree: Path | None = None

    def env(self, server: StorkServer) -> dict[str, str]:
        env = server.env()
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        return env

    def start(self, workdir: Path, knobs: dict[str, Any]) -> StorkServer:
        # bytecode written in the checkout is the proof that the daemon imported it (check)
        prefix = (["env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPATH={self.tree}"]
                  if self.tree is not None else None)
        settings = {"STORK_MODULE_DIR": str(module_dir(workdir)), "STORK_SHUTDOWN_GRACE": "1",
                    **knobs}
        server = StorkServer(workdir, settings, prefix=prefix).start()
        self.check(server)
        return server

    def check(self, server: StorkServer) -> None:
        """Make sure the daemon runs the code it is labelled with."""
        ping = server.api("GET", "/v1/ping").json()
        if self.tree is None:
            if "api" not in ping:
                raise RuntimeError(f"{self.label}: ping has no 'api' field: not the new API")
            return
        cache = self.tree / "stork" / "server" / "__pycache__"
        if not any(cache.glob("api.*.pyc")):
            raise RuntimeError(f"{self.label}: the daemon did not import stork from {self.tree} "
                               f"(no bytecode written in {cache})")
        if "api" in ping:
            print(f"note: {self.label}'s ping has an 'api' field: it has the new API layer")


def ping(server: StorkServer) -> dict[str, Any]:
    return dict(server.api("GET", "/v1/ping").json())


def submit_batch(server: StorkServer, text: str) -> list[int]:
    response = server.api("POST", "/v1/jobs", json={"text": text, "iwd": "/"}, timeout=600)
    if response.status_code != 201:
        raise RuntimeError(f"submission refused: {response.status_code} {response.text[:300]}")
    return list(response.json()["ids"])


# -- what the clients count -----------------------------------------------------------------

@dataclass
class Tally:
    """One kind of request from one worker: latencies of those started in the window."""

    latencies_s: list[float] = field(default_factory=list)
    in_window: int = 0  # answered before the window closed
    failed: int = 0
    refused: int = 0  # 503 answers (retried)
    errors: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    slowest_at_s: float = 0.0  # when the slowest was sent, from the window's start

    def answered(self, started: float, finished: float, t0: float, t1: float) -> None:
        latency = finished - started
        self.latencies_s.append(latency)
        self.in_window += finished <= t1
        if latency > self.slowest_s:
            self.slowest_s, self.slowest_at_s = latency, started - t0

    def fail(self, why: str) -> None:
        self.failed += 1
        if len(self.errors) < 3:
            self.errors.append(why[:300])

    def merge(self, other: Tally) -> None:
        self.latencies_s += other.latencies_s
        self.in_window += other.in_window
        self.failed += other.failed
        self.refused += other.refused
        self.errors += other.errors[: max(0, 3 - len(self.errors))]
        if other.slowest_s > self.slowest_s:
            self.slowest_s, self.slowest_at_s = other.slowest_s, other.slowest_at_s

    def percentile_s(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        if not ordered:
            return math.nan
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


KINDS = ("submit", "status", "wait", "warmup")


@dataclass
class WorkerSpec:
    socket: str
    new_api: bool
    out: str
    timeout_s: float
    waiters: list[int] = field(default_factory=list)  # job ids, one waiting client each
    active: list[int] = field(default_factory=list)  # client numbers submitting + asking
    status_jobs: list[int] = field(default_factory=list)  # job ids, one status client each


# -- the worker (a process of its own) ------------------------------------------------------

async def _worker(spec: WorkerSpec) -> dict[str, Any]:
    tallies = {kind: Tally() for kind in KINDS}
    ended = 0
    loop = asyncio.get_running_loop()
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    window = [math.inf, math.inf]  # t0, t1 on the monotonic clock (shared by all processes)

    def session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession("http://stork", timeout=timeout,
                                     connector=aiohttp.UnixConnector(path=spec.socket, limit=1))

    async def call(http: aiohttp.ClientSession, tally: Tally, method: str, path: str,
                   **kwargs: Any) -> dict[str, Any] | None:
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                async with http.request(method, path, **kwargs) as response:
                    status, data = response.status, await response.read()
                    retry_after = response.headers.get("Retry-After", "1")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                tally.fail(f"{method} {path}: {exc!r}")
                return None
            if status == 503:
                tally.refused += 1
                attempt += 1
                delay = backoff_s(attempt, float(retry_after or 1))
                if time.monotonic() + delay > window[1] + DRAIN_S:
                    tally.fail(f"{method} {path}: still 503 after {attempt} tries")
                    return None
                await asyncio.sleep(delay)
                continue
            finished = time.monotonic()
            if status >= 400:
                tally.fail(f"{method} {path}: {status} {data[:200].decode(errors='replace')}")
                return None
            tally.answered(started, finished, *window)
            return dict(json.loads(data)) if method != "GET" or "/wait" in path else {}

    async def warm(http: aiohttp.ClientSession, gate: asyncio.Semaphore) -> None:
        async with gate:  # opens the client's connection, kept alive for the window
            await call(http, tallies["warmup"], "GET", "/v1/ping")

    async def waiter(http: aiohttp.ClientSession, job_id: int) -> None:
        nonlocal ended
        while True:
            if spec.new_api:
                answer = await call(http, tallies["wait"], "GET", f"/v1/jobs/{job_id}/wait",
                                    params={"since": 0, "terminal": 1, "timeout": WAIT_ASK_S})
                if answer is not None and answer.get("ended"):
                    ended += 1
                    return
            else:
                await call(http, tallies["wait"], "GET", f"/v1/jobs/{job_id}")
                await asyncio.sleep(OLD_POLL_S)

    async def until_t0() -> None:
        await asyncio.sleep(max(0.0, window[0] - time.monotonic()))

    async def active(http: aiohttp.ClientSession, client: int) -> None:
        await until_t0()
        out = Path(spec.out)
        n = 0
        while time.monotonic() < window[1]:
            n += 1
            answer = await call(http, tallies["submit"], "POST", "/v1/jobs",
                                json={"text": load_ad(client, n, out), "iwd": "/"})
            if answer is None:
                await asyncio.sleep(0.1)
                continue
            if time.monotonic() < window[1]:
                await call(http, tallies["status"], "GET", f"/v1/jobs/{answer['ids'][0]}")

    async def asking(http: aiohttp.ClientSession, job_id: int) -> None:
        await until_t0()
        while time.monotonic() < window[1]:
            if await call(http, tallies["status"], "GET", f"/v1/jobs/{job_id}") is None:
                await asyncio.sleep(0.1)

    async def line() -> str:
        return await loop.run_in_executor(None, sys.stdin.readline)

    waiting = [session() for _ in spec.waiters]
    busy = [session() for _ in (*spec.active, *spec.status_jobs)]
    gate = asyncio.Semaphore(WARMUP_PARALLEL)
    await asyncio.gather(*(warm(http, gate) for http in (*waiting, *busy)))
    opening = tallies["warmup"]  # its failures count, its latencies are not the window's
    tallies["warmup"] = Tally(failed=opening.failed, refused=opening.refused,
                              errors=opening.errors)
    print(json.dumps({"ready": True}), flush=True)
    await line()  # "waiters"
    waiters = [asyncio.create_task(waiter(http, job))
               for http, job in zip(waiting, spec.waiters, strict=True)]
    window[0], window[1] = map(float, (await line()).split()[1:3])  # "window T0 T1"
    clients = [*(active(http, n) for http, n in zip(busy, spec.active, strict=False)),
               *(asking(http, job) for http, job in zip(busy[len(spec.active):],
                                                          spec.status_jobs, strict=True))]
    runs = asyncio.gather(*clients)
    await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
    for task in waiters:
        task.cancel()
    await runs
    await asyncio.gather(*waiters, return_exceptions=True)
    for http in (*waiting, *busy):
        await http.close()
    return {"tallies": {kind: asdict(t) for kind, t in tallies.items()}, "ended": ended}


def worker_main() -> int:
    spec = WorkerSpec(**json.loads(sys.stdin.readline()))
    print(json.dumps(asyncio.run(_worker(spec))), flush=True)
    return 0


# -- driving the workers --------------------------------------------------------------------

@dataclass
class Run:
    """What a window of client load measured."""

    build: str
    seconds: float
    clients: int
    tallies: dict[str, Tally]
    daemon_cpu_s: float
    generators_cpu_s: float
    others_cpu_s: float  # the rest of the machine: other processes, the jobs' modules
    rss_mb: float
    peak_rss_mb: float
    held: int | None  # long polls waiting near the end of the window (new API only)
    ended: int  # waiters whose job ended (none should)
    alive: bool

    @property
    def failed(self) -> int:
        return sum(t.failed for t in self.tallies.values())

    @property
    def refused(self) -> int:
        return sum(t.refused for t in self.tallies.values())

    def rate(self, kind: str) -> float:
        return self.tallies[kind].in_window / self.seconds

    def errors(self) -> list[str]:
        return [e for t in self.tallies.values() for e in t.errors][:5]


def deal(items: list[int], parts: int) -> list[list[int]]:
    return [items[i::parts] for i in range(parts)]


def drive(server: StorkServer, build: Build, out: Path, seconds: float, processes: int, *,
          waiters: Sequence[int] = (), active: int = 0, status_jobs: Sequence[int] = (),
          timeout_s: float = 120.0) -> Run:
    """Start the workers, open every connection, then one window of `seconds`."""
    assert server.proc is not None
    pid = server.proc.pid
    new_api = "api" in ping(server)
    out.mkdir(parents=True, exist_ok=True)
    specs = [WorkerSpec(server.socket, new_api, str(out), timeout_s, w, a, s)
             for w, a, s in zip(deal(list(waiters), processes),
                                deal(list(range(active)), processes),
                                deal(list(status_jobs), processes), strict=True)]
    workers = [subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in specs]
    try:
        for proc, spec in zip(workers, specs, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(asdict(spec)) + "\n")
            proc.stdin.flush()
        for proc in workers:  # the barrier: every client has its connection open
            assert proc.stdout is not None
            if not proc.stdout.readline():
                raise RuntimeError("a load worker exited before it was ready")
        tell(workers, "waiters")
        if waiters and new_api:
            deadline = time.monotonic() + 60
            while ping(server)["api"]["waiting"] < len(waiters) and time.monotonic() < deadline:
                time.sleep(0.2)
        elif waiters:
            time.sleep(2.0)  # the old waiters are polling
        t0 = time.monotonic() + 0.3
        t1 = t0 + seconds
        tell(workers, f"window {t0!r} {t1!r}")
        time.sleep(max(0.0, t0 - time.monotonic()))
        daemon0, gen0 = cpu_s(pid), sum(cpu_s(p.pid) for p in workers)
        busy0 = machine_busy_s()
        held = None
        if waiters and new_api:
            time.sleep(max(0.0, t1 - 1.5 - time.monotonic()))
            held = int(ping(server)["api"]["waiting"])
        time.sleep(max(0.0, t1 - time.monotonic()))
        daemon1, gen1 = cpu_s(pid), sum(cpu_s(p.pid) for p in workers)
        busy1 = machine_busy_s()
        rss, peak = memory_mb(pid), memory_mb(pid, "VmHWM")
        reports = []
        for proc in workers:
            assert proc.stdout is not None
            text = proc.stdout.readline()
            if not text:
                raise RuntimeError("a load worker exited without its report")
            reports.append(json.loads(text))
            proc.wait(30)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    tallies = {kind: Tally() for kind in KINDS}
    for report in reports:
        for kind, data in report["tallies"].items():
            tallies[kind].merge(Tally(**data))
    alive = server.proc is not None and server.proc.poll() is None
    return Run(build.label, seconds, len(waiters) + active + len(status_jobs), tallies,
               daemon1 - daemon0, gen1 - gen0,
               (busy1 - busy0) - (daemon1 - daemon0) - (gen1 - gen0), rss, peak, held,
               sum(r["ended"] for r in reports), alive)


def tell(workers: list[subprocess.Popen[str]], message: str) -> None:
    for proc in workers:
        assert proc.stdin is not None
        proc.stdin.write(message + "\n")
        proc.stdin.flush()


# -- the scenarios --------------------------------------------------------------------------

def mixed(root: Path, build: Build, waiters: int, active: int, seconds: float,
          processes: int) -> Run:
    """(a) idle waiters plus clients submitting and asking for status."""
    server = build.start(root / "mixed", {"STORK_MAX_NUM_JOBS": "8"})  # 4 held + 4 quick
    try:
        held = submit_batch(server, hold_ads(0, waiters)) if waiters else []
        return drive(server, build, root / "mixed" / "out", seconds, processes,
                     waiters=held, active=active)
    finally:
        server.stop(timeout_s=30)


def status_only(root: Path, build: Build, clients: int, seconds: float, processes: int) -> Run:
    """(b) clients asking for status only, each about its own (waiting) job."""
    server = build.start(root / "status", {"STORK_MAX_NUM_JOBS": "4"})
    try:
        jobs = submit_batch(server, hold_ads(0, clients))
        return drive(server, build, root / "status" / "out", seconds, processes,
                     status_jobs=jobs)
    finally:
        server.stop(timeout_s=30)


@dataclass
class Queue:
    build: str
    jobs: int
    submit_s: float
    rss_mb: float
    q_s: float
    q_exit: int
    q_lines: int
    busy_q_s: float  # stork_q while a further batch was being submitted
    busy_q_exit: int
    busy_submit_s: float  # that submission's time
    busy_q_sent_s: float  # when stork_q started, from the submission's start


def stork_q(server: StorkServer, build: Build) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = subprocess.run([str(BIN / "stork_q")], env=build.env(server), capture_output=True,
                            text=True, timeout=600, cwd=server.workdir, check=False)
    return time.monotonic() - started, result


def queued(root: Path, build: Build, count: int, extra: int = 10_000) -> Queue:
    """(c) `count` jobs queued (one running), stork_q on them, then during `extra` more."""
    server = build.start(root / "queued", {"STORK_MAX_NUM_JOBS": "1"})
    assert server.proc is not None
    try:
        batch = 10_000
        started = time.monotonic()
        for first in range(0, count, batch):
            submit_batch(server, hold_ads(first, min(batch, count - first)))
        submit_s = time.monotonic() - started
        time.sleep(2)
        rss = memory_mb(server.proc.pid)
        q_s, result = stork_q(server, build)
        times: dict[str, float] = {}

        def submit_more() -> None:
            submit_batch(server, hold_ads(count, extra))
            times["end"] = time.monotonic()

        thread = threading.Thread(target=submit_more)
        begun = time.monotonic()
        thread.start()
        time.sleep(0.3)  # the submission is being parsed and written
        sent = time.monotonic() - begun
        busy_q_s, busy = stork_q(server, build)
        thread.join()
        return Queue(build.label, count, submit_s, rss, q_s, result.returncode,
                     len(result.stdout.splitlines()), busy_q_s, busy.returncode,
                     times["end"] - begun, sent)
    finally:
        server.stop(timeout_s=30)


# -- the table ------------------------------------------------------------------------------

def duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def spread(tally: Tally) -> str:
    return " / ".join(duration(tally.percentile_s(q)) for q in (0.5, 0.99, 1.0))


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def mixed_rows(run: Run, waiters: int) -> dict[str, str]:
    status, submit = run.tallies["status"], run.tallies["submit"]
    p99 = status.percentile_s(0.99)
    waits = run.tallies["wait"]
    return {
        "submissions/s": f"{run.rate('submit'):.0f} "
                         f"({verdict(run.rate('submit') >= TARGET_SUBMITS_PER_S)})",
        "status answers/s": f"{run.rate('status'):.0f}",
        "status p50 / p99 / max": f"{spread(status)} ({verdict(p99 < TARGET_STATUS_P99_S)})",
        "submit p50 / p99 / max": spread(submit),
        "failed requests": f"{run.failed} ({verdict(run.failed == 0 and run.alive)})",
        "503 answers (retried)": str(run.refused),
        "waiters held at the end": ("n/a: polls status every 0.5 s" if run.held is None else
                                    f"{run.held} of {waiters} "
                                    f"({verdict(run.held == waiters and run.ended == 0)})"),
        "waiter requests answered": (f"{waits.in_window} status polls, p99 "
                                     f"{duration(waits.percentile_s(0.99))}"
                                     if run.held is None else
                                     f"{waits.in_window} long polls (none due)"),
        **resources(run),
    }


def status_rows(run: Run) -> dict[str, str]:
    status = run.tallies["status"]
    return {
        "status answers/s": f"{run.rate('status'):.0f}",
        "status p50 / p99 / max": spread(status),
        "failed requests": f"{run.failed} ({verdict(run.failed == 0 and run.alive)})",
        "503 answers (retried)": str(run.refused),
        **resources(run),
    }


def resources(run: Run) -> dict[str, str]:
    return {
        "daemon CPU (of one core)": f"{100 * run.daemon_cpu_s / run.seconds:.0f} %",
        "daemon RSS end (peak)": f"{run.rss_mb:.0f} MB ({run.peak_rss_mb:.0f} MB)",
        "load generators' CPU": f"{100 * run.generators_cpu_s / run.seconds:.0f} %",
        "rest of the machine's CPU": f"{100 * run.others_cpu_s / run.seconds:.0f} %",
    }


def queue_rows(q: Queue) -> dict[str, str]:
    return {
        "submit time (batches of 10,000)": f"{q.submit_s:.1f} s",
        "daemon RSS": f"{q.rss_mb:.0f} MB ({verdict(q.rss_mb < TARGET_RSS_MB)} < 500 MB)",
        "stork_q wall time": f"{q.q_s:.2f} s, exit {q.q_exit}, {q.q_lines} lines "
                             f"({verdict(q.q_s < TARGET_STORK_Q_S and q.q_exit == 0)})",
        "stork_q during a 10,000-job submission": f"{q.busy_q_s:.2f} s, exit {q.busy_q_exit}"
                                                  f" ({verdict(q.busy_q_s < TARGET_STORK_Q_S)})",
        "  that submission took": f"{q.busy_submit_s:.1f} s; stork_q ran from "
                                  f"{q.busy_q_sent_s:.1f} to {q.busy_q_sent_s + q.busy_q_s:.1f} s",
    }


def print_table(title: str, columns: list[str], rows: list[dict[str, str]],
                targets: dict[str, str]) -> None:
    print(f"\n### {title}\n")
    print("| figure | target | " + " | ".join(columns) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in columns) + " |")
    for name in rows[0]:
        print(f"| {name} | {targets.get(name, '')} | "
              + " | ".join(r.get(name, "-") for r in rows) + " |")


def print_notes(runs: list[Run]) -> None:
    """The slowest request of each kind (when it was sent) and the first failures."""
    print()
    for run in runs:
        slowest = [f"{kind} {duration(t.slowest_s)} (sent at +{t.slowest_at_s:.1f} s)"
                   for kind, t in run.tallies.items() if kind in ("submit", "status")
                   and t.latencies_s]
        print(f"- {run.build}: slowest {', '.join(slowest)}")
        if run.failed:
            print(f"  first failures: {run.errors()}")


# -- the old daemon's checkout --------------------------------------------------------------

def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def current_build() -> Build:
    changed = [line for line in git("status", "--porcelain", "--", "stork").splitlines() if line]
    dirty = f" + {len(changed)} uncommitted files in stork/" if changed else ""
    return Build(f"new ({git('rev-parse', '--short', 'HEAD')}{dirty})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=30, help="each window (default 30)")
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--status-clients", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=4, help="load generator processes")
    parser.add_argument("--timeout", type=float, default=120, help="a request's longest wait")
    parser.add_argument("--scenarios", default="abc", help="any of a, b, c (default abc)")
    parser.add_argument("--baseline", default="471c2cb", metavar="REV",
                        help="the old daemon's commit (default 471c2cb)")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker_main()
    print(f"bench_load: {' '.join(sys.argv[1:]) or '(defaults)'}; {os.cpu_count()} cores, "
          f"load average at start {os.getloadavg()[0]:.2f}; {args.processes} load generator "
          "processes (asyncio + aiohttp)")
    with tempfile.TemporaryDirectory(prefix="stork-load-") as tmp:
        root = Path(tmp)
        builds = [current_build()]
        if not args.no_baseline:
            tree = root / "baseline"
            git("worktree", "add", "--detach", str(tree), args.baseline)
            builds.insert(0, Build(f"old ({git('rev-parse', '--short', args.baseline)})", tree))
            print(f"old: a git worktree of {args.baseline} on PYTHONPATH; each of its daemons is "
                  "checked to have imported stork from there (its bytecode is written there)")
        try:
            return run_all(root, builds, args)
        finally:
            for build in builds:
                if build.tree is not None:
                    git("worktree", "remove", "--force", str(build.tree))


def run_all(root: Path, builds: list[Build], args: argparse.Namespace) -> int:
    columns = [b.label for b in builds]
    window = f"{args.seconds:g} s"
    if "a" in args.scenarios:
        runs = [mixed(root / f"a{i}", b, args.waiters, args.active, args.seconds, args.processes)
                for i, b in enumerate(builds)]
        print_table(f"(a) {args.waiters} idle --wait waiters + {args.active} clients submitting "
                    f"one ad and asking its status, {window}", columns,
                    [mixed_rows(r, args.waiters) for r in runs],
                    {"submissions/s": ">= 500/s", "status p50 / p99 / max": "p99 < 1 s",
                     "failed requests": "0", "waiters held at the end": "all"})
        print_notes(runs)
    if "b" in args.scenarios:
        runs = [status_only(root / f"b{i}", b, args.status_clients, args.seconds, args.processes)
                for i, b in enumerate(builds)]
        print_table(f"(b) {args.status_clients} clients asking for status only, {window}",
                    columns, [status_rows(r) for r in runs], {"failed requests": "0"})
        print_notes(runs)
    if "c" in args.scenarios:
        queues = [queued(root / f"c{i}", b, args.queued) for i, b in enumerate(builds)]
        print_table(f"(c) {args.queued} queued jobs (one running)", columns,
                    [queue_rows(q) for q in queues],
                    {"stork_q wall time": "< 2 s", "daemon RSS": "< 500 MB",
                     "stork_q during a 10,000-job submission": "< 2 s"})
    print("\nLatencies are of requests started in the window (503 retries included); rates "
          "count answers within it. CPU is the daemon process's (all threads) and the load "
          "generators' over the window; 100 % = one core.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
