"""Ground truth from GridFTP transfers between two sites over an emulated link.

Streams, one file (JSON: the link, every run, the median by stream count):

    python -m tests.testbed.sweep --profile wan40 --size 100M --repeat 3 --out wan40.json

A dataset over a (cc, p, pp[, fast]) grid (CSV in the columns of the HARP grid tables, one
row per run, appended as each run ends; see `tests.testbed.grid`):

    python -m tests.testbed.sweep --profile wan40 --dataset 200x1M \\
        --grid cc=1,2,4,8 p=1,4 pp=0,1 --repeat 1 --out grid.csv

The dataset (`tests.testbed.dataset`: ``COUNTxSIZE``, ``COUNTxLOW-HIGH``, or a mix such as
``2000x256K,500x2M,20x64M``) is written once in site a and copied third party to site b
with ``globus-url-copy -f``. A run that fails, or leaves a file short, is reported on
stderr and not recorded; the tool then exits 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from stork.errors import ArgumentsError
from stork.transfer.options import parse_size
from tests.support import make_file
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.dataset import DatasetError, place, plan
from tests.testbed.grid import GridError, GridLog, GridRow, RunFailed, parse_grid, sweep_grid
from tests.testbed.measure import medians, sweep
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import Link

STREAMS = (1, 2, 4, 8, 16, 32)


def record(link: Link, size: int, runs: dict[int, list[float]]) -> dict[str, object]:
    return {"link": {"rtt_ms": link.rtt_ms, "rate_mbps": link.rate_mbps, "loss": link.loss,
                     "queue_bytes": link.queue},
            "size_bytes": size, "runs": runs, "median_mbps": medians(runs)}


def stream_sweep(args: argparse.Namespace) -> int:
    size = parse_size(args.size)
    repeat = args.repeat or 3
    curves = {}
    for name, topology in topologies(args, ("wan40",)):
        link = topology.links[0]
        with Testbed(topology, args.workdir / name, congestion=args.cc) as bed:
            source = make_file(bed.site_dir(link.a) / "sweep.dat", size)
            runs = sweep(bed, link.a, link.b, source, STREAMS, repeat)
        curves[name] = record(link, size, runs)
        median = medians(runs)
        best = max(median.values())
        print(f"## {link.label}, {args.size} file, median of {repeat}\n")
        print("| streams | Mbit/s (median) | share of best | runs |")
        print("| ---: | ---: | ---: | --- |")
        for n, value in median.items():
            cells = ", ".join(f"{v:.1f}" for v in runs[n])
            print(f"| {n} | {value:.1f} | {value / best:.3f} | {cells} |")
        print(flush=True)
    if args.out:
        args.out.write_text(json.dumps(curves, indent=1))
    return 0


def grid_sweep(args: argparse.Namespace) -> int:
    try:
        dataset = plan(args.dataset, args.seed)
        cells = parse_grid(args.grid or ["cc=1"])
        tcp_bs = parse_size(args.tcp_bs) if args.tcp_bs else None
        log = GridLog(args.out) if args.out else None
    except (DatasetError, GridError, ArgumentsError) as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    repeat = args.repeat or 1

    def show(row: GridRow) -> None:
        if log:
            log.append(row)
        print(",".join(row.cells()), flush=True)

    def report(failure: RunFailed) -> None:
        print(f"sweep: run not recorded: {failure}", file=sys.stderr, flush=True)

    failed = 0
    for name, topology in topologies(args, ("wan40",)):
        link = topology.links[0]
        print(f"# {name}: {link.label}; dataset {args.dataset} seed {args.seed}: "
              f"{dataset.count} files, {dataset.total_bytes} bytes; {len(cells)} cells x "
              f"{repeat}", flush=True)
        with Testbed(topology, args.workdir / name, congestion=args.cc) as bed:
            src_dir = place(bed, link.a, dataset)
            done = sweep_grid(bed, link, link.a, link.b, dataset, src_dir, cells, repeat,
                              tcp_bs, args.timeout, on_row=show, on_failure=report)
            if not args.keep:
                shutil.rmtree(bed.site_dir(link.b) / "grid-in", ignore_errors=True)
        failed += len(done.failures)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--size", default="100M", help="file size of a stream sweep (100M)")
    parser.add_argument("--repeat", type=int, help="runs of each point (streams: 3, grid: 1)")
    parser.add_argument("--out", type=Path, help="JSON (streams) or CSV (grid) to write")
    grid = parser.add_argument_group("dataset grid")
    grid.add_argument("--dataset", help="sweep a grid over this dataset, e.g. 200x1M")
    grid.add_argument("--grid", nargs="+", metavar="AXIS=V,V",
                      help="axes cc, p, pp (0/1), fast (0/1); absent axes: cc=1 p=1 pp=0 fast=0")
    grid.add_argument("--seed", type=int, default=1, help="dataset sizes and bytes (1)")
    grid.add_argument("--tcp-bs", help="pass -tcp-bs SIZE (default: kernel autotuning)")
    grid.add_argument("--timeout", type=float, help="seconds a run may take (default: "
                      "60 + 10x the time at the link rate + 10 RTT per file)")
    grid.add_argument("--keep", action="store_true",
                      help="leave the last run's files at the destination")
    args = parser.parse_args(argv)
    if args.grid and not args.dataset:
        parser.error("--grid needs --dataset")
    try:
        return grid_sweep(args) if args.dataset else stream_sweep(args)
    except TestbedUnavailable as exc:
        print(f"sweep: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
