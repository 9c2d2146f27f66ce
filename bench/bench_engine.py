"""Two measurements of the transfer engine (issue 27) on an emulated link, each in one run.

    .venv/bin/python bench/bench_engine.py [--profile wan40] [--step-at 12]
        [--dataset 2000x256K] [--big 1G] [--only step|kill]

**cc step.** Inside site b, the engine with GridFTP list workers (globus-url-copy over lists
of about 4 s, ``-cc 1 -pp -fast``, as bench_workers' ``guc-list``) moves a dataset written at
site a, started at cc 4 (p 1, pp 2); `--step-at` seconds after its start
``engine.set(Setting(12, 1, 2))``. The engine's own flow is read in 1-second windows once
`run` returned (every window then final); site b's link device, read every 0.1 s inside
site b, is cut on the same grid (the engine's flow spreads a list call's unmarked bytes over
the whole call; the counter says when they came). Printed for each series: the rate before
the step (median of the windows from 4 s to the step), the rate after (median of the
windows from step + 8 s to the tail; the tail starts when a call leaves fewer than 12 items
in the engine's queue), the time from the step to the end of the first window at 90% of the
rate after, and to the end of the first such window that the next `HOLD_WINDOWS` - 1 also
reach (before the tail), the windows after that one still below 90%, and how many windows
of the rate after's stretch are below 90% of it (its noise). Also the files answered more
than once (counted per file index over the engine's answers: must be 0). The same dataset
at a fixed cc 12 from the start gives the reference rate (median of its windows from 4 s to
its tail).

**kill -9 mid-ranges.** A real stork_server inside site b (`tests.testbed.jobs.site_daemon`)
is given one file of `--big` bytes at site a, ``arguments = "-cc 4 -p 2"``, so it goes as
byte ranges (`range_bytes` on the job). When the job's `ranges_landed` covers 40% of the
file (at most 60% is the aim; the figure says where it was), the globus-url-copy children of
the daemon are listed (the ranges in flight) and the daemon gets SIGKILL (its own pid only:
it shares this process's group, and its children, each in a session of its own, die with it
by PDEATHSIG). A new daemon on the same state finishes the job; the destination's md5 is
compared with the source's. Bytes moved: site b's link device (the TUN end of the link, as
``/proc/net/dev`` counts it, IP packets: TCP/IP headers included) received, before the job
was submitted and after it completed; the payload is estimated as bytes less 52 per packet
(IPv4 20 + TCP 20 + timestamps 12). Printed against the file size and the in-flight ranges.

Needs root, /dev/net/tun and ``ip netns``.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.engine import Engine, Taken, Window
from stork.errors import ArgumentsError
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.options import parse_size
from stork.transfer.worker import FileWork, Item, ItemResult, Setting, Worker, WorkerContext

BEFORE = Setting(4, 1, 2)
AFTER = Setting(12, 1, 2)
SETTLE_S = 4.0  # windows before this (from the start) are the start-up, not the rate before
AFTER_FROM_S = 8.0  # the rate after: windows from the step + this
TAIL_ITEMS = 12  # the tail: fewer items than this left in the queue
REACH = 0.9  # the new rate is reached at this share of the rate after
HOLD_WINDOWS = 3  # ... when this many windows in a row are there
HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamp option 12, per packet
KILL_FROM, KILL_TO = 0.40, 0.60  # share of the file landed at the kill
MIB = 1 << 20
SAMPLE_S = 0.1  # site b's link counter read this often in the cc step


# -- pure: the figures --------------------------------------------------------------------

def full(windows: Sequence[Window], window_s: float = 1.0) -> list[Window]:
    """The whole windows (a change of setting or the end cuts one short)."""
    return [w for w in windows if w.seconds >= window_s * 0.999]


def median_rate(windows: Sequence[Window], from_s: float, to_s: float) -> float | None:
    """Median Mbit/s of the whole windows inside [from_s, to_s] (None: no window there)."""
    rates = [w.rate_mbps for w in full(windows)
             if w.start_s >= from_s - 1e-9 and w.start_s + w.seconds <= to_s + 1e-9]
    return statistics.median(rates) if rates else None


def time_to_rate(windows: Sequence[Window], step_s: float, target_mbps: float, until_s: float,
                 hold: int = HOLD_WINDOWS) -> tuple[float | None, int]:
    """Seconds from `step_s` to the end of the first whole window (starting at the step or
    later, ending by `until_s`) whose rate and the next `hold` - 1 windows' are all at least
    `target_mbps`; and how many windows after that one, up to `until_s`, fall below it.
    (None, 0) when no window does."""
    after = [w for w in full(windows)
             if w.start_s >= step_s - 1e-9 and w.start_s + w.seconds <= until_s + 1e-9]
    for i in range(len(after) - hold + 1):
        if all(w.rate_mbps >= target_mbps for w in after[i:i + hold]):
            below = sum(w.rate_mbps < target_mbps for w in after[i + hold:])
            return after[i].start_s + after[i].seconds - step_s, below
    return None, 0


def counter_windows(samples: Sequence[tuple[float, float]], step_s: float | None,
                    end_s: float, *, start_s: float = 0.0, window_s: float = 1.0,
                    first: Setting = BEFORE, then: Setting = AFTER) -> list[Window]:
    """Windows of a byte counter read at times (`samples`: (s, bytes so far), in order) on
    the engine flow's grid: every `window_s` from `start_s`, cut at `step_s` and every
    `window_s` from there, up to `end_s`; the counter linearly interpolated between its
    readings (held before the first). Their setting: `first` before the step, `then`
    from it."""
    if len(samples) < 2:
        return []
    times = [t for t, _ in samples]

    def at(t: float) -> float:
        i = min(max(bisect.bisect_right(times, t), 1), len(samples) - 1)
        (t0, b0), (t1, b1) = samples[i - 1], samples[i]
        if t <= t0 or t1 <= t0:
            return b0
        return b0 + (b1 - b0) * min(1.0, (t - t0) / (t1 - t0))

    edges = []
    t = start_s
    cut = end_s if step_s is None else min(step_s, end_s)
    while t < cut - 1e-9:
        edges.append(t)
        t = min(t + window_s, cut)
    if step_s is not None:
        t = step_s
        while t < end_s - 1e-9:
            edges.append(t)
            t = min(t + window_s, end_s)
    edges.append(end_s)
    return [Window(a, b - a, at(b) - at(a),
                   first if step_s is None or a < step_s - 1e-9 else then, 0)
            for a, b in itertools.pairwise(edges) if b > a]


def answered_twice(indexes: Sequence[int]) -> int:
    """Files answered more than once, from every answer's file index."""
    return sum(1 for n in Counter(indexes).values() if n > 1)


def rx_counter(net_dev: str, device: str) -> tuple[int, int]:
    """(bytes, packets) received by `device`, from the text of /proc/net/dev."""
    for line in net_dev.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.strip() == device:
            fields = rest.split()
            return int(fields[0]), int(fields[1])
    raise ValueError(f"no device {device!r} in /proc/net/dev")


def link_device(net_dev: str) -> str:
    """The one device of a site that is not loopback (a two-site testbed's link end)."""
    names = [line.partition(":")[0].strip() for line in net_dev.splitlines() if ":" in line]
    others = [n for n in names if n != "lo"]
    if len(others) != 1:
        raise ValueError(f"expected one link device, found {others}")
    return others[0]


def span_bytes(spans: Sequence[Sequence[int]]) -> int:
    return sum(int(e) - int(s) for s, e in spans)


def partial_offsets(ps_lines: Sequence[str], parent: int, dest_url: str) -> list[int]:
    """The ``-partial-offset`` of every globus-url-copy child of `parent` writing `dest_url`,
    from lines of ``ps -eo ppid=,args=``."""
    found = []
    for line in ps_lines:
        ppid, _, args = line.strip().partition(" ")
        argv = args.split()
        if (ppid.isdigit() and int(ppid) == parent and argv and dest_url in argv
                and "-partial-offset" in argv):
            found.append(int(argv[argv.index("-partial-offset") + 1]))
    return sorted(found)


# -- inside site b: one engine run ---------------------------------------------------------

def run_inside(files: list[FileWork], first: Setting, step_at_s: float | None,
               then: Setting) -> dict[str, Any]:
    """The engine over `files` from `first`, `then` after `step_at_s` (None: no step); the
    windows (seconds from the start), the step, the tail and the answers."""
    context = WorkerContext(fast=True)
    module = GridFtpModule()

    def new_worker() -> Worker:
        worker = module.worker(context)
        worker.takes_lists = True
        return worker

    answers: list[int] = []
    ok: set[int] = set()
    lock = threading.Lock()
    tail: list[float] = []
    failures: list[str] = []

    def on_results(_: Taken, results: list[ItemResult]) -> None:
        with lock:
            answers.extend(r.item.file.index for r in results)
            ok.update(r.item.file.index for r in results if r.ok)
            failures.extend(str(r.failure) for r in results if r.failure is not None)

    def on_take(taken: Taken) -> None:
        if not tail and len(engine.left()) < TAIL_ITEMS:
            tail.append(taken.started_s)

    device = link_device(Path("/proc/net/dev").read_text())
    link: list[list[float]] = []
    sampling = threading.Event()

    def sample() -> None:  # site b's link device, read every SAMPLE_S
        while not sampling.wait(SAMPLE_S):
            link.append([time.monotonic(),
                         rx_counter(Path("/proc/net/dev").read_text(), device)[0]])

    link.append([time.monotonic(), rx_counter(Path("/proc/net/dev").read_text(), device)[0]])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    engine = Engine([Item(f) for f in files], new_worker, first, on_results, on_take=on_take)
    stepped: list[float] = []
    timer = None
    if step_at_s is not None:
        def step() -> None:
            stepped.append(time.monotonic())
            engine.set(then)
        timer = threading.Timer(step_at_s, step)
        timer.start()
    engine.run()
    ended = time.monotonic()
    sampling.set()
    sampler.join()
    if timer is not None:
        timer.cancel()
    windows = engine.flow.windows()
    origin = windows[0].start_s if windows else start
    # the step as the flow has it: the first window at the new setting starts there
    step_s = next((w.start_s for w in windows if w.setting == then and step_at_s is not None),
                  None)
    return {
        "windows": [[w.start_s - origin, w.seconds, w.bytes, w.setting.cc] for w in windows],
        "step_s": None if step_s is None else step_s - origin,
        "stepped_late": bool(stepped) and step_s is None,  # the step came after the end
        "tail_s": (tail[0] if tail else ended) - origin,
        "seconds": ended - origin,
        "files": len(files), "answers": len(answers), "ok": len(ok),
        "twice": answered_twice(answers), "calls": engine.calls,
        "bytes": engine.flow.total_bytes, "failures": failures[:3],
        "link": [[t - origin, n] for t, n in link], "device": device,
    }


def inside_main(spec: str) -> int:
    ask = json.loads(Path(spec).read_text())
    files = [FileWork(i, s, d, n) for i, (s, d, n) in enumerate(ask["files"])]
    first, then = Setting(*ask["first"]), Setting(*ask["then"])
    print(json.dumps(run_inside(files, first, ask["step_at_s"], then)))
    return 0


# -- the bench: cc step --------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """What one series of windows says about a run (see the module)."""

    before_mbps: float | None
    after_mbps: float | None  # a run with a step: its rate after; without: its rate
    reach_s: float | None  # to the 90% held HOLD_WINDOWS windows
    below_after: int  # windows below 90% after the new rate was reached
    first_s: float | None  # to the first window at 90% (held or not)
    noise: tuple[int, int]  # windows of the rate after below 90% of it, of all of them


def figures(windows: Sequence[Window], step_s: float | None, tail_s: float) -> Figures:
    """The rates before and after the step, the time to the new rate, and how many windows
    of the stretch the rate after is the median of fall below 90% of it (how often one
    window misses the mark at a steady setting). A run without a step: its rate from
    SETTLE_S to the tail, and that stretch's windows below 90%."""
    since = SETTLE_S if step_s is None else step_s + AFTER_FROM_S
    after = median_rate(windows, since, tail_s)
    stretch = [w for w in full(windows)
               if w.start_s >= since - 1e-9 and w.start_s + w.seconds <= tail_s + 1e-9]
    noise = (0, 0) if after is None else \
        (sum(w.rate_mbps < REACH * after for w in stretch), len(stretch))
    if step_s is None or after is None:
        return Figures(None, after, None, 0, None, noise)
    reach, below = time_to_rate(windows, step_s, REACH * after, tail_s)
    first, _ = time_to_rate(windows, step_s, REACH * after, tail_s, hold=1)
    return Figures(median_rate(windows, SETTLE_S, step_s), after, reach, below, first, noise)


@dataclass
class StepRun:
    label: str
    seconds: float
    files: int
    ok: int
    twice: int
    calls: int
    mbps: float  # bytes over the run's wall time
    step_s: float | None
    tail_s: float
    device: str
    flow: Figures  # from the engine's own flow
    link: Figures  # from site b's link counter
    windows: list[Window]
    link_windows: list[Window]


def step_run(bed: Any, args: argparse.Namespace, label: str, first: Setting,
             step_at_s: float | None) -> StepRun:
    from tests.testbed.dataset import place, plan

    dataset = plan(args.dataset, seed=args.seed)
    source = place(bed, "a", dataset)
    key = "step" if step_at_s is not None else "fixed"  # a name fit for a URL
    out = bed.site_dir("b") / f"out-{key}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pairs = [(bed.url("a", source / n), f"file://{out}/{n}", size)
             for n, size in zip(dataset.names(), dataset.sizes, strict=True)]
    spec = bed.workdir / f"run-{key}.json"
    spec.write_text(json.dumps({"files": pairs, "first": list(asdict(first).values()),
                                "then": list(asdict(AFTER).values()),
                                "step_at_s": step_at_s}))
    done = bed.run("b", [sys.executable, str(Path(__file__).resolve()), "--inside", str(spec)],
                   timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"bench_engine: {label} failed: {done.stderr[-2000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)
    if got["failures"]:
        print(f"bench_engine: {label}: failures, the first: {got['failures']}", file=sys.stderr)
    windows = [Window(s, n, b, Setting(int(cc), 1, 2), 0) for s, n, b, cc in got["windows"]]
    step_s, tail_s = got["step_s"], got["tail_s"]
    link = counter_windows([(t, n) for t, n in got["link"]], step_s, got["seconds"],
                           first=first)
    total = sum(n for _, _, n in pairs)
    return StepRun(label, got["seconds"], got["files"], got["ok"], got["twice"], got["calls"],
                   total * 8 / 1e6 / got["seconds"], step_s, tail_s, got["device"],
                   figures(windows, step_s, tail_s), figures(link, step_s, tail_s), windows,
                   link)


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_step(runs: list[StepRun], rate_mbps: float, args: argparse.Namespace) -> None:
    step, ref = runs[0], runs[-1]
    print(f"\n## cc step ({args.dataset}, {BEFORE.label()} then {AFTER.label()} at "
          f"{args.step_at:g} s; GridFTP list workers; 1-s windows)\n")
    print("| run | files | done | answered twice | calls | seconds | Mbit/s (wall) | step at s "
          "| tail at s | windows of | rate before | rate after | first window at 90%, s | "
          f"90% held {HOLD_WINDOWS} windows, s | windows below 90% after that | "
          "windows of the rate after below 90% of it |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")
    for r in runs:
        for what, f in (("engine flow", r.flow), (f"link rx ({r.device})", r.link)):
            print(f"| {r.label} | {r.files} | {r.ok} | {r.twice} | {r.calls} | "
                  f"{r.seconds:.1f} | {r.mbps:.1f} | {fmt(r.step_s)} | {r.tail_s:.1f} | "
                  f"{what} | {fmt(f.before_mbps)} | {fmt(f.after_mbps)} | {fmt(f.first_s)} | "
                  f"{fmt(f.reach_s)} | {f.below_after if f.reach_s is not None else '-'} | "
                  f"{f.noise[0]} of {f.noise[1]} |")
    print("\nrate before: median of the windows from 4 s to the step; rate after: from the "
          "step + 8 s to the tail (fixed cc 12: from 4 s to the tail); first window at 90%: "
          "the step to the end of the first window at >= 90% of the rate after; held: ... of "
          f"the first such window with the next {HOLD_WINDOWS - 1} also there; Mbit/s of a "
          f"link of {rate_mbps:g}. engine flow: "
          "what the tools told (a list call's unmarked bytes spread over the whole call); "
          "link rx: site b's link device, read every 0.1 s (TCP/IP headers included).")
    for what, a, b in (("engine flow", step.flow, ref.flow), ("link rx", step.link, ref.link)):
        if a.after_mbps and b.after_mbps:
            print(f"rate after the step / fixed cc 12 ({what}): {a.after_mbps / b.after_mbps:.2f}")
    for what, windows in (("engine flow", step.windows), ("link rx", step.link_windows)):
        print(f"\nwindows of the step run, {what} (s from start: Mbit/s, cc): " + ", ".join(
            f"{w.start_s:.0f}: {w.rate_mbps:.0f} ({w.setting.cc})" for w in full(windows)))


# -- the bench: kill -9 mid-ranges -----------------------------------------------------------

@dataclass
class KillRun:
    size: int
    range_bytes: int | None
    device: str
    rx_bytes: int
    rx_packets: int
    landed_at_kill: list[list[int]]
    in_flight: list[int]  # offsets of the ranges in flight at the kill
    leftover_children: int  # globus-url-copy of the job still running 5 s after the kill
    state: str
    md5_equal: bool
    seconds: float

    @property
    def in_flight_bytes(self) -> int:
        rb = self.range_bytes or 0
        return sum(min(rb, self.size - o) for o in self.in_flight)

    @property
    def payload(self) -> int:
        return self.rx_bytes - HEADER_BYTES * self.rx_packets


def md5(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - a comparison of two copies, not security
    with path.open("rb") as handle:
        while chunk := handle.read(4 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def kill_run(bed: Any, args: argparse.Namespace) -> KillRun:
    from stork.store.sqlite import SqliteStore
    from tests.support import wait_for
    from tests.testbed.jobs import site_daemon

    big = bed.site_dir("a") / "big.dat"
    if not big.exists() or big.stat().st_size != args.big:
        with big.open("wb") as out:
            subprocess.run(["head", "-c", str(args.big), "/dev/urandom"], stdout=out, check=True)
    dest = bed.site_dir("b") / "big-out.dat"
    dest.unlink(missing_ok=True)
    dest_url = f"file://{dest}"
    workdir = bed.workdir / "stork-b-kill"
    shutil.rmtree(workdir, ignore_errors=True)
    server = site_daemon(bed, "b", workdir=workdir).start()

    def net_dev() -> str:
        return str(bed.run("b", ["cat", "/proc/net/dev"]).stdout)

    device = link_device(net_dev())
    rx0 = rx_counter(net_dev(), device)
    started = time.monotonic()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 4 -p 2";
            src_url = "{bed.url("a", big)}"; dest_url = "{dest_url}" ]""")

        def landed_share() -> float | None:
            job = server.job(job_id)["job"]
            if job["state"] in ("COMPLETED", "FAILED", "REMOVED"):
                raise SystemExit(f"bench_engine: the job ended before the kill: {job}")
            share = span_bytes(job["result"].get("ranges_landed") or []) / args.big
            return share if share >= KILL_FROM else None

        wait_for(landed_share, 900, 0.05, what="40% of the file landed")
        assert server.proc is not None
        pid = server.proc.pid
        ps = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True,
                            check=True).stdout.splitlines()
        os.kill(pid, signal.SIGKILL)  # the daemon alone: it shares this bench's group
        server.proc.wait()
        server.proc = None
        in_flight = partial_offsets(ps, pid, dest_url)
        time.sleep(5)
        left = [line for line in subprocess.run(
            ["ps", "-eo", "args="], capture_output=True, text=True, check=True
        ).stdout.splitlines() if "globus-url-copy" in line and dest_url in line]
        store = SqliteStore(str(server.state / "stork.db"))
        try:
            result = store.get(job_id).result
        finally:
            store.close()
        landed = [list(s) for s in result.get("ranges_landed") or []]
        print(f"killed at {span_bytes(landed) / args.big:.0%} landed; in flight {in_flight}",
              file=sys.stderr)
        server = site_daemon(bed, "b", workdir=workdir).start()
        job = server.wait_state(job_id, timeout_s=1800)
        seconds = time.monotonic() - started
        rx1 = rx_counter(net_dev(), device)
    finally:
        server.stop()
    return KillRun(args.big, result.get("range_bytes"), device, rx1[0] - rx0[0],
                   rx1[1] - rx0[1], landed, in_flight, len(left), job["state"],
                   dest.exists() and md5(dest) == md5(big), seconds)


def print_kill(k: KillRun, args: argparse.Namespace) -> None:
    landed = span_bytes(k.landed_at_kill)
    rb = k.range_bytes or 0
    overhead = k.rx_bytes - k.payload
    excess, payload_excess = k.rx_bytes - k.size, k.payload - k.size
    allowance = k.in_flight_bytes + overhead
    print(f"\n## kill -9 mid-ranges (one {k.size / MIB:.0f} MiB file, -cc 4 -p 2, a real "
          f"stork_server in site b, killed and started again on its state)\n")
    print("| figure | value |")
    print("| --- | ---: |")
    rows = [
        ("file size, bytes", f"{k.size}"),
        ("range size (job's range_bytes), bytes", f"{rb} ({rb / MIB:g} MiB)"),
        ("ranges landed at the kill (store)",
         f"{k.landed_at_kill} = {landed} bytes, {landed / k.size:.1%} of the file"),
        ("ranges in flight at the kill (offsets / MiB)",
         f"{len(k.in_flight)}: {[o // MIB for o in k.in_flight]}"),
        ("bytes of the ranges in flight", f"{k.in_flight_bytes}"),
        ("job's globus-url-copy left 5 s after the kill", f"{k.leftover_children}"),
        ("job state after the restart", k.state),
        ("destination md5 == source md5", "yes" if k.md5_equal else "NO"),
        ("seconds, submission to completion", f"{k.seconds:.1f}"),
        (f"received at site b ({k.device} rx bytes, TCP/IP headers included)",
         f"{k.rx_bytes}"),
        (f"received packets ({k.device} rx)", f"{k.rx_packets}"),
        (f"headers at {HEADER_BYTES} bytes a packet",
         f"{overhead} ({overhead / k.size:.2%} of the file)"),
        ("payload received (bytes - headers)", f"{k.payload}"),
        ("bytes moved - file size (with headers)", f"{excess} ({excess / k.size:.2%})"),
        ("payload - file size", f"{payload_excess} ({payload_excess / k.size:.2%})"),
        ("payload - file size <= in-flight ranges",
         "yes" if payload_excess <= k.in_flight_bytes else "NO"),
        ("bytes moved - file size <= in-flight ranges + headers",
         "yes" if excess <= allowance else "NO"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


# -- main -----------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        return inside_main(sys.argv[2])
    from tests.testbed.cli import add_link_options, topologies
    from tests.testbed.netns import Testbed, TestbedUnavailable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--step-at", type=float, default=12.0,
                        help="seconds from the start to the change of cc (12)")
    parser.add_argument("--dataset", default="2000x256K", help="dataset spec (2000x256K)")
    parser.add_argument("--big", default="1G", help="the file killed mid-ranges (1G)")
    parser.add_argument("--only", choices=("step", "kill"), help="one of the two measurements")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    try:
        args.big = parse_size(args.big)
    except ArgumentsError as exc:
        parser.error(f"--big: {exc}")
    started = time.monotonic()
    [(name, topology)] = topologies(args, ("wan40",))[:1]
    link = topology.links[0]
    print(f"bench_engine on {name}: {link.rtt_ms:g} ms, {link.rate_mbps:g} Mbit/s, "
          f"loss {link.loss:g}, {args.cc}", file=sys.stderr)
    try:
        with Testbed(topology, args.workdir / f"engine-{name}", congestion=args.cc) as bed:
            runs = kill = None
            if args.only in (None, "step"):
                runs = [step_run(bed, args, "cc 4 -> 12", BEFORE, args.step_at)]
                print(json.dumps({k: v for k, v in asdict(runs[0]).items()
                                  if k not in ("windows", "link_windows")}), file=sys.stderr)
                runs.append(step_run(bed, args, "fixed cc 12", AFTER, None))
            if args.only in (None, "kill"):
                kill = kill_run(bed, args)
    except TestbedUnavailable as exc:
        print(f"bench_engine: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    if runs:
        print_step(runs, link.rate_mbps, args)
    if kill:
        print_kill(kill, args)
    print(f"\nwall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
