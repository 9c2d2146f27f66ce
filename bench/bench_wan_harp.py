"""HARP on emulated wide-area links, learning from the dataset sweeps (issue 14, point 5).

    .venv/bin/python bench/bench_wan_harp.py [--profile wan40 ...]
        [--datasets 2000x256K,500x2M,20x64M,mix] [--grid "cc=8,16 p=1,4 pp=0,1 fast=1"]
        [--cases default,harp,eos,best] [--sweep-stop 1.25] [--leave-out] [--cap S]
        [--out runs.jsonl]

Per link profile (default wan40) two sites are built and, for each dataset of
`bench/bench_dataset.py` (seeded, the same files), the sweep of that benchmark's case (d) runs
over the dataset's first files (`tests.testbed.grid`; one run a cell, a cell slower than
`--sweep-stop` (1.25) times the best so far plus 5 s stopped: it leaves no row). Every row the
sweeps recorded is written in the HARP grid columns to WORKDIR/harp-history-PROFILE.csv: the
history. Then, per dataset, four dataset jobs move the whole dataset from site a to site b,
each submitted to a fresh stork_server inside site b (`STORK_LINK_MBPS` = the link's rate)
whose transfer log holds only that history (`stork_history import`), so no job learns from
another job of the run:

    default    no arguments: the defaults per size class (`stork.dataset.chunks`)
    harp       optimization = "harp": HARP from the history, probing with real files
    eos        optimization = "eos": the streams-only EOS (samples streams at cc = 1, pp = 1)
    best cell  the sweep's best cell as the job's arguments (bench_dataset's case d)

`--cases` runs only some of them (the `eos` case, at cc = 1, takes minutes on datasets of
many files). With --leave-out, the history imported for a dataset's jobs leaves out that
dataset's own sweep (HARP then learns only from the other datasets). Per job: throughput
(bytes over the time from submission to the end) as a share of the link rate, and seconds;
the table puts the cases side by side with harp / default, harp / eos and harp / best cell
("-": not run), and each optimizer's recorded reason per chunk. Needs root, /dev/net/tun
and `ip netns`.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_dataset as ds

from tests.support import StorkServer
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.dataset import Dataset, plan, problems, write
from tests.testbed.grid import GridLog, default_timeout_s, parse_grid
from tests.testbed.jobs import finish, site_daemon
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import Link

CASES = ("default", "harp", "eos", "best")
CASE_NAMES = {"default": "default", "harp": "harp", "eos": "eos (streams)",
              "best": "best cell"}


def fresh_daemon(bed: Testbed, history: list[Path]) -> StorkServer:
    """A stork_server in site b whose transfer log holds the given sweep tables only."""
    server = site_daemon(bed, "b").start()  # STORK_LINK_MBPS: the link's rate
    if history:
        answer = server.cli("stork_history", "import", *(str(p) for p in history), check=True)
        print(f"<!-- {answer.stdout.strip().replace(chr(10), '; ')} -->", flush=True)
    return server


def job(bed: Testbed, link: Link, history: list[Path], src: Path, part: Dataset,
        extra: str, cap_s: float) -> dict[str, Any]:
    """One dataset job of the whole dataset (removed when still running after `cap_s`, if
    given); its summary, with the files checked."""
    dest = bed.site_dir("b") / "in"
    shutil.rmtree(dest, ignore_errors=True)
    server = fresh_daemon(bed, history)
    try:
        [job_id] = server.submit(f'[ dap_type = transfer; src_url = "{bed.url("a", src)}/"; '
                                 f'dest_url = "{bed.url("b", dest)}/"; {extra}]\n')
        timeout = 4 * default_timeout_s(part, link)
        [summary] = finish(server, [job_id], min(timeout, cap_s) if cap_s else timeout)
    finally:
        server.stop()
    broken = problems(part, dest)
    shutil.rmtree(dest, ignore_errors=True)
    summary["broken"] = len(broken)
    return summary


def best_recorded(table: Path) -> tuple[str, dict[str, Any]]:
    """The fastest row of a sweep's table (written by an earlier run) as a job's arguments,
    and the sweep's summary for the tables."""
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    top = max(rows, key=lambda r: float(r["Throughput"]))
    pp = int(top["Pipelining"])
    label = (f"cc={top['Concurrency']} p={top['Parallelism']} pp={1 if pp > 1 else 0} "
             f"fast={top['Fast']}")
    return (f"-cc {top['Concurrency']} -p {top['Parallelism']} -pp {pp}",
            {"case": "sweep", "best": label, "files": int(top["FileCount"]),
             "mbps": float(top["Throughput"]), "rows": len(rows)})


def extra_of(case: str, best: str) -> str:
    return {"default": "", "harp": 'optimization = "harp"; ',
            "eos": 'optimization = "eos"; ', "best": f'arguments = "{best}"; '}[case]


def decided(summary: dict[str, Any]) -> str:
    """What the job ran with: its chunks, and each optimizer's choice and probes."""
    result = summary.get("result") or {}
    parts = [ds.chunks_text(summary)]
    for key in sorted(k for k in result if k.startswith("optimizer_")):
        info = result[key]
        probes = len(info.get("probes") or [])
        parts.append(f"{key[10:]}: {info.get('optimizer')} chose {info.get('params', '?')} "
                     f"({probes} probes, retunes {info.get('retunes', 0)}"
                     f"{', failed: ' + str(info['failure'])[:80] if info.get('failure') else ''})")
    if "optimized_streams" in result:
        parts.append(f"EOS: {result['optimized_streams']} streams "
                     f"({result.get('optimization_source', '?')})")
    return "; ".join(parts)


def run_profile(name: str, bed: Testbed, args: argparse.Namespace, data: Path,
                out: list[dict[str, Any]]) -> None:
    link = bed.topology.links[0]
    grid = parse_grid(args.grid.split())
    history_dir = args.history_from or args.workdir / f"harp-history-{name}"
    if not args.history_from:
        shutil.rmtree(history_dir, ignore_errors=True)
        history_dir.mkdir(parents=True)
    tables: dict[str, Path] = {}
    sources: dict[str, tuple[Dataset, Path]] = {}
    best: dict[str, str] = {}
    for key in args.datasets:
        dataset = plan(ds.DATASETS[key].spec, args.seed)
        source = write(dataset, data / dataset.dirname)
        sources[key] = (dataset, source)
        if args.history_from:
            tables[key] = history_dir / f"{key}.csv"
            best[key], record = best_recorded(tables[key])
            out.append({"profile": name, "dataset": key, **record})
            continue
        swept = ds.sweep(bed, link, key, *ds.view(source, dataset, ds.DATASETS[key].sweep), grid,
                         args.sweep_stop)
        tables[key] = history_dir / f"{key}.csv"
        log = GridLog(tables[key])
        for row in swept.rows.values():
            log.append(row)
        if swept.best is not None:
            best[key] = ds.flags_of(swept.best)
            cell = swept.rows[swept.best]
            out.append({"profile": name, "dataset": key, "case": "sweep",
                        "best": swept.best.label, "files": swept.files,
                        "mbps": cell.throughput_mbps, "rows": len(swept.rows),
                        "stopped": len(swept.stopped)})
    for key in args.datasets:
        dataset, src = sources[key]
        _, source = ds.view(src, dataset, dataset.count)  # the files alone, no manifest
        history = [p for k, p in tables.items() if not (args.leave_out and k == key)]
        for case in args.cases:
            if case == "best" and key not in best:
                continue
            began = time.monotonic()
            summary = job(bed, link, history, source, dataset, extra_of(case, best.get(key, "")),
                          args.cap)
            seconds = (summary["finished_at"] or time.time()) - summary["submitted_at"]
            record = {"profile": name, "dataset": key, "case": case, "state": summary["state"],
                      "files": summary["files_done"], "total": dataset.count,
                      "bytes": summary["bytes_done"], "seconds": seconds,
                      "rate_mbps": link.rate_mbps, "broken": summary["broken"],
                      "used": decided(summary), "result": summary.get("result")}
            out.append(record)
            mbps = record["bytes"] * 8 / 1e6 / seconds if seconds > 0 else 0.0
            print(f"<!-- {name} {key} {case}: {record['files']}/{dataset.count} files, "
                  f"{mbps:.1f} Mbit/s, {seconds:.1f} s; {record['used']} (took "
                  f"{time.monotonic() - began:.0f} s, {time.strftime('%H:%M:%S')}) -->",
                  flush=True)
            if args.out:
                with open(args.out, "a") as handle:
                    handle.write(json.dumps(record) + "\n")


def share(record: dict[str, Any] | None) -> tuple[str, float | None]:
    if record is None:
        return "-", None
    seconds = float(record["seconds"])
    mbps = record["bytes"] * 8 / 1e6 / seconds if seconds > 0 else 0.0
    whole = record["state"] == "COMPLETED" and not record["broken"] \
        and record["files"] == record["total"]
    mark = "" if whole else (f" ({record['state']}, {record['files']}/{record['total']} "
                             "files)")
    return f"{mbps / record['rate_mbps']:.3f} ({seconds:.1f} s){mark}", mbps


def print_tables(out: list[dict[str, Any]], profiles: list[tuple[str, Link]],
                 args: argparse.Namespace) -> None:
    for name, link in profiles:
        mine = [r for r in out if r["profile"] == name]
        if not mine:
            continue
        by = {(r["dataset"], r["case"]): r for r in mine}
        source = (f"the sweep tables in {args.history_from}" if args.history_from
                  else f"the sweeps (`{args.grid}`)")
        print(f"\n### {name}: {link.label}; history: {source}"
              f"{', leaving out the dataset its own' if args.leave_out else ''}\n")
        print("| dataset | default | harp | eos (streams) | best cell | harp/default | "
              "harp/eos | harp/best |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for key in dict.fromkeys(r["dataset"] for r in mine):
            cells = {c: share(by.get((key, c))) for c in CASES}
            harp = cells["harp"][1]
            ratios = [f"{harp / other:.2f}" if harp and other else "-"
                      for other in (cells[c][1] for c in ("default", "eos", "best"))]
            print(f"| {ds.DATASETS[key].spec} | {cells['default'][0]} | {cells['harp'][0]} | "
                  f"{cells['eos'][0]} | {cells['best'][0]} | {' | '.join(ratios)} |")
        print(f"\n{name}: what each job ran with\n")
        print("| dataset | case | parameters |")
        print("| --- | --- | --- |")
        for r in mine:
            if r["case"] in CASES:
                print(f"| {ds.DATASETS[r['dataset']].spec} | {CASE_NAMES[r['case']]} | "
                      f"{r['used']} |")
        print(f"\n{name}: what each optimizer recorded as its reason, per chunk\n")
        print("| dataset | case | chunk | params | reason |")
        print("| --- | --- | --- | --- | --- |")
        for r in mine:
            result = r.get("result") or {}
            for key in sorted(k for k in result if k.startswith("optimizer_")):
                info = result[key]
                print(f"| {ds.DATASETS[r['dataset']].spec} | {CASE_NAMES[r['case']]} | "
                      f"{key[10:]} | {info.get('params', '?')} | {info.get('reason', '?')} |")
        print(f"\n{name}: the sweeps (history rows per dataset, best cell on the first files)\n")
        print("| dataset | files swept | rows | stopped cells | best cell | its Mbit/s |")
        print("| --- | ---: | ---: | ---: | --- | ---: |")
        for r in mine:
            if r["case"] == "sweep":
                print(f"| {ds.DATASETS[r['dataset']].spec} | {r['files']} | {r['rows']} | "
                      f"{r.get('stopped', '?')} | {r['best']} | {r['mbps']:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--datasets", default=",".join(ds.DATASETS),
                        help="comma-separated, from: " + ", ".join(ds.DATASETS))
    parser.add_argument("--grid", default=ds.DEFAULT_GRID,
                        help=f"sweep grid, the history ({ds.DEFAULT_GRID})")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated jobs per dataset, from: " + ", ".join(CASES))
    parser.add_argument("--sweep-stop", type=float, default=1.25, metavar="FACTOR",
                        help="a sweep cell running longer than FACTOR x the best time so far "
                             "+ 5 s is stopped and leaves no row (1.25)")
    parser.add_argument("--leave-out", action="store_true",
                        help="a dataset's jobs learn from the other datasets' sweeps only")
    parser.add_argument("--history-from", type=Path, metavar="DIR",
                        help="take the sweeps' tables (DATASET.csv) from an earlier run's "
                             "WORKDIR/harp-history-PROFILE instead of sweeping again")
    parser.add_argument("--cap", type=float, default=0.0,
                        help="seconds after which a job is removed (its share is then of what "
                             "it moved by then; 0: 4 x the grid's run timeout)")
    parser.add_argument("--seed", type=int, default=1, help="dataset sizes and bytes (1)")
    parser.add_argument("--out", type=Path, help="JSON lines: every job and sweep")
    args = parser.parse_args()
    args.datasets = [d.strip() for d in args.datasets.split(",")]
    args.cases = [c.strip() for c in args.cases.split(",")]
    bad = [d for d in args.datasets if d not in ds.DATASETS] + \
        [c for c in args.cases if c not in CASES]
    if bad:
        parser.error(f"unknown datasets or cases: {bad}")
    started = time.monotonic()
    out: list[dict[str, Any]] = []
    profiles = topologies(args, ("wan40",))
    try:
        for name, topology in profiles:
            with Testbed(topology, args.workdir / f"harp-{name}", congestion=args.cc) as bed:
                run_profile(name, bed, args, args.workdir / "datasets", out)
    except TestbedUnavailable as exc:
        print(f"bench_wan_harp: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    print(f"\n## HARP on the testbed ({args.cc}, seed {args.seed}, daemon in site b, a fresh "
          f"daemon per job; share of the link rate (seconds from submission to the end))")
    print_tables(out, [(n, t.links[0]) for n, t in profiles], args)
    print(f"\nwall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
