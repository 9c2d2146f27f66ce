"""Dataset jobs on emulated wide-area links, against one job per file and a (cc, p, pp) sweep.

    .venv/bin/python bench/bench_dataset.py [--profile wan40 --profile lan10]
        [--only a,b,c,d,ca,store] [--datasets 2000x256K,500x2M,20x64M,mix]
        [--engines batch,flow]

Per link profile (default wan40 and lan10) two sites are built, the datasets are written once
(seeded, `tests.testbed.dataset`; kept under WORKDIR/datasets for later runs) and moved third
party from site a to site b by a real stork_server running inside site b (a pass times a
connect to the source's server as its RTT, which from site a would be its own host), with
``STORK_LINK_MBPS`` set to the link's rate. Per dataset, the cases:

    a   one transfer job per file, as before datasets (daemon defaults: STORK_MAX_NUM_JOBS
        --max-num-jobs, 1 stream), on the dataset's first SAMPLE files
    b   one dataset job with ``arguments = "-cc 1 -p 1 -pp 1"``, on the same SAMPLE files
    c   one dataset job with no arguments (the defaults per size class), on the whole
        dataset, once per transfer engine of --engines (a daemon with STORK_ENGINE = batch,
        one with flow); the destination directory (site b's disk, local) is polled every
        0.25 s for the bytes landed, and `valley.py` gives the valley figure from them
    d   a sweep of --grid over the dataset's first SWEEP files (`tests.testbed.grid`, one run a
        cell; a cell still running at 1.25 times the best time so far plus 5 s is stopped: it
        cannot be the best), then the best cell as the ``arguments`` of one dataset job on the
        whole dataset
    ca  case c with the daemon inside site a, the placement of the other benchmarks (only for
        the datasets of --ca-datasets)

The numbers of files (`DATASETS`) keep the whole run near 30 minutes on 2 cores; the slow
cases (a, b) move a sample. Samples are directories of hard links to a dataset's first
files. Per run: throughput (bytes over the job's time from submission to its end, the last
job's end for case a) as a share of the link rate, files/s, seconds, and for case c the
ratio c/d. Targets: on wan40 the 2,000-file dataset reaches at least 50% of the link with d;
c reaches at least 70% of d on every dataset; c, on each engine, reaches 85% of the link and no
2-s window in its middle (after the first 10 s, before the last cc files' worth of bytes)
falls below half the run's median window. Case c's series of bytes at the destination go to
WORKDIR/valley (series.json, and a PNG per link and dataset with matplotlib). The store
figure (case store, no testbed): the wall time of stork_submit of a file:// directory of
--store-files empty files to a local stork_server, and of stork_q over it; targets under
10 s and under 1 s. Needs root, /dev/net/tun and `ip netns`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from valley import STEP_S, WINDOW_S, Valley, valley, window_rates

from tests.support import StorkServer
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.dataset import Dataset, plan, problems, write
from tests.testbed.grid import Cell, GridRow, default_timeout_s, parse_grid, sweep_grid
from tests.testbed.jobs import finish, site_daemon
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import Link


@dataclass(frozen=True)
class Setup:
    """A dataset of the benchmark and how many of its first files cases a and b and the
    sweep move (the whole dataset when that is more than it has)."""

    spec: str
    a: int
    b: int
    sweep: int


DATASETS: dict[str, Setup] = {
    "2000x256K": Setup("2000x256K", 200, 200, 200),
    "500x2M": Setup("500x2M", 25, 25, 64),
    "20x64M": Setup("20x64M", 4, 1, 4),
    "mix": Setup("500x256K,125x2M,5x64M", 50, 50, 100),
}
CASES = ("a", "b", "c", "d", "ca")
ENGINES = ("batch", "flow")  # STORK_ENGINE of case c's runs
CASE_NAMES = {"a": "(a) one job per file", "b": "(b) cc=1 p=1 pp=1", "c": "(c) defaults",
              "d": "(d) best cell", "ca": "(c) defaults, daemon in site a"}
DEFAULT_GRID = "cc=8,16 p=1,4 pp=0,1 fast=1"
SHARE_TARGET = 0.85  # case c: bytes over the job's time, as a share of the link
VALLEY_TARGET = 0.5  # case c: the lowest 2-s window in the middle / the median window


@dataclass
class Run:
    """One measured case: `done` of `files` files (`bytes_done` bytes) in `seconds`."""

    profile: str
    dataset: str
    case: str
    files: int
    total_files: int
    done: int
    bytes_done: int
    seconds: float
    params: str
    rate_mbps: float
    note: str = ""
    engine: str = ""  # STORK_ENGINE of the daemon, when the case runs once per engine
    series: list[tuple[float, int]] = field(default_factory=list)  # (s, bytes at dest)
    tail_bytes: float = 0.0  # the valley's end: bytes left below this (cc x mean size)
    cc: int = 0  # the chunks' concurrency, summed
    valley: Valley | None = None

    @property
    def label(self) -> str:
        return CASE_NAMES[self.case] + (f", {self.engine} engine" if self.engine else "")

    @property
    def mbps(self) -> float:
        return self.bytes_done * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def share(self) -> float:
        return self.mbps / self.rate_mbps

    @property
    def files_per_s(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def moved(self) -> str:
        whole = "" if self.files == self.total_files else f" (first {self.files})"
        failed = "" if self.done == self.files else f", {self.files - self.done} not done"
        return f"{self.done}/{self.total_files}{whole}{failed}"


@dataclass
class Sweep:
    dataset: str
    files: int
    rows: dict[Cell, GridRow] = field(default_factory=dict)
    stopped: dict[Cell, str] = field(default_factory=dict)  # cell -> why it has no row

    @property
    def best(self) -> Cell | None:
        return max(self.rows, key=lambda c: self.rows[c].throughput_mbps, default=None)


# --- datasets and samples ------------------------------------------------------------------

def view(source: Path, dataset: Dataset, count: int) -> tuple[Dataset, Path]:
    """The first `count` files of `dataset` (written in `source`) as a dataset of their own,
    in a directory of hard links next to it (made once; nothing else in it)."""
    count = min(count, dataset.count)
    part = Dataset(dataset.spec, dataset.seed, dataset.sizes[:count])
    directory = source.parent / "views" / f"{dataset.dirname}-first{count}"
    have = sorted(os.listdir(directory)) if directory.is_dir() else []
    if have != part.names() or problems(part, directory):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name in part.names():
            os.link(source / name, directory / name)
    return part, directory


# --- Stork runs ----------------------------------------------------------------------------

def per_file_jobs(server: StorkServer, bed: Testbed, part: Dataset, src: Path, dest: Path,
                  timeout_s: float) -> tuple[int, int, float, str]:
    """Case a: one transfer job per file; (files done, bytes, seconds, note)."""
    ads = "".join(f'[ dap_type = transfer; src_url = "{bed.url("a", src / n)}"; '
                  f'dest_url = "{bed.url("b", dest / n)}"; ]\n' for n in part.names())
    jobs = finish(server, server.submit(ads), timeout_s)
    done = [j for j in jobs if j["state"] == "COMPLETED"]
    seconds = max(j["finished_at"] or time.time() for j in jobs) \
        - min(j["submitted_at"] for j in jobs)
    note = "" if len(done) == len(jobs) else f"{len(jobs) - len(done)} jobs not completed"
    return len(done), sum(j["bytes_done"] for j in done), seconds, note


class DestinationPoll:
    """Bytes at a local destination directory over time, polled in a thread every
    `interval_s` while the `with` block runs (os.scandir and a stat per file; a file's bytes
    are its size, or its allocated blocks when fewer: a file written out of order has holes):
    (seconds since the block began, bytes) in `series`. A directory not made yet holds 0
    bytes. One use per instance."""

    def __init__(self, directory: Path, interval_s: float = STEP_S) -> None:
        self.directory = directory
        self.interval_s = interval_s
        self.series: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dest-poll", daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> DestinationPoll:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.series.append((time.monotonic() - self._t0, landed(self.directory)))

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            before = time.monotonic()
            total = landed(self.directory)
            self.series.append(((before + time.monotonic()) / 2 - self._t0, total))
            next_at = max(next_at + self.interval_s, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


def landed(directory: Path) -> int:
    """Bytes written under `directory` (0 when it does not exist)."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += landed(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                total += min(st.st_size, st.st_blocks * 512)
        except FileNotFoundError:  # renamed or removed while the directory was read
            continue
    return total


def dataset_job(server: StorkServer, bed: Testbed, src: Path, dest: Path, arguments: str,
                timeout_s: float, poll: DestinationPoll | None = None
                ) -> tuple[int, int, float, dict[str, Any]]:
    """Cases b, c, d: one dataset job; (files done, bytes, seconds, the job's summary). With
    `poll`, the destination is polled from just before the submission to the job's end."""
    extra = f'arguments = "{arguments}"; ' if arguments else ""
    text = (f'[ dap_type = transfer; src_url = "{bed.url("a", src)}/"; '
            f'dest_url = "{bed.url("b", dest)}/"; {extra}]\n')
    if poll is None:
        [job_id] = server.submit(text)
        [job] = finish(server, [job_id], timeout_s)
    else:
        with poll:
            [job_id] = server.submit(text)
            [job] = finish(server, [job_id], timeout_s)
    seconds = (job["finished_at"] or time.time()) - job["submitted_at"]
    return job["files_done"], job["bytes_done"], seconds, job


def chunks_cc(job: dict[str, Any]) -> int:
    """The concurrency of the job's chunks, summed (the files in flight at once when every
    chunk runs); 0 when the job did not say."""
    result = job.get("result") or {}
    return sum(int(m.group(1)) for c in result.get("dataset_chunks") or []
               if (m := re.search(r"\bcc=(\d+)", c)))


def chunks_text(job: dict[str, Any]) -> str:
    result = job.get("result") or {}
    chunks = "; ".join(result.get("dataset_chunks") or ["?"])
    return f"{chunks} (RTT {result.get('dataset_rtt_ms', '?')} ms)"


def flags_of(cell: Cell) -> str:
    """A grid cell as a job's arguments (Stork's -pp takes a depth: 1 is off, 2 is on; the
    daemon adds -fast itself, STORK_DATASET_FAST)."""
    return f"-cc {cell.cc} -p {cell.p} -pp {2 if cell.pp else 1}"


def sweep(bed: Testbed, link: Link, name: str, part: Dataset, src: Path,
          grid: tuple[Cell, ...], stop_factor: float = 1.25) -> Sweep:
    """Every cell of `grid` once over `part`, the most streams first; a cell that runs
    longer than `stop_factor` times the best time so far plus 5 s is stopped. Cells whose
    concurrency exceeds the files (the same run as a smaller one) are left out."""
    done = Sweep(name, part.count)
    cells = [c for c in grid if c.cc <= part.count or not any(
        o.cc < c.cc and o.cc >= part.count and (o.p, o.pp, o.fast) == (c.p, c.pp, c.fast)
        for o in grid)]
    cells.sort(key=lambda c: (-min(c.cc, part.count) * c.p, -c.pp, -c.fast))
    best_s: float | None = None
    for cell in cells:
        limit = default_timeout_s(part, link) if best_s is None else stop_factor * best_s + 5
        result = sweep_grid(bed, link, link.a, link.b, part, src, [cell], timeout_s=limit)
        for row in result.rows:
            done.rows[cell] = row
            best_s = min(best_s or row.duration_s, row.duration_s)
        for failure in result.failures:
            done.stopped[cell] = failure.reason
        shown = (f"{done.rows[cell].throughput_mbps:.1f} Mbit/s" if cell in done.rows
                 else done.stopped[cell])
        print(f"<!-- sweep {name} ({part.count} files) {cell.label}: {shown} -->", flush=True)
    shutil.rmtree(bed.site_dir(link.b) / "grid-in", ignore_errors=True)
    return done


def run_case(case: str, key: str, bed: Testbed, servers: dict[str, StorkServer],
             source: Path, dataset: Dataset, args: argparse.Namespace,
             sweeps: dict[str, Sweep], engine: str = "") -> Run | None:
    """One case over one dataset (written in `source`); None when the sweep found nothing.
    Case c runs on the daemon of `engine` and polls the destination for the valley."""
    link = bed.topology.links[0]
    setup = DATASETS[key]
    count = {"a": setup.a, "b": setup.b}.get(case, dataset.count)
    part, src = view(source, dataset, count)
    timeout = 4 * default_timeout_s(part, link)
    dest = bed.site_dir("b") / "in"
    shutil.rmtree(dest, ignore_errors=True)
    note = ""
    poll: DestinationPoll | None = None
    if case == "a":
        dest.mkdir(parents=True)
        done, moved, seconds, note = per_file_jobs(servers["b"], bed, part, src, dest, timeout)
        params = f"STORK_MAX_NUM_JOBS = {args.max_num_jobs}, 1 stream"
    else:
        arguments = ""
        if case == "b":
            arguments = "-cc 1 -p 1 -pp 1"
        elif case == "d":
            swept = sweep(bed, link, key, *view(source, dataset, setup.sweep),
                          parse_grid(args.grid.split()))
            sweeps[key] = swept
            if swept.best is None:
                print(f"<!-- {key}: no cell of the sweep finished -->", flush=True)
                return None
            arguments = flags_of(swept.best)
        server = servers["a" if case == "ca" else f"b:{engine}" if engine else "b"]
        poll = DestinationPoll(dest) if case == "c" else None
        done, moved, seconds, job = dataset_job(server, bed, src, dest, arguments, timeout,
                                                poll)
        params = chunks_text(job)
        if job["state"] != "COMPLETED":
            note = f"job {job['state']}: {job.get('last_error') or ''}"[:120]
    broken = problems(part, dest)
    if broken and not note:
        note = f"{len(broken)} files not whole at the destination"
    shutil.rmtree(dest, ignore_errors=True)
    run = Run("", key, case, part.count, dataset.count, done, moved, seconds, params,
              link.rate_mbps, note, engine)
    if poll is not None:
        run.cc = chunks_cc(job)
        run.tail_bytes = run.cc * sum(part.sizes) / part.count
        run.series = poll.series
        run.valley = valley(run.series, run.tail_bytes)
    return run


def run_profile(name: str, bed: Testbed, args: argparse.Namespace, data: Path,
                runs: list[Run], sweeps: dict[tuple[str, str], Sweep]) -> None:
    cases = [c for c in CASES if c in args.only]
    sites = ["b"] + (["a"] if "ca" in cases and set(args.ca_datasets) & set(args.datasets)
                     else [])
    if "c" in cases:  # case c on a daemon of each engine; the other cases on the defaults
        sites = [s for s in sites if s != "b" or set(cases) & {"a", "b", "d"}]
        sites += [f"b:{engine}" for engine in args.engines]
    servers: dict[str, StorkServer] = {}
    swept: dict[str, Sweep] = {}

    def start(site: str) -> None:
        knobs = {"STORK_MAX_NUM_JOBS": str(args.max_num_jobs)}
        where, _, engine = site.partition(":")
        if engine:
            knobs["STORK_ENGINE"] = engine
        servers[site] = site_daemon(bed, where, knobs).start()

    try:
        for site in sites:
            start(site)
        for key in args.datasets:
            dataset = plan(DATASETS[key].spec, args.seed)
            source = write(dataset, data / dataset.dirname)
            for case, engine in [(c, e) for c in cases
                                 for e in (args.engines if c == "c" else [""])]:
                if case == "ca" and key not in args.ca_datasets:
                    continue
                began = time.monotonic()
                try:
                    run = run_case(case, key, bed, servers, source, dataset, args, swept,
                                   engine)
                except httpx.TransportError as exc:  # a daemon gone: stopped from outside
                    gone = [k for k, server in servers.items() if not answering(server)]
                    if not gone:
                        raise
                    print(f"<!-- {name} {key} {case}{f' {engine}' if engine else ''}: "
                          f"daemon(s) {', '.join(gone)} gone ({exc}) at "
                          f"{time.strftime('%H:%M:%S')}; started again, the case run again "
                          "-->", flush=True)
                    for site in gone:
                        servers.pop(site).stop()
                        start(site)
                    run = run_case(case, key, bed, servers, source, dataset, args, swept,
                                   engine)
                if key in swept:
                    sweeps[(name, key)] = swept[key]
                if run is None:
                    continue
                run.profile = name
                runs.append(run)
                print(f"<!-- {name} {key} {case}{f' {engine}' if engine else ''}: "
                      f"{run.moved} files, {run.mbps:.1f} Mbit/s, "
                      f"{run.seconds:.1f} s; {run.params} {run.note} (case took "
                      f"{time.monotonic() - began:.0f} s, ended {time.strftime('%H:%M:%S')})"
                      f"{valley_text(run)} -->", flush=True)
                save_series(runs, args.workdir / "valley", plots=False)
    finally:
        for server in servers.values():
            server.stop()


def answering(server: StorkServer) -> bool:
    """Whether the daemon runs and answers its API."""
    try:
        return server.ready()
    except RuntimeError:  # it exited
        return False


# --- the store figure ----------------------------------------------------------------------

def store_figure(workdir: Path, count: int) -> dict[str, Any]:
    """Submit a file:// directory of `count` empty files to a local daemon; time stork_submit
    and stork_q (three times each after the submission, the median)."""
    src = workdir / f"store-src-{count}"
    if not src.is_dir() or len(os.listdir(src)) != count:
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        for i in range(count):
            (src / f"f{i:06d}").touch()
    work = workdir / f"store-{time.monotonic_ns()}"
    dest = work / "dest"
    job = work / "store.dap"
    with StorkServer(work) as server:
        job.write_text(f'[ dap_type = transfer; src_url = "file://{src}/"; '
                       f'dest_url = "file://{dest}/"; ]\n')
        start = time.monotonic()
        out = server.cli("stork_submit", str(job), check=True, timeout=600)
        submit_s = time.monotonic() - start
        job_id = int(out.stdout.strip().rsplit(":", 1)[1])
        q_s = []
        for _ in range(3):
            start = time.monotonic()
            server.cli("stork_q", check=True, timeout=600)
            q_s.append(time.monotonic() - start)
        job_now = server.job(job_id)["job"]
    shutil.rmtree(work, ignore_errors=True)
    return {"files": count, "listed": job_now["files_total"], "submit_s": submit_s,
            "state": f"{job_now['state']}, {job_now['files_done']} files done",
            "q_s": statistics.median(q_s), "q_runs": q_s}


# --- tables --------------------------------------------------------------------------------

def cell(run: Run | None) -> str:
    if run is None:
        return "-"
    note = " *" if run.note else ""
    return f"{run.share:.2f} ({run.files_per_s:.1f}/s, {run.seconds:.0f} s){note}"


def print_tables(runs: list[Run], sweeps: dict[tuple[str, str], Sweep],
                 profiles: list[tuple[str, Link]], args: argparse.Namespace) -> None:
    for name, link in profiles:
        mine = [r for r in runs if r.profile == name]
        if not mine:
            continue
        by = {(r.dataset, r.case): r for r in sorted(mine, key=lambda r: r.engine == "flow")}
        engines = list(dict.fromkeys(r.engine for r in mine if r.case == "c"))
        print(f"\n### {name}: {link.label}\n")
        print("| dataset | case | files moved | parameters | Mbit/s | share of link | files/s "
              "| seconds | c/d |")
        print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in mine:
            d = by.get((r.dataset, "d"))
            ratio = f"{r.mbps / d.mbps:.2f}" if r.case in ("c", "ca") and d else ""
            note = f" ({r.note})" if r.note else ""
            print(f"| {DATASETS[r.dataset].spec} | {r.label} | {r.moved}{note} | "
                  f"{r.params} | {r.mbps:.1f} | {r.share:.3f} | {r.files_per_s:.1f} | "
                  f"{r.seconds:.1f} | {ratio} |")
        print(f"\n{name}, side by side: share of the link (files/s, seconds)\n")
        c_heads = "".join(f"(c) defaults, {e} | " for e in engines) or "(c) defaults | "
        print(f"| dataset | (a) one job per file | (b) cc=1 p=1 pp=1 | {c_heads}"
              "(d) best cell | c/d | best cell | its sweep run (sample) |")
        print(f"| --- | ---: | ---: | {'---: | ' * max(len(engines), 1)}---: | ---: | --- | "
              "---: |")
        for key in dict.fromkeys(r.dataset for r in mine):
            c, d = by.get((key, "c")), by.get((key, "d"))
            c_runs = {r.engine: r for r in mine if r.dataset == key and r.case == "c"}
            c_cells = "".join(f"{cell(c_runs.get(e))} | " for e in engines) or "- | "
            ratio = f"{c.mbps / d.mbps:.2f}" if c and d else "-"
            swept = sweeps.get((name, key))
            best, raw = "-", "-"
            if swept and swept.best:
                row = swept.rows[swept.best]
                best = swept.best.label
                raw = (f"{row.throughput_mbps / link.rate_mbps:.2f} "
                       f"({swept.files / row.duration_s:.1f}/s, {row.duration_s:.0f} s)")
            print(f"| {DATASETS[key].spec} | {cell(by.get((key, 'a')))} | "
                  f"{cell(by.get((key, 'b')))} | {c_cells}{cell(d)} | {ratio} | {best} | "
                  f"{raw} |")
        mine_sweeps = [s for (p, _), s in sweeps.items() if p == name]
        if mine_sweeps:
            print(f"\n{name}, sweep (`{args.grid}`, one run a cell, Mbit/s, best first)\n")
            print("| dataset | files swept | cells | stopped (slower than the best) or failed |")
            print("| --- | ---: | --- | --- |")
            for s in mine_sweeps:
                order = sorted(s.rows, key=lambda c: -s.rows[c].throughput_mbps)
                cells = ", ".join(f"{c.cc}/{c.p}/{c.pp}: {s.rows[c].throughput_mbps:.1f}"
                                  for c in order)
                stopped = ", ".join(f"{c.cc}/{c.p}/{c.pp} ({why.replace('no end after', '>')})"
                                    for c, why in s.stopped.items()) or "-"
                print(f"| {DATASETS[s.dataset].spec} | {s.files} | {cells} | {stopped} |")
            print("\n(cells as cc/p/pp; every run with -fast)")
        if len(engines) > 1 and any(r.case == "d" for r in mine):
            print("\n(c/d in the side-by-side table: (c) on the flow engine, when it ran, over "
                  "(d), whose daemon runs the default engine)")


def print_valley(runs: list[Run], profiles: list[tuple[str, Link]]) -> None:
    """Case c engine by engine: share of the link and the valley figure (`valley.py`)."""
    for name, link in profiles:
        mine = [r for r in runs if r.profile == name and r.valley is not None]
        if not mine:
            continue
        print(f"\n### {name}, case (c) engine by engine: share of the link and the valley\n")
        print("| dataset | engine | share of link | seconds | median 2 s rate | lowest 2 s window "
              "| lowest/median | targets met |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in mine:
            v = r.valley
            assert v is not None
            median = "-" if v.median_mbps is None else f"{v.median_mbps:.1f} Mbit/s"
            lowest = "-" if v.lowest_mbps is None else \
                f"{v.lowest_mbps:.1f} Mbit/s at {v.lowest_at_s:.1f} s"
            share = v.lowest_share
            met_share = "yes" if r.share >= SHARE_TARGET else "no"
            met_valley = "-" if share is None else "yes" if share >= VALLEY_TARGET else "no"
            print(f"| {DATASETS[r.dataset].spec} | {r.engine} | {r.share:.3f} | "
                  f"{r.seconds:.1f} | {median} | {lowest} | "
                  f"{'-' if share is None else f'{share:.2f}'} | "
                  f"share {met_share}, valley {met_valley} |")
        print(f"\nTargets: share of link >= {SHARE_TARGET} ({link.rate_mbps:g} Mbit/s), "
              f"lowest/median >= {VALLEY_TARGET}. Bytes at the destination polled every "
              f"{STEP_S} s; 2-s windows start every {STEP_S} s from the first byte; the median "
              "is over all of them, the lowest over those after the first 10 s and before "
              "the bytes left to land fall below cc x the dataset's mean file size (cc: the "
              "chunks' concurrency, summed); \"at\" is seconds after the first byte.\n")
        for r in mine:
            v = r.valley
            assert v is not None
            span = ("" if v.judged_from_s is None or v.judged_to_s is None else
                    f"judged {v.judged_from_s:.1f}-{v.judged_to_s:.1f} s ({v.windows} windows)")
            print(f"- {DATASETS[r.dataset].spec}, {r.engine}: {r.params}; cc {r.cc}, tail "
                  f"{r.tail_bytes / 1e6:.1f} MB; first byte {v.start_s:.1f} s after the "
                  f"submission, last {v.span_s:.1f} s after it; {span}"
                  + "".join(f"; {n}" for n in (v.note, r.note) if n))


def valley_text(run: Run) -> str:
    v = run.valley
    if v is None:
        return ""
    if v.lowest_share is None:
        return f"; valley: {v.note}"
    return (f"; 2-s windows: median {v.median_mbps:.1f} Mbit/s, lowest {v.lowest_mbps:.1f} "
            f"at {v.lowest_at_s:.1f} s, lowest/median {v.lowest_share:.2f}")


def save_series(runs: list[Run], directory: Path, plots: bool = True) -> None:
    """Case c's bytes at the destination: one JSON file and, with matplotlib and `plots`,
    one PNG per link and dataset (the engines together) in `directory`."""
    mine = [r for r in runs if r.valley is not None]
    if not mine:
        return
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series.json").write_text(json.dumps(
        [{"profile": r.profile, "dataset": r.dataset, "engine": r.engine, "seconds": r.seconds,
          "cc": r.cc, "tail_bytes": r.tail_bytes, "series": r.series,
          "valley": vars(r.valley)} for r in mine]))
    if not plots:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"<!-- no matplotlib: series in {directory / 'series.json'}, no plots -->")
        return
    for profile, key in dict.fromkeys((r.profile, r.dataset) for r in mine):
        fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
        for r in (r for r in mine if (r.profile, r.dataset) == (profile, key)):
            assert r.valley is not None
            top.plot([t for t, _ in r.series], [b / 1e6 for _, b in r.series], label=r.engine)
            rates = window_rates(r.series)
            line, = bottom.plot([t for t, _ in rates], [m for _, m in rates], label=r.engine)
            v = r.valley
            if v.judged_from_s is not None and v.judged_to_s is not None:
                bottom.axvspan(v.start_s + v.judged_from_s,  # the windows' starts
                               v.start_s + v.judged_to_s - WINDOW_S,
                               color=line.get_color(), alpha=0.08)
            if v.median_mbps is not None:
                bottom.axhline(v.median_mbps * VALLEY_TARGET, color=line.get_color(),
                               linestyle=":", linewidth=1)
        bottom.set_ylim(bottom=0)
        top.set_ylabel("MB at the destination")
        bottom.set_ylabel("2-s window, Mbit/s (start)")
        bottom.set_xlabel("seconds after the submission")
        top.set_title(f"{profile}, {DATASETS[key].spec}, case (c): shaded the span judged, "
                      "dotted half the median", fontsize=9)
        top.legend()
        fig.tight_layout()
        fig.savefig(directory / f"{profile}-{key}.png", dpi=100)
        plt.close(fig)
    print(f"<!-- case c's series and plots in {directory} -->")


def print_targets(runs: list[Run], store: dict[str, Any] | None) -> None:
    by = {(r.profile, r.dataset, r.case): r for r in runs}
    print("\nTargets:")
    d = by.get(("wan40", "2000x256K", "d"))
    if d:
        a = by.get(("wan40", "2000x256K", "a"))
        beside = f"; (a) reaches {a.share:.3f} on its {a.files} files" if a else ""
        print(f"- wan40, 2000x256K, (d) at least 50% of the link: "
              f"{'met' if d.share >= 0.5 else 'MISSED'} ({d.share:.3f}{beside})")
    for case in ("c", "ca"):
        for c in runs:
            d = by.get((c.profile, c.dataset, "d"))
            if c.case != case or not d:
                continue
            ratio = c.mbps / d.mbps
            print(f"- {c.profile}, {DATASETS[c.dataset].spec}, {c.label} at least 70% of (d): "
                  f"{'met' if ratio >= 0.7 else 'MISSED'} ({ratio:.2f})")
    for c in runs:
        if c.valley is None:
            continue
        share, low = c.share, c.valley.lowest_share
        print(f"- {c.profile}, {DATASETS[c.dataset].spec}, {c.label}: share of the link at "
              f"least {SHARE_TARGET}: {'met' if share >= SHARE_TARGET else 'MISSED'} "
              f"({share:.3f}); lowest 2-s window at least {VALLEY_TARGET} of the median: "
              + ("not judged (too little data)" if low is None else
                 f"{'met' if low >= VALLEY_TARGET else 'MISSED'} ({low:.2f})"))
    if store:
        print(f"- stork_submit of {store['files']} files under 10 s: "
              f"{'met' if store['submit_s'] < 10 else 'MISSED'} ({store['submit_s']:.2f} s)")
        print(f"- stork_q over it under 1 s: {'met' if store['q_s'] < 1 else 'MISSED'} "
              f"({store['q_s']:.2f} s median)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--only", default=",".join((*CASES, "store")),
                        help="comma-separated cases: a, b, c, d, ca, store (default: all)")
    parser.add_argument("--datasets", default=",".join(DATASETS),
                        help="comma-separated, from: " + ", ".join(DATASETS))
    parser.add_argument("--ca-datasets", default="2000x256K",
                        help="comma-separated datasets of case ca (2000x256K)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="comma-separated STORK_ENGINE values case c runs with, one run "
                             "each (default: batch,flow)")
    parser.add_argument("--grid", default=DEFAULT_GRID, help=f"sweep grid ({DEFAULT_GRID})")
    parser.add_argument("--max-num-jobs", type=int, default=10,
                        help="STORK_MAX_NUM_JOBS of the daemons (10, the default)")
    parser.add_argument("--seed", type=int, default=1, help="dataset sizes and bytes (1)")
    parser.add_argument("--store-files", type=int, default=100_000)
    args = parser.parse_args()
    args.only = [c.strip() for c in args.only.split(",")]
    args.datasets = [d.strip() for d in args.datasets.split(",")]
    args.ca_datasets = [d.strip() for d in args.ca_datasets.split(",")]
    args.engines = list(dict.fromkeys(e.strip() for e in args.engines.split(",")))
    bad = [c for c in args.only if c not in (*CASES, "store")] + \
        [d for d in (*args.datasets, *args.ca_datasets) if d not in DATASETS] + \
        [e for e in args.engines if e not in ENGINES]
    if bad or not args.engines:
        parser.error(f"unknown cases, datasets or engines: {bad or args.engines}")
    started = time.monotonic()
    runs: list[Run] = []
    sweeps: dict[tuple[str, str], Sweep] = {}
    profiles = topologies(args, ("wan40", "lan10"))
    try:
        if any(c in CASES for c in args.only):
            for name, topology in profiles:
                with Testbed(topology, args.workdir / f"dataset-{name}", congestion=args.cc) as bed:
                    run_profile(name, bed, args, args.workdir / "datasets", runs, sweeps)
    except TestbedUnavailable as exc:
        print(f"bench_dataset: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    store = store_figure(args.workdir, args.store_files) if "store" in args.only else None
    print(f"\n## Datasets ({args.cc}, seed {args.seed}, daemon in site b unless said, "
          f"STORK_MAX_NUM_JOBS = {args.max_num_jobs})")
    links = [(n, t.links[0]) for n, t in profiles]
    print_tables(runs, sweeps, links, args)
    print_valley(runs, links)
    save_series(runs, args.workdir / "valley")
    if store:
        print(f"\n### The store: a {store['files']}-file local dataset\n")
        print("| files | listed by the job | stork_submit | stork_q (median of 3) | stork_q runs "
              "| the job after them |")
        print("| ---: | ---: | ---: | ---: | --- | --- |")
        print(f"| {store['files']} | {store['listed']} | {store['submit_s']:.2f} s | "
              f"{store['q_s']:.2f} s | {', '.join(f'{s:.2f}' for s in store['q_runs'])} s | "
              f"{store['state']} |")
    print_targets(runs, store)
    print(f"\nwall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
