"""Which worker the transfer engine should use: the candidates side by side on emulated links.

    .venv/bin/python bench/bench_workers.py [--profile wan40 --profile lan10]
        [--dataset 1000x256K] [--workers 8] [--p 1] [--big 1G] [--repeat 1]

Per link profile two sites are built (`tests.testbed`), a dataset is written at site a, and
it is moved from site a's GridFTP server to a directory of site b, inside site b, by:

    batch      today's shape: one globus-url-copy over the whole list, ``-cc CC -p P -pp
               -fast`` (one batch: its end waits for its slowest file)
    guc-file   the engine, CC globus-url-copy workers, one file a call (a process and a
               session per file)
    guc-list   the engine, CC globus-url-copy workers, lists of about 4 s a call (``-cc 1
               -pp -fast``: a session per call)
    gfal       the engine, CC long-lived gfal2 workers, one file at a time on one context
               (the GridFTP session kept across files)

With ``--big SIZE`` one file of that size is also moved by ``one-file`` (one globus-url-copy
``-p CC*P``, the whole file) and ``ranges`` (the engine, CC globus-url-copy workers over byte
ranges of `range_bytes` of the path, ``-p P`` each).

Per run: seconds, Mbit/s and share of the link (bytes over wall time, set-up included), and
the *valley* figure of the engine issue: 2-second windows of the measured flow after the
first 10 s and before the last CC items, the lowest as a share of the run's median window,
and how many fall below half of it (the batch's flow is read from globus-url-copy's ``-vb``
markers the same way). Needs root, /dev/net/tun and ``ip netns``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.engine import Engine, Flow, Taken, plan_items, range_bytes
from stork.errors import ArgumentsError
from stork.process import Child
from stork.transfer.gfal_worker import GfalWorker
from stork.transfer.gridftp import GridFtpModule, list_input
from stork.transfer.options import parse_size
from stork.transfer.worker import (
    FileWork,
    ItemResult,
    Setting,
    Worker,
    WorkerContext,
)

CANDIDATES = ("batch", "guc-file", "guc-list", "gfal")
BIG_CANDIDATES = ("one-file", "ranges")
WINDOW_S = 2.0


@dataclass
class Result:
    profile: str
    candidate: str
    files: int
    bytes: int
    seconds: float
    ok: int
    calls: int
    lowest_share: float | None  # lowest 2-s window / median, in the middle of the run
    below_half: int  # 2-s windows below half the median there
    windows: int

    def mbps(self) -> float:
        return self.bytes * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0


def valley(flow: Flow, seconds: float, tail_s: float) -> tuple[float | None, int, int]:
    """(lowest window / median, windows below half the median, windows judged) over the
    windows after the first 10 s and before the last `tail_s` seconds."""
    flow.tick(flow.windows()[0].start_s + seconds if flow.windows() else 0.0)
    windows = [w for w in flow.windows() if w.seconds >= WINDOW_S * 0.999]
    if not windows:
        return None, 0, 0
    start = windows[0].start_s
    middle = [w.rate_mbps for w in windows
              if w.start_s >= start + 10 and w.start_s + w.seconds <= start + seconds - tail_s]
    if len(middle) < 2:
        return None, 0, len(middle)
    median = statistics.median(middle)
    if median <= 0:
        return None, 0, len(middle)
    return min(middle) / median, sum(r < median / 2 for r in middle), len(middle)


# -- inside site b: one run ------------------------------------------------------------------

def run_inside(candidate: str, files: list[FileWork], cc: int, p: int, range_size: int) -> dict:
    """One candidate's run here (inside site b); what it measured, as JSON-able data."""
    start = time.monotonic()
    flow = Flow(start, Setting(cc, p, 2), window_s=WINDOW_S)
    module = GridFtpModule()
    ok = calls = 0
    if candidate in ("batch", "one-file"):
        streams = p if candidate == "batch" else cc * p  # the ranges' streams in all
        argv = module.list_command(cc=cc if candidate == "batch" else 1, p=streams,
                                   pipelining=True, fast=True)
        marks = [start, 0]

        def progress(done: int) -> None:
            now = time.monotonic()
            flow.add(marks[0], now, done - marks[1])
            marks[0], marks[1] = now, done

        child = Child(argv, stdin=list_input([(f.src_url, f.dest_url) for f in files]),
                      on_progress=lambda pr: progress(pr.bytes_done))
        ended = child.run()
        ok = len(files) if ended.code == 0 else 0
        calls = 1
        total = sum(f.size_bytes or 0 for f in files)
        if ended.code == 0 and total > marks[1]:
            progress(total)
    else:
        context = WorkerContext(fast=True)
        lists = candidate == "guc-list"

        def new_worker() -> Worker:
            if candidate == "gfal":
                return GfalWorker(context)
            worker = module.worker(context)
            worker.takes_lists = lists
            return worker

        answers: list[ItemResult] = []
        lock = threading.Lock()

        def on_results(_: Taken, results: list[ItemResult]) -> None:
            with lock:
                answers.extend(results)

        items = plan_items(files, range_size if candidate == "ranges" else 0)
        engine = Engine(items, new_worker, Setting(cc, p, 2), on_results, flow=flow)
        engine.run()
        ok = sum(1 for r in answers if r.ok)
        calls = engine.calls
    seconds = time.monotonic() - start
    rate = flow.total_bytes / seconds if seconds > 0 else 0.0
    mean_item = (sum(f.size_bytes or 0 for f in files) / len(files)) if files else 0.0
    tail_s = cc * (range_size if candidate == "ranges" else mean_item) / max(rate, 1.0)
    lowest, below, judged = valley(flow, seconds, tail_s)
    return {"seconds": seconds, "ok": ok, "calls": calls, "lowest_share": lowest,
            "below_half": below, "windows": judged}


def inside_main(spec: str) -> int:
    ask = json.loads(Path(spec).read_text())
    files = [FileWork(i, s, d, n) for i, (s, d, n) in enumerate(ask["files"])]
    print(json.dumps(run_inside(ask["candidate"], files, ask["cc"], ask["p"],
                                ask["range_size"])))
    return 0


# -- the bench -----------------------------------------------------------------------------

def run_profile(name: str, bed: Any, args: argparse.Namespace) -> list[Result]:
    from tests.testbed.dataset import place, plan

    dataset = plan(args.dataset, seed=args.seed)
    source = place(bed, "a", dataset)
    link = bed.topology.links[0]
    bdp = link.rate_mbps * 1e6 / 8 * link.rtt_ms / 1000
    jobs: list[tuple[str, list[tuple[str, str, int]], int]] = []
    names = dataset.names()
    for repeat in range(args.repeat):
        for candidate in args.candidates:
            out = bed.site_dir("b") / f"out-{candidate}-{repeat}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            pairs = [(bed.url("a", source / n), f"file://{out}/{n}", size)
                     for n, size in zip(names, dataset.sizes, strict=True)]
            jobs.append((candidate, pairs, 0))
        if args.big:
            big = bed.site_dir("a") / "big.dat"
            if not big.exists() or big.stat().st_size != args.big:
                subprocess.run(["head", "-c", str(args.big), "/dev/urandom"],
                               stdout=big.open("wb"), check=True)
            for candidate in BIG_CANDIDATES:
                out = bed.site_dir("b") / f"big-{candidate}-{repeat}.dat"
                out.unlink(missing_ok=True)
                jobs.append((candidate, [(bed.url("a", big), f"file://{out}", args.big)],
                             range_bytes(bdp)))
    results = []
    spec = bed.workdir / "run.json"
    for candidate, pairs, range_size in jobs:
        spec.write_text(json.dumps({"candidate": candidate, "files": pairs, "cc": args.workers,
                                    "p": args.p, "range_size": range_size}))
        done = bed.run("b", [sys.executable, str(Path(__file__).resolve()), "--inside",
                             str(spec)], timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"bench_workers: {candidate} on {name} failed: {done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        total = sum(n for _, _, n in pairs)
        results.append(Result(name, candidate, len(pairs), total, got["seconds"], got["ok"],
                              got["calls"], got["lowest_share"], got["below_half"],
                              got["windows"]))
        print(json.dumps(asdict(results[-1])), file=sys.stderr)
    return results


def print_table(results: list[Result], rates: dict[str, float], args: argparse.Namespace) -> None:
    print(f"\n## Engine workers ({args.dataset}, cc {args.workers}, p {args.p}, {args.cc}; "
          f"{args.repeat} repeat(s); 2-s windows)\n")
    print("| link | candidate | files | done | calls | seconds | Mbit/s | share of link | "
          "lowest window / median | windows below half | windows judged |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        low = "-" if r.lowest_share is None else f"{r.lowest_share:.2f}"
        print(f"| {r.profile} | {r.candidate} | {r.files} | {r.ok} | {r.calls} | "
              f"{r.seconds:.1f} | {r.mbps():.1f} | {r.mbps() / rates[r.profile]:.2f} | {low} | "
              f"{r.below_half} | {r.windows} |")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        return inside_main(sys.argv[2])
    from tests.testbed.cli import add_link_options, topologies
    from tests.testbed.netns import Testbed, TestbedUnavailable

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--dataset", default="1000x256K", help="dataset spec (1000x256K)")
    parser.add_argument("--candidates", default=",".join(CANDIDATES),
                        help=f"comma-separated, from {', '.join(CANDIDATES)}")
    parser.add_argument("--workers", type=int, default=8, help="cc: files at once (8)")
    parser.add_argument("--p", type=int, default=1, help="streams per file (1)")
    parser.add_argument("--big", default="", help="also one file of this size (e.g. 1G)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    if bad := [c for c in args.candidates if c not in CANDIDATES]:
        parser.error(f"unknown candidates: {bad}")
    try:
        args.big = parse_size(args.big) if args.big else 0
    except ArgumentsError as exc:
        parser.error(f"--big: {exc}")
    started = time.monotonic()
    results: list[Result] = []
    rates = {}
    profiles = topologies(args, ("wan40",))
    try:
        for name, topology in profiles:
            rates[name] = topology.links[0].rate_mbps
            with Testbed(topology, args.workdir / f"workers-{name}", congestion=args.cc) as bed:
                results += run_profile(name, bed, args)
    except TestbedUnavailable as exc:
        print(f"bench_workers: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    print_table(results, rates, args)
    print(f"\nwall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
