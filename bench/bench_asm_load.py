"""ASM, HARP and the default under background load switched during a long dataset transfer.

    .venv/bin/python bench/bench_asm_load.py [--profile wan40] [--dataset 800x2M]
        [--schedule 0:0,30:25,60:50] [--methods asm,harp,default] [--out /tmp]
        [--history FILE.csv|none] [--best-cells CC/P/PP,... [--best-files 800]]
        [--knob NAME=VALUE ...]

Point 5 of issue 15, on one emulated link (default wan40: 40 ms, 0.1% loss, 200 Mbit/s):

1. History. A sweep of --grid (`tests.testbed.grid`, one third-party globus-url-copy run a
   cell) over the dataset's first --history-files files with no background traffic, and a
   sweep of --load-grid under each other load of --history-loads (percent of the link rate,
   the background as in 2), written as a table in the
   HARP grid format (`--out`/asm-load-history.csv; `--history` reuses such a table). The
   rows carry no known load (`sharing` 0): ASM's analysis tags their load intensity from
   their deviation from the cell's top (docs/OPTIMIZERS.md), which is what the sweep under
   background traffic gives it.
2. Per method (`optimization = "asm"`, `"harp"`, `"climb"`, `"harp-climb"`, `"asm-climb"`,
   none: the defaults per size class), a fresh stork_server inside site b
   (`STORK_LINK_MBPS` = the link's rate) is given that history (`stork_history import`,
   then `stork_history analyze`) and runs one dataset job over the whole dataset, site a ->
   site b. Background traffic follows --schedule,
   `START_S:PERCENT` pairs counted from the job's submission: iperf3 (`-C cubic`,
   --bg-streams streams paced to PERCENT of the link rate in all, `-b` per stream) from site
   a to site b through the same emulated link, one iperf3 client per loaded phase, the last
   one until the job ends.
3. Sampled every --interval seconds: the bytes at the destination (allocated blocks of the
   destination's files: data as it arrives, between the batches' commits) and the job's
   `bytes_done` from the API; iperf3's own one-second reports for the background. The
   batches (parameters and start times) come from the daemon's transfer log afterwards.

With --best-cells, issue 28's load target: before the methods, each of those fixed settings
runs as a job (`-cc -p -pp`, the first --best-files files, one daemon) under each load of the
schedule held constant, and its rate over the middle 80% of its bytes is that cell's rate at
the load (800 files by default, 70-100 s a cell on wan40: over its first 200 files, about 3
calls a worker, cc 64 made 19-26% more than over a whole job of 1600, a start no long flow
at cc 64 keeps; docs/BENCHMARKS.md 15.44); per phase, the table then gives the method's
rate from 20 s after the switch (to the phase's end, or to 90% of the job's bytes) over the
best cell's at the phase's load (the target: >= 0.9). `--history none` gives the methods no
history (a path never seen).

Printed: per method and phase, the job's mean throughput, the background measured, the share
of the link the background left over that the job took (throughput / (link rate - measured
background)), the reaction time after each switch (defined in the output) and the first
change of parameters after it; the job ad's optimizer record. One PNG timeline
(--out/asm_under_load.png). `--knob NAME=VALUE` (repeatable) sets a configuration knob of
every daemon of the run (`STORK_LOG_LEVEL=DEBUG`: each engine call in the daemon's log).
Needs root, /dev/net/tun, `ip netns`, iperf3.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_climb import knobs_of  # (the bench's own directory is on sys.path)

from tests.support import StorkServer, wait_for
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.dataset import Dataset, plan, problems, write
from tests.testbed.grid import GridLog, parse_grid, sweep_grid
from tests.testbed.netns import Testbed, TestbedUnavailable, terminate
from tests.testbed.topology import Link

METHODS = {"asm": "asm", "harp": "harp", "climb": "climb", "harp-climb": "harp-climb",
           "asm-climb": "asm-climb", "yes": "YES", "default": ""}  # -> `optimization`
DONE_STATES = ("COMPLETED", "FAILED", "REMOVED")
SETTLE = 0.10  # "settled": within 10% of the phase's level
WINDOW_S = 4.0  # the window a level is judged over (a batch or more)
AFTER_S = 20.0  # issue 28: "within 20 s of the change ... >= 0.9 of the best cell"
AFTER_SHARE = 0.9
SMOOTH_S = 2.0  # the timeline's throughput: bytes over the last 2 s
# History: 24 cells without background (HARP takes a sweep of 20 cells or more as one group
# of its own), and under each load the 8 cells that fill the link (a cell that does not is
# not slowed by the background, so its rows say nothing of the load; ASM builds a load
# level's surface when it has rows in a quarter of the cells)
UNLOADED_GRID = "cc=4,8,16,32 p=1,2,4 pp=0,1 fast=1"
LOADED_GRID = "cc=8,16,32 p=2,4 pp=1 fast=1;cc=16,32 p=4 pp=0 fast=1"
BG_PORT = 5301  # iperf3 servers of the background: one per flow, from this port up
SUM_LINE = re.compile(r"^\[SUM\]\s+([\d.]+)-([\d.]+)\s+sec\s+\S+\s+\S+\s+([\d.]+)\s+Mbits/sec")


@dataclass(frozen=True)
class Phase:
    start_s: float
    percent: float


def parse_cells(text: str, parser: argparse.ArgumentParser) -> list[tuple[int, int, int]]:
    cells = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        parts = word.split("/")
        if len(parts) != 3 or not all(x.isdigit() and int(x) >= 1 for x in parts):
            parser.error(f"--best-cells: {word!r} is not CC/P/PP (whole numbers from 1)")
        cc, p, pp = (int(x) for x in parts)
        cells.append((cc, p, pp))
    return cells


def parse_schedule(text: str) -> tuple[Phase, ...]:
    phases = []
    for word in text.split(","):
        start, _, percent = word.partition(":")
        phases.append(Phase(float(start), float(percent)))
    if not phases or phases[0].start_s != 0 or any(
            b.start_s <= a.start_s for a, b in itertools.pairwise(phases)):
        raise SystemExit(f"--schedule {text!r}: START_S:PERCENT pairs from 0, times rising")
    return tuple(phases)


# --- background traffic --------------------------------------------------------------------

@dataclass
class Flow:
    """One iperf3 client (site a -> site b) paced to `mbps` in all over `streams` streams."""

    mbps: float
    started: float  # monotonic
    proc: subprocess.Popen[Any]
    server: subprocess.Popen[Any]
    output: Path
    stopped: float | None = None

    def reports(self) -> list[tuple[float, float, float]]:
        """(start, end, Mbit/s) of iperf3's one-second [SUM] reports, on the monotonic clock."""
        out = []
        for line in self.output.read_text(errors="replace").splitlines():
            match = SUM_LINE.match(line)
            if match and float(match.group(2)) - float(match.group(1)) <= 1.5:
                a, b = float(match.group(1)), float(match.group(2))
                out.append((self.started + a, self.started + b, float(match.group(3))))
        return out


class Background:
    def __init__(self, bed: Testbed, link: Link, streams: int, workdir: Path) -> None:
        self.bed, self.link, self.streams, self.workdir = bed, link, streams, workdir
        self.flows: list[Flow] = []
        self._port = BG_PORT

    def start(self, percent: float, tag: str) -> Flow | None:
        if percent <= 0:
            return None
        mbps = percent / 100 * self.link.rate_mbps
        port, self._port = self._port, self._port + 1
        address = self.bed.address(self.link.b)
        server = self.bed.popen(self.link.b, ["iperf3", "-s", "-1", "-B", address, "-p",
                                              str(port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: self.bed.listening(self.link.b, port), 10, 0.05,
                 what=f"iperf3 server on port {port}")
        output = self.workdir / f"iperf3-{tag}-{port}.txt"
        argv = ["iperf3", "-c", address, "-p", str(port), "-C", "cubic", "-P",
                str(self.streams), "-b", f"{mbps / self.streams:.4f}M", "-t", "3600", "-i", "1",
                "-f", "m", "--forceflush"]
        with open(output, "w") as handle:
            proc = self.bed.popen(self.link.a, argv, stdout=handle, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        flow = Flow(mbps, time.monotonic(), proc, server, output)
        self.flows.append(flow)
        return flow

    def stop(self, flow: Flow | None) -> None:
        if flow is None or flow.stopped is not None:
            return
        flow.stopped = time.monotonic()
        for proc in (flow.proc, flow.server):
            terminate(proc)

    def stop_all(self) -> None:
        for flow in self.flows:
            self.stop(flow)


def measured_mbps(flows: list[Flow], a: float, b: float) -> float:
    """Mean background rate over [a, b] (monotonic), from the reports that fall inside it
    (by their middle); 0 when no flow ran."""
    total = seconds = 0.0
    for flow in flows:
        for start, end, mbps in flow.reports():
            if a <= (start + end) / 2 < b:
                total += mbps * (end - start)
                seconds += end - start
    return total / seconds if seconds else 0.0


# --- history -------------------------------------------------------------------------------

def view(source: Path, dataset: Dataset, count: int) -> tuple[Dataset, Path]:
    """The first `count` files of `dataset` as a dataset of their own (hard links)."""
    part = Dataset(dataset.spec, dataset.seed, dataset.sizes[:count])
    directory = source.parent / "views" / f"{dataset.dirname}-first{count}"
    have = sorted(os.listdir(directory)) if directory.is_dir() else []
    if have != part.names():
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name in part.names():
            os.link(source / name, directory / name)
    return part, directory


def build_history(bed: Testbed, args: argparse.Namespace, dataset: Dataset, source: Path,
                  path: Path) -> list[str]:
    """The sweep of --grid at each load of --history-loads, rows into `path`; a line of what
    each run measured."""
    link = bed.topology.links[0]
    part, src = view(source, dataset, args.history_files)
    unloaded = parse_grid(args.grid.split())
    loaded = tuple(c for grid in args.load_grid.split(";") for c in parse_grid(grid.split()))
    path.unlink(missing_ok=True)
    table = GridLog(path)
    background = Background(bed, link, args.bg_streams, path.parent)
    lines = []
    try:
        for percent in args.history_loads:
            flow = background.start(percent, f"history{percent:g}")
            time.sleep(3 if flow else 0)  # the background's slow start
            began = time.monotonic()
            swept = sweep_grid(bed, link, link.a, link.b, part, src,
                               loaded if percent > 0 else unloaded)
            background.stop(flow)
            bg = measured_mbps([flow], began, time.monotonic()) if flow else 0.0
            for row in swept.rows:
                table.append(dataclasses.replace(row, source=bed.address(link.a),
                                                 destination=bed.address(link.b)))
                lines.append(f"load {percent:g}% (measured {bg:.0f} Mbit/s): cc={row.concurrency}"
                             f" p={row.parallelism} pp={row.pipelining} "
                             f"{row.throughput_mbps:.1f} Mbit/s")
                print(f"<!-- history: {lines[-1]} -->", flush=True)
            for failure in swept.failures:
                lines.append(f"load {percent:g}%: {failure}")
                print(f"<!-- history: {lines[-1]} -->", flush=True)
    finally:
        background.stop_all()
        shutil.rmtree(bed.site_dir(link.b) / "grid-in", ignore_errors=True)
    return lines


# --- one run -------------------------------------------------------------------------------

@dataclass
class Run:
    method: str
    t0: float  # monotonic, at submission
    wall0: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, dest, api bytes)
    job: dict[str, Any] = field(default_factory=dict)
    batches: list[dict[str, Any]] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    switches: list[float] = field(default_factory=list)  # t of each switch (after the first)
    end_s: float = 0.0
    analysis: str = ""

    def bytes_at(self, t: float) -> float:
        """Destination bytes at `t` s after submission (linear between samples)."""
        s = self.samples
        if not s or t <= s[0][0]:
            return float(s[0][1]) if s else 0.0
        for (ta, ba, _), (tb, bb, _) in itertools.pairwise(s):
            if ta <= t <= tb:
                return ba + (bb - ba) * (t - ta) / (tb - ta) if tb > ta else float(bb)
        return float(s[-1][1])

    def mbps(self, a: float, b: float) -> float:
        return (self.bytes_at(b) - self.bytes_at(a)) * 8 / 1e6 / (b - a) if b > a else 0.0


def dest_bytes(directory: Path) -> int:
    """Bytes that have arrived: allocated blocks of each file, at most its size."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                total += min(st.st_blocks * 512, st.st_size)
    except FileNotFoundError:
        pass
    return total


def start_server(bed: Testbed, args: argparse.Namespace, tag: str) -> StorkServer:
    link = bed.topology.links[0]
    work = args.workdir / f"run-{tag}-{time.monotonic_ns()}"
    knobs = {"STORK_LINK_MBPS": f"{link.rate_mbps:g}", "EOS_LINK_IS_TRUE": "true",
             **args.knob}
    return StorkServer(work, knobs, prefix=bed.argv(link.b, [])).start()


def run_method(bed: Testbed, args: argparse.Namespace, method: str, source: Path,
               dataset: Dataset, history: Path | None) -> Run:
    server = start_server(bed, args, method)
    try:
        analysis = "(no history given)"
        if history is not None:
            imported = server.cli("stork_history", "import", str(history), check=True)
            analysed = server.cli("stork_history", "analyze", "--report",
                                  str(server.workdir / "report"), check=True, timeout=300)
            analysis = imported.stdout.strip() + "\n" + analysed.stdout.strip()
        optimization = METHODS[method]
        extra = f'optimization = "{optimization}"; ' if optimization else ""
        return run_job(bed, args, server, method, extra, args.schedule, source, dataset,
                       analysis)
    finally:
        server.stop()


def run_job(bed: Testbed, args: argparse.Namespace, server: StorkServer, method: str,
            extra: str, phases: tuple[Phase, ...], source: Path, dataset: Dataset,
            analysis: str = "") -> Run:
    """One dataset job of `server` (`extra`: more of its ad), site a -> site b, under the
    background of `phases`, sampled until it ends."""
    link = bed.topology.links[0]
    background = Background(bed, link, args.bg_streams, server.workdir)
    dest = bed.site_dir(link.b) / "in"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        ad = (f'[ dap_type = transfer; src_url = "{bed.url(link.a, source)}/"; '
              f'dest_url = "{bed.url(link.b, dest)}/"; {extra}]\n')
        run = Run(method, time.monotonic(), time.time(), analysis=analysis)
        [job_id] = server.submit(ad)
        done = threading.Event()

        def schedule() -> None:
            flow: Flow | None = None
            for phase in phases:
                if done.wait(max(0.0, run.t0 + phase.start_s - time.monotonic())):
                    break
                background.stop(flow)
                if phase.start_s > 0:
                    run.switches.append(time.monotonic() - run.t0)
                flow = background.start(phase.percent, f"{method}-{phase.start_s:g}")
            done.wait()
            background.stop(flow)

        switcher = threading.Thread(target=schedule, daemon=True)
        switcher.start()
        state = ""
        api_bytes = 0
        last_api = 0.0
        deadline = time.monotonic() + args.timeout
        while state not in DONE_STATES and time.monotonic() < deadline:
            now = time.monotonic()
            if now - last_api >= 1.0:
                job = server.job(job_id)["job"]
                state, api_bytes, last_api = job["state"], job["bytes_done"] or 0, now
            run.samples.append((now - run.t0, dest_bytes(dest), api_bytes))
            time.sleep(max(0.0, args.interval - (time.monotonic() - now)))
        if state not in DONE_STATES:
            server.cli("stork_rm", str(job_id))
            wait_for(lambda: server.job(job_id)["job"]["state"] in DONE_STATES, 120, 0.5,
                     what="the removed job to stop")
        run.end_s = time.monotonic() - run.t0
        run.samples.append((run.end_s, dest_bytes(dest), server.job(job_id)["job"]["bytes_done"]))
        done.set()
        switcher.join(timeout=30)
        run.flows = list(background.flows)
        run.job = server.job(job_id)["job"]
        rows = server.api("GET", "/v1/transfers", params={"since": run.wall0 - 1}).json()
        run.batches = sorted((r for r in rows["transfers"] if r.get("origin") == "stork"),
                             key=lambda r: r["time"])
        broken = problems(dataset, dest)
        if broken:
            run.job["_not_whole"] = len(broken)
    finally:
        background.stop_all()
        shutil.rmtree(dest, ignore_errors=True)
    return run


def middle_mbps(run: Run, total_bytes: int) -> float:
    """The job's rate while it moved its middle 80% (from 10% of its bytes landed to 90%):
    no start, no tail."""
    t10 = crossing(run, 0.1 * total_bytes)
    t90 = crossing(run, 0.9 * total_bytes)
    if t10 is None or t90 is None or t90 <= t10:
        return 0.0
    return 0.8 * total_bytes * 8 / 1e6 / (t90 - t10)


def crossing(run: Run, nbytes: float) -> float | None:
    """When the destination first held `nbytes` (seconds after submission)."""
    for (ta, ba, _), (tb, bb, _) in itertools.pairwise(run.samples):
        if ba < nbytes <= bb:
            return ta + (tb - ta) * (nbytes - ba) / (bb - ba)
    return None


def sweep_cells(bed: Testbed, args: argparse.Namespace, dataset: Dataset,
                source: Path) -> dict[float, dict[str, float]]:
    """The best cells under each load of the schedule: a job of each --best-cells setting
    (`-cc -p -pp`) over the first --best-files files, through one daemon, the background
    held at the load from 3 s before the job until it ends; each job's rate over its middle
    (`middle_mbps`). {load percent: {cell: Mbit/s}}."""
    link = bed.topology.links[0]
    part, src = view(source, dataset, args.best_files)
    server = start_server(bed, args, "cells")
    background = Background(bed, link, args.bg_streams, server.workdir)
    out: dict[float, dict[str, float]] = {}
    try:
        for percent in sorted({p.percent for p in args.schedule}):
            flow = background.start(percent, f"cells{percent:g}")
            time.sleep(3 if flow else 0)  # the background's slow start
            rates = out.setdefault(percent, {})
            for cc, p, pp in args.best_cells:
                cell = f"{cc}/{p}/{pp}"
                run = run_job(bed, args, server, cell, f'arguments = "-cc {cc} -p {p} -pp {pp}";',
                              (Phase(0.0, 0.0),), src, part)
                ok = run.job.get("state") == "COMPLETED" and not run.job.get("_not_whole")
                rates[cell] = middle_mbps(run, part.total_bytes) if ok else 0.0
                print(f"<!-- cells: load {percent:g}%: {cell} {run.job.get('state')}, "
                      f"{rates[cell]:.1f} Mbit/s in its middle, {run.end_s:.1f} s -->",
                      flush=True)
            background.stop(flow)
    finally:
        background.stop_all()
        server.stop()
    return out


# --- figures -------------------------------------------------------------------------------

@dataclass
class PhaseFigure:
    start: float
    end: float
    percent: float
    bg_mbps: float
    mbps: float
    share: float
    level: float  # mean over the phase's second half
    reaction: str  # after the switch that began the phase
    change: str  # first change of parameters after the switch
    after: float | None = None  # the rate from AFTER_S after the switch (see `after_mbps`)


def phase_figures(run: Run, args: argparse.Namespace, rate_mbps: float,
                  total_bytes: int) -> list[PhaseFigure]:
    bounds = [0.0, *run.switches]
    out: list[PhaseFigure] = []
    for k, start in enumerate(bounds):
        end = bounds[k + 1] if k + 1 < len(bounds) else run.end_s
        if end <= start:
            continue
        percent = args.schedule[k].percent
        bg = measured_mbps(run.flows, run.t0 + start, run.t0 + end)
        mbps = run.mbps(start, end)
        level = run.mbps(start + (end - start) / 2, end)
        reaction, change = "-", "-"
        if k > 0:
            reaction = reaction_time(run, out[-1], start, end, level)
            change = first_change(run, start, end)
        out.append(PhaseFigure(start, end, percent, bg, mbps,
                               mbps / max(rate_mbps - bg, 1e-9), level, reaction, change,
                               after_mbps(run, start, end, total_bytes)))
    return out


def after_mbps(run: Run, start: float, end: float, total_bytes: int) -> float | None:
    """The job's rate from AFTER_S after the phase began to its end, or to when 90% of the
    job's bytes had landed when that comes first (the tail is not a setting's rate, as
    `middle_mbps` leaves it out of the cells'); None when nothing is left of that."""
    t90 = crossing(run, 0.9 * total_bytes)
    stop = min(end, t90) if t90 is not None else end
    a = start + AFTER_S
    return run.mbps(a, stop) if stop - a >= 2.0 else None


def reaction_time(run: Run, before: PhaseFigure, start: float, end: float,
                  level: float) -> str:
    """Seconds from the switch until a WINDOW_S window's mean first lies within SETTLE of the
    phase's level (its second half); "no change" when that level is within SETTLE of the
    previous phase's; "-" when the phase is too short to tell."""
    if end - start < 2 * WINDOW_S:
        return "phase too short"
    if abs(level - before.level) <= SETTLE * before.level:
        return f"no change ({level / max(before.level, 1e-9) - 1:+.0%})"
    t = start
    while t + WINDOW_S <= end:
        if abs(run.mbps(t, t + WINDOW_S) - level) <= SETTLE * level:
            return f"{t - start:.1f} s"
        t += 0.5
    return "never settled"


def label(row: dict[str, Any]) -> str:
    return f"{row['cc']}/{row['p']}/{row['pp']}"


def first_change(run: Run, start: float, end: float) -> str:
    """The first batch started in [start, end) whose parameters differ from the batch before
    it: seconds after the switch and the new cc/p/pp."""
    previous: dict[str, Any] | None = None
    for row in run.batches:
        t = row["time"] - run.wall0
        if previous is not None and start <= t < end and label(row) != label(previous):
            return f"{t - start:.1f} s: {label(previous)} -> {label(row)}"
        previous = row
    return "none"


def optimizer_record(job: dict[str, Any]) -> list[str]:
    result = job.get("result") or {}
    lines = []
    for key, value in sorted(result.items()):
        if key.startswith("optimizer_"):
            lines.append(f"{key}: {json.dumps(value)}")
    lines.append(f"chunks: {'; '.join(result.get('dataset_chunks') or ['?'])}")
    return lines


def best_cell(cells: dict[float, dict[str, float]], percent: float
              ) -> tuple[str, float] | None:
    rates = cells.get(percent) or {}
    return max(rates.items(), key=lambda kv: kv[1]) if rates else None


def print_cells(cells: dict[float, dict[str, float]], args: argparse.Namespace) -> None:
    if not cells:
        return
    names = [f"{cc}/{p}/{pp}" for cc, p, pp in args.best_cells]
    print(f"\n## Fixed cells (cc/p/pp) under each load: the first {args.best_files} files, "
          f"Mbit/s over each job's middle 80% of bytes")
    print("\n| load | " + " | ".join(names) + " | best |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " | --- |")
    for percent, rates in sorted(cells.items()):
        best = best_cell(cells, percent)
        print(f"| {percent:g}% | " + " | ".join(f"{rates.get(n, 0.0):.1f}" for n in names)
              + f" | {best[0] if best else '-'} |")


def print_tables(runs: list[Run], args: argparse.Namespace, link: Link,
                 dataset: Dataset, cells: dict[float, dict[str, float]] | None = None
                 ) -> None:
    cells = cells or {}
    print(f"\n## Under changing load: {link.label}, dataset {dataset.spec} "
          f"({dataset.total_bytes / 2**20:.0f} MiB), background {args.bg_streams} iperf3 "
          f"streams -C cubic, schedule "
          + ", ".join(f"{p.percent:g}% from {p.start_s:g} s" for p in args.schedule))
    print("\n| method | state | seconds | Mbit/s | phase | background nominal / measured | "
          "job Mbit/s | share of the link left over | level (second half) | reaction | "
          f"first change of cc/p/pp | after {AFTER_S:g} s | / best cell at the load |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: "
          "| ---: |")
    for run in runs:
        total = run.job.get("bytes_done", 0) * 8 / 1e6 / max(run.end_s, 1e-9)
        note = f", {run.job['_not_whole']} files not whole" if run.job.get("_not_whole") else ""
        for i, ph in enumerate(phase_figures(run, args, link.rate_mbps,
                                             dataset.total_bytes)):
            head = (f"| {run.method} | {run.job.get('state')}{note} | {run.end_s:.1f} | "
                    f"{total:.1f}" if i == 0 else "| | | |")
            nominal = ph.percent / 100 * link.rate_mbps
            print(f"{head} | {ph.start:.0f}-{ph.end:.0f} s | {nominal:.0f} / {ph.bg_mbps:.1f}"
                  f" | {ph.mbps:.1f} | {ph.share:.2f} | {ph.level:.1f} | "
                  f"{ph.reaction} | {ph.change} | {_after(ph, cells)} |")
    if cells:
        print(f"\nafter {AFTER_S:g} s = the job's rate from {AFTER_S:g} s after the phase "
              f"began to its end (or to 90% of the job's bytes); / best cell = that over the "
              f"best fixed cell's rate under the phase's load (the table above): issue 28's "
              f"target is >= {AFTER_SHARE:g}.")
    print(f"\nshare of the link left over = the job's bytes in the phase x 8 / its seconds / "
          f"({link.rate_mbps:g} Mbit/s - the background iperf3 measured in the phase)."
          f"\nreaction = seconds from the switch until the mean throughput over a "
          f"{WINDOW_S:g} s window first lies within {SETTLE:.0%} of the phase's level (its "
          f"mean over the phase's second half); \"no change\" when that level is within "
          f"{SETTLE:.0%} of the previous phase's level. first change = the first batch started "
          f"after the switch with other parameters than the batch before it.")
    for run in runs:
        print(f"\n{run.method}: batches (start s: cc/p/pp, files, Mbit/s): " + ", ".join(
            f"{r['time'] - run.wall0:.0f}: {label(r)} x{r['file_count']} "
            f"{r['throughput_mbps']:.0f}" for r in run.batches))
        for line in optimizer_record(run.job):
            print(f"{run.method}: {line}")


def _after(ph: PhaseFigure, cells: dict[float, dict[str, float]]) -> str:
    best = best_cell(cells, ph.percent)
    if ph.after is None:
        return f"- (phase under {AFTER_S:g} s) | -"
    if best is None or best[1] <= 0:
        return f"{ph.after:.1f} | -"
    return f"{ph.after:.1f} | {ph.after / best[1]:.2f} ({best[0]}, {best[1]:.1f})"


def plot(runs: list[Run], args: argparse.Namespace, link: Link, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"asm": "tab:red", "harp": "tab:blue", "default": "tab:green",
               "climb": "tab:purple", "harp-climb": "tab:cyan", "asm-climb": "tab:orange",
               "yes": "tab:brown"}
    assert set(METHODS) <= set(colours), "every method has its colour"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    end = max(r.end_s for r in runs)
    steps_t = [p.start_s for p in args.schedule] + [end]
    left = [link.rate_mbps * (1 - p.percent / 100) for p in args.schedule]
    top.step(steps_t, [*left, left[-1]], where="post", color="grey", ls="--", lw=1,
             label="link - background (nominal)")
    for run in runs:
        ts = [s[0] for s in run.samples if s[0] >= SMOOTH_S]
        top.plot(ts, [run.mbps(t - SMOOTH_S, t) for t in ts], color=colours.get(run.method),
                 lw=1.2, label=f"{run.method} ({run.end_s:.0f} s)")
        previous = None
        for row in run.batches:
            t = row["time"] - run.wall0
            if previous is None or label(row) != label(previous):
                top.plot([t], [5], marker="^", color=colours.get(run.method), ms=6)
                top.annotate(label(row), (t, 5), textcoords="offset points",
                             xytext=(2, 4 + 9 * list(colours).index(run.method)), fontsize=7,
                             color=colours.get(run.method))
            previous = row
        points = [(s + e) / 2 - run.t0 for f in run.flows for s, e, _ in f.reports()]
        rates = [m for f in run.flows for _, _, m in f.reports()]
        bottom.plot(points, rates, ".", ms=3, color=colours.get(run.method),
                    label=f"during {run.method}")
    for p in args.schedule[1:]:
        for ax in (top, bottom):
            ax.axvline(p.start_s, color="black", lw=0.6, ls=":")
    top.set_ylabel("job throughput, Mbit/s (last 2 s)")
    top.set_ylim(0, link.rate_mbps * 1.05)
    top.legend(loc="upper right", fontsize=8)
    top.set_title(f"Dataset job under background load: {link.label} "
                  f"(triangles: parameters cc/p/pp of each new batch setting)", fontsize=9)
    bottom.set_ylabel("iperf3, Mbit/s")
    bottom.set_xlabel("seconds after submission")
    bottom.set_ylim(0, link.rate_mbps * 0.7)
    bottom.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--dataset", default="800x2M", help="the long dataset (800x2M)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedule", default="0:0,30:25,60:50",
                        help="START_S:PERCENT,... of the background (0:0,30:25,60:50)")
    parser.add_argument("--methods", default="asm,harp,default")
    parser.add_argument("--bg-streams", type=int, default=16,
                        help="iperf3 streams of the background (16: one cubic stream gets "
                             "about 24 Mbit/s at 40 ms, 0.1%% loss)")
    parser.add_argument("--history", help="reuse this history table (no sweep); 'none': "
                                           "no history at all (a path the daemon never saw)")
    parser.add_argument("--best-cells", default="",
                        help="CC/P/PP,...: fixed settings run as jobs under each load of the "
                             "schedule, the best cell per load (none)")
    parser.add_argument("--best-files", type=int, default=800,
                        help="files of each --best-cells job (800; see the module)")
    parser.add_argument("--history-files", type=int, default=40)
    parser.add_argument("--history-loads", default="0,25,50")
    parser.add_argument("--grid", default=UNLOADED_GRID,
                        help=f"history cells without background ({UNLOADED_GRID})")
    parser.add_argument("--load-grid", default=LOADED_GRID,
                        help=f"history cells under each load, grids joined by ';' "
                             f"({LOADED_GRID})")
    parser.add_argument("--interval", type=float, default=0.5, help="sampling, s (0.5)")
    parser.add_argument("--timeout", type=float, default=900, help="per run, s (900)")
    parser.add_argument("--out", type=Path, default=Path("/tmp"))
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a configuration knob of every daemon of the run (repeatable)")
    args = parser.parse_args()
    try:
        args.knob = knobs_of(args.knob)
    except ValueError as exc:
        parser.error(str(exc))
    if args.workdir == Path("/tmp/stork-testbed"):  # the shared default: a directory of its own
        args.workdir = Path("/tmp/stork-asmload")
    args.schedule = parse_schedule(args.schedule)
    args.history_loads = [float(x) for x in args.history_loads.split(",")]
    args.best_cells = parse_cells(args.best_cells, parser)
    methods = [m.strip() for m in args.methods.split(",")]
    if any(m not in METHODS for m in methods):
        parser.error(f"--methods: from {', '.join(METHODS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    [(name, topology)] = topologies(args, ("wan40",))[:1]
    dataset = plan(args.dataset, args.seed)
    written = write(dataset, args.workdir / "datasets" / dataset.dirname)
    # the job's directory holds the dataset's files alone: the manifest next to them would
    # be a one-file small chunk running beside the others, which the daemon counts as known
    # load (ASM would start on a heavier surface for it)
    _, source = view(written, dataset, dataset.count)
    runs: list[Run] = []
    history_lines: list[str] = []
    cells: dict[float, dict[str, float]] = {}
    try:
        with Testbed(topology, args.workdir / f"bed-{name}", congestion=args.cc) as bed:
            link = bed.topology.links[0]
            history = None if args.history == "none" else \
                Path(args.history) if args.history else args.out / "asm-load-history.csv"
            if args.history is None:
                assert history is not None
                history_lines = build_history(bed, args, dataset, source, history)
            if args.best_cells:
                cells = sweep_cells(bed, args, dataset, source)
            for method in methods:
                began = time.strftime("%H:%M:%S")
                run = run_method(bed, args, method, source, dataset, history)
                runs.append(run)
                print(f"<!-- {method}: {run.job.get('state')} in {run.end_s:.1f} s "
                      f"(began {began}) -->", flush=True)
    except TestbedUnavailable as exc:
        print(f"bench_asm_load: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    finally:
        print_cells(cells, args)
        if runs:
            link = topology.links[0]
            print_tables(runs, args, link, dataset, cells)
            png = args.out / "asm_under_load.png"
            plot(runs, args, link, png)
            print(f"\ntimeline: {png}")
    if history_lines:
        print(f"\nhistory (first {args.history_files} files; {args.grid} without background, "
              f"{args.load_grid} under load; Mbit/s):")
        for line in history_lines:
            print(f"- {line}")
    for run in runs[:1]:
        print(f"\nanalysis before the runs ({run.method}'s daemon):\n{run.analysis}")
    print(f"\nwall time: {time.monotonic() - started:.0f} s")
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
