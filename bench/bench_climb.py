"""The online optimizer `climb` end to end on emulated links, against the preset and fixed
settings, in one run.

    .venv/bin/python bench/bench_climb.py [--profile wan40] [--workloads dataset,file]
        [--repeats 2] [--dataset 2000x256K] [--file-mb 1024] [--fixed-dataset 4/1/4,...]
        [--fixed-file 2/4/1,...] [--knob NAME=VALUE ...]

Per link profile two sites are built and each workload moved third party from site a to
site b by a real stork_server inside site b (``STORK_LINK_MBPS`` the link's rate):

    dataset  the files of --dataset (a `tests.testbed.dataset` spec, seed 1; by default
             2000 files of 256 KiB)
    file     one file of --file-mb MiB, sent as byte ranges by the engine

Cases, each timed from submission to the job's end (all tuning included):

    preset     no optimization: the per-class preset (dataset) or the daemon's default
               streams (file; STORK_DEFAULT_STREAMS 1 sends one range of one stream at a
               time: the job is removed after PRESET_FILE_TIMEOUT_S and its rate is what it
               moved by then)
    cc=C p=P   fixed settings (``arguments = "-cc C -p P -pp PP"``), the sweep:
               FIXED_DATASET, FIXED_FILE
    yes k      optimization = "YES", what a user gets today: the dataset's optimizer
               (EOS_OPTIMIZER, climb since 2026-11-26; harp before: probes, then batches)
               or the file's EOS (samples, then the transfer), k = 1 .. repeats + 1 on a
               daemon of its own (empty log first)
    harp k     optimization = "harp" (the datasets' YES before), the same way
    climb 1    optimization = "climb" on a daemon with an empty transfer log (its prior is
               the preset)
    climb k    the same daemon again, k = 2 .. repeats + 1: its prior comes from the
               transfer log rows of the runs before it on this path, never from the run
               judged

The cases are interleaved: round r runs the preset and each fixed setting (while r <
--baseline-repeats) and then run r of each optimizer, one daemon at a time (each case's
daemon started again on its own store), so a drift of the machine or the link over the run
reaches every case alike. `--knob NAME=VALUE` (repeatable) sets a configuration knob of every
daemon of the run, baselines and optimizers alike (e.g. STORK_RANGE_MIN_MB=16).

Printed per workload: seconds, Mbit/s, share of the link, the ratio to the preset's mean and
to the mean of the best fixed setting of this run (the best of several single runs would be
the luckiest, not the best), each case's mean over its runs, the streams (cc x p) and their
ratio to the fewest streams of any fixed setting whose mean is within 5% of the best one,
and for climb the changes it made and the setting it held. The streams of a climb run are
time-weighted over the engine's settings (the prior from the start, each change from the
time the controller made it, the last one to the job's end; a change of p reaches a worker
at its next call, so this is a little ahead of the flow); of a "yes" run the setting its
optimizer decided (the dataset's probes are not counted) or the EOS's streams over the
file's ranges; of the preset the dataset's chunks as planned (`dataset_chunks`), weighed by their
bytes, or the file's one stream.
Needs root, /dev/net/tun and `ip netns`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.server.file_run import range_setting
from tests.support import StorkServer, make_file
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.dataset import DatasetError, parse_spec, plan, write
from tests.testbed.jobs import finish, site_daemon
from tests.testbed.netns import Testbed, TestbedUnavailable

FIXED_DATASET = ((4, 1, 4), (8, 1, 4), (16, 1, 4), (32, 1, 4))  # pp 4: the small preset's
FIXED_FILE = ((2, 4, 1), (4, 4, 1), (8, 4, 1), (4, 8, 1), (8, 8, 1))
DATASET = "2000x256K"
CASES = ("preset", "fixed", "yes", "harp", "climb")
TIMEOUT_S = 900
PRESET_FILE_TIMEOUT_S = 240  # one stream on a WAN: its rate is had long before the end
NEAR_BEST = 0.05  # a fixed setting within this share of the best is "as good" (issue 28)
_SETTING = re.compile(r"cc=(\d+) p=(\d+)")
_BYTES = re.compile(r"(\d+) bytes")


@dataclass
class Run:
    profile: str
    workload: str
    case: str
    seconds: float
    bytes: int
    state: str
    link_mbps: float
    tuning: dict[str, Any] | None = None
    streams: float | None = None  # cc x p, time-weighted for climb (see the module)
    tunings: dict[str, dict[str, Any]] = field(default_factory=dict)  # per chunk

    @property
    def mbps(self) -> float:
        return self.bytes * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0


def job(server: StorkServer, bed: Testbed, src: str, dest: str, extra: str,
        timeout_s: float) -> dict[str, Any]:
    [job_id] = server.submit(f'[ dap_type = transfer; src_url = "{bed.url("a", src)}"; '
                             f'dest_url = "{bed.url("b", dest)}"; {extra} ]\n')
    [summary] = finish(server, [job_id], timeout_s)
    return summary


def _streams_of(label: str) -> int | None:
    match = _SETTING.search(label)
    return int(match[1]) * int(match[2]) if match else None


def _tuned(tunings: dict[str, dict[str, Any]]) -> str:
    """The changes and the setting held, a chunk's named when there are several."""
    def held(t: dict[str, Any]) -> str:
        return str(t.get("setting", t.get("params", "")))

    if len(tunings) <= 1:
        t = next(iter(tunings.values()), {})
        return f"{t.get('change_count', '')} | {held(t)}"
    return (", ".join(f"{w} {t.get('change_count', '')}" for w, t in tunings.items()) + " | "
            + "; ".join(f"{w} {held(t)}" for w, t in tunings.items()))


def run_streams(case: str, summary: dict[str, Any], tuning: dict[str, Any] | None
                ) -> float | None:
    """The streams (cc x p) a run used; see the module's text."""
    result = summary.get("result") or {}
    if case.startswith("cc="):
        return _streams_of(case)
    if tuning and "prior" in tuning:  # climb: time-weighted over its settings
        started, finished = summary.get("started_at"), summary.get("finished_at")
        changes = tuning.get("changes", [])
        end = max([(finished - started) if started and finished else 0.0]
                  + [c["t_s"] for c in changes])
        start = tuning.get("start", tuning["prior"])  # a chunk holds its preset while
        points = [(0.0, start)] + [(c["t_s"], c["setting"]) for c in changes]  # not alone
        total = 0.0
        for (t, label), (t_next, _) in zip(points, [*points[1:], (end, "")], strict=True):
            total += (_streams_of(label) or 0) * max(t_next - t, 0.0)
        return total / end if end > 0 else float(_streams_of(tuning["prior"]) or 0)
    if tuning and "params" in tuning:  # a probing optimizer's decision
        return _streams_of(tuning["params"])
    if result.get("optimized_streams"):  # the EOS's streams over the file's ranges
        setting = range_setting(int(result["optimized_streams"]), None)
        return setting.cc * setting.p
    if result.get("dataset_chunks"):  # the chunks as planned, weighed by their bytes
        weighed = [(_streams_of(c), int(m[1]) if (m := _BYTES.search(c)) else 0)
                   for c in result["dataset_chunks"]]
        total = sum(b for s, b in weighed if s is not None)
        return sum(s * b for s, b in weighed if s is not None) / total if total else None
    if case == "preset":  # the file's default streams: one range of one stream
        return 1
    return None


def one(profile: str, workload: str, case: str, server: StorkServer, bed: Testbed,
        src: str, dest: Path, extra: str, link_mbps: float,
        timeout_s: float = TIMEOUT_S) -> Run:
    dest.mkdir(parents=True, exist_ok=True)
    target = f"{dest}/" if src.endswith("/") else str(dest / "file.dat")
    try:
        summary = job(server, bed, src, target, extra, timeout_s)
    finally:  # a run's copy is not kept: a few 4 GiB copies fill a disk
        shutil.rmtree(dest, ignore_errors=True)
    seconds = (summary["finished_at"] or time.time()) - summary["submitted_at"]
    result = summary.get("result") or {}
    tunings = {k.removeprefix("optimizer_"): v for k, v in result.items()
               if k.startswith("optimizer_")}
    for what, chunk in tunings.items():  # a dataset's chunks, a file's ranges
        for change in chunk.get("changes", []):
            print(f"<!--   {what} {change['t_s']:6.1f} s {change['setting']}: "
                  f"{change['reason']} -->")
    tuning = next(iter(tunings.values()), None)
    run = Run(profile, workload, case, seconds, summary["bytes_done"], summary["state"],
              link_mbps, tuning, run_streams(case, summary, tuning), tunings)
    print(f"<!-- {profile} {workload} {case}: {run.state}, {run.mbps:.1f} Mbit/s, "
          f"{seconds:.1f} s{'' if tuning is None else ', ' + str(tuning.get('setting'))} -->",
          flush=True)
    return run


def workload_runs(profile: str, workload: str, bed: Testbed, src: str, link_mbps: float,
                  args: argparse.Namespace) -> list[Run]:
    """Every case's runs, interleaved: round r runs each baseline (the preset and the fixed
    settings, `--baseline-repeats` rounds) and then run r of each optimizer (its daemon
    started again on its own store, so its runs learn from the ones before), so a drift of
    the machine or the link over the run reaches every case alike. One daemon runs at a
    time."""
    fixed = args.fixed_dataset if workload == "dataset" else args.fixed_file
    out = bed.site_dir("b") / f"out-{workload}"
    runs = []
    n = 0

    def dest() -> Path:
        nonlocal n
        n += 1
        return out / f"run{n}"

    baselines = ([("preset", "", TIMEOUT_S if workload == "dataset" else args.preset_timeout)]
                 if "preset" in args.cases else [])
    baselines += [(f"cc={cc} p={p} pp={pp}", f'arguments = "-cc {cc} -p {p} -pp {pp}";',
                   TIMEOUT_S) for cc, p, pp in (fixed if "fixed" in args.cases else ())]
    tuned = [c for c in CASES[2:] if c in args.cases]
    stores = {name: bed.workdir / f"stork-{workload}-{name}" for name in ["baselines", *tuned]}
    rounds = max(args.baseline_repeats if baselines else 0, args.repeats + 1 if tuned else 0)
    for r in range(rounds):
        if r < args.baseline_repeats and baselines:
            server = site_daemon(bed, "b", args.knob, workdir=stores["baselines"]).start()
            try:
                for case, extra, timeout_s in baselines:
                    runs.append(one(profile, workload, case, server, bed, src, dest(), extra,
                                    link_mbps, timeout_s))
            finally:
                server.stop()
        for name in tuned if r < args.repeats + 1 else ():
            server = site_daemon(bed, "b", args.knob, workdir=stores[name]).start()
            try:
                runs.append(one(profile, workload, f"{name} {r + 1}", server, bed, src, dest(),
                                f'optimization = "{name.upper() if name == "yes" else name}";',
                                link_mbps))
            finally:
                server.stop()
    return runs


def _ratios(mbps: float, streams: float | None, preset: Case | None, best: Case | None,
            fewest: float | None) -> str:
    """The table's columns of a rate and its streams against the preset, the best fixed
    setting and the fewest streams near it."""
    to_preset = f"{mbps / preset.mbps:.2f}" if preset and preset.mbps else "-"
    to_best = f"{mbps / best.mbps:.3f}" if best and best.mbps else "-"
    shown = "-" if streams is None else f"{streams:.1f}"
    to_fewest = f"{streams / fewest:.2f}" if streams and fewest else "-"
    return f"{to_preset} | {to_best} | {shown} | {to_fewest}"


@dataclass(frozen=True)
class Case:
    """A case's runs that completed, as one: the mean of their rates and of their streams."""

    profile: str
    workload: str
    name: str  # "preset", "cc=C p=P pp=PP", or an optimizer's name ("yes")
    mbps: float
    streams: float | None
    count: int


def case_of(run: Run) -> str:
    """The case a run belongs to: an optimizer's run k ("yes 2") is one of its case's."""
    name = run.case.split(" ", 1)[0]
    return name if name in CASES[2:] else run.case


def cases(runs: list[Run]) -> list[Case]:
    """Each (profile, workload, case) of `runs` as one `Case`, in the order first seen; a
    case none of whose runs completed is left out."""
    keys = dict.fromkeys((r.profile, r.workload, case_of(r)) for r in runs)
    out = []
    for profile, workload, name in keys:
        done = [r for r in runs if (r.profile, r.workload, case_of(r)) == (profile, workload,
                                                                           name)
                and r.state == "COMPLETED"]
        if not done:
            continue
        streams = [r.streams for r in done if r.streams is not None]
        out.append(Case(profile, workload, name, statistics.fmean(r.mbps for r in done),
                        statistics.fmean(streams) if streams else None, len(done)))
    return out


def best_fixed(group: list[Case]) -> tuple[Case | None, float | None]:
    """The fixed setting of the best mean rate, and the fewest streams of any fixed setting
    whose mean is within NEAR_BEST of it."""
    fixed = [c for c in group if c.name.startswith("cc=")]
    best = max(fixed, key=lambda c: c.mbps, default=None)
    near = [c.streams for c in fixed if best and c.streams
            and c.mbps >= best.mbps * (1 - NEAR_BEST)]
    return best, min(near, default=None)


def print_table(runs: list[Run]) -> None:
    """Each run against the preset's mean and the best fixed setting's mean (over their
    repeats: the best of several single runs would be the luckiest, not the best), then
    each case's mean."""
    print("\n| profile | workload | case | state | seconds | Mbit/s | share of link | "
          "/ preset | / best fixed | streams | / fewest within 5% | changes | held |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| --- |")
    summary = cases(runs)
    for key in dict.fromkeys((r.profile, r.workload) for r in runs):
        group = [c for c in summary if (c.profile, c.workload) == key]
        preset = next((c for c in group if c.name == "preset"), None)
        best, fewest = best_fixed(group)

        link = next(r.link_mbps for r in runs if (r.profile, r.workload) == key)
        order = {c.name: i for i, c in enumerate(group)}
        for r in sorted((r for r in runs if (r.profile, r.workload) == key),
                        key=lambda r: order.get(case_of(r), len(order))):
            print(f"| {r.profile} | {r.workload} | {r.case} | {r.state} | {r.seconds:.1f} | "
                  f"{r.mbps:.1f} | {r.mbps / r.link_mbps:.3f} | "
                  f"{_ratios(r.mbps, r.streams, preset, best, fewest)} | "
                  f"{_tuned(r.tunings)} |")
        for c in (c for c in group if c.count > 1):
            print(f"| {c.profile} | {c.workload} | {c.name}: mean of {c.count} | | | "
                  f"{c.mbps:.1f} | {c.mbps / link:.3f} | "
                  f"{_ratios(c.mbps, c.streams, preset, best, fewest)} | | |")
        if best is not None:
            print(f"\n(best fixed setting of {key[0]} {key[1]}: {best.name}, "
                  f"{best.mbps:.1f} Mbit/s over {best.count} run{'s' * (best.count > 1)}; "
                  f"the fewest streams within {NEAR_BEST:.0%} of it: "
                  f"{fewest if fewest is None else round(fewest)})\n")


def knobs_of(texts: list[str]) -> dict[str, str]:
    """`--knob NAME=VALUE` options as a dict; a ValueError naming the first malformed one
    or one that names no knob of `stork.config`."""
    from stork.config import KNOBS

    names = {k.name for k in KNOBS}
    out = {}
    for text in texts:
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--knob {text!r}: expected NAME=VALUE")
        if name.strip() not in names:
            raise ValueError(f"--knob {text!r}: {name.strip()} is not a configuration knob")
        out[name.strip()] = value.strip()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--workloads", default="dataset,file")
    parser.add_argument("--cases", default="preset,fixed,yes,climb",
                        help=f"comma-separated, of {', '.join(CASES)} "
                             f"(default: all but harp)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="climb runs after the first, each learning from those before")
    parser.add_argument("--baseline-repeats", type=int, default=1,
                        help="runs of the preset and of each fixed setting, each in a round "
                             "of its own between the optimizers' runs (default 1)")
    parser.add_argument("--dataset", default=DATASET,
                        help=f"the dataset workload's files, COUNTxSIZE[,...] ({DATASET})")
    parser.add_argument("--file-mb", type=int, default=1024)
    parser.add_argument("--fixed-dataset",
                        default=",".join(f"{c}/{p}/{pp}" for c, p, pp in FIXED_DATASET),
                        help="the dataset's fixed settings, cc/p/pp comma-separated")
    parser.add_argument("--fixed-file",
                        default=",".join(f"{c}/{p}/{pp}" for c, p, pp in FIXED_FILE),
                        help="the file's fixed settings, cc/p/pp comma-separated")
    parser.add_argument("--preset-timeout", type=float, default=PRESET_FILE_TIMEOUT_S,
                        help=f"seconds the file's preset runs ({PRESET_FILE_TIMEOUT_S:g})")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="a configuration knob of every daemon of the run (repeatable)")
    args = parser.parse_args()
    try:
        args.knob = knobs_of(args.knob)
    except ValueError as exc:
        parser.error(str(exc))
    workloads = [w.strip() for w in args.workloads.split(",")]
    if bad := [w for w in workloads if w not in ("dataset", "file")]:
        parser.error(f"unknown workloads {bad}: dataset, file")
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if bad := [c for c in args.cases if c not in CASES]:
        parser.error(f"unknown cases {bad}: {', '.join(CASES)}")
    try:
        parse_spec(args.dataset)
    except DatasetError as exc:
        parser.error(f"--dataset {args.dataset!r}: {exc}")
    if args.repeats < 0 or args.file_mb < 1 or args.baseline_repeats < 1:
        parser.error("--repeats must be 0 or more, --baseline-repeats and --file-mb 1 or more")
    for option in ("fixed_dataset", "fixed_file"):
        text = getattr(args, option)
        flag = "--" + option.replace("_", "-")
        try:
            cells = tuple(tuple(int(x) for x in cell.split("/"))
                          for cell in text.split(",") if cell)
        except ValueError:
            parser.error(f"{flag} {text!r}: expected cc/p/pp,cc/p/pp")
        if any(len(cell) != 3 or min(cell) < 1 for cell in cells):
            parser.error(f"{flag} {text!r}: each cell is cc/p/pp, each >= 1")
        setattr(args, option, cells)
    for name, _ in topologies(args, ("wan40",)):
        # a daemon started on a store it finds resumes that store's jobs beside the run's
        old = sorted(args.workdir.glob(f"climb-{name}/stork-*/state"))
        if old:
            parser.error(f"--workdir {args.workdir}: {old[0]} holds the store of an earlier run,"
                         f" whose daemon would resume its jobs beside this run's; name another "
                         f"--workdir or remove that one")
    started = time.monotonic()
    print("<!-- load average at the start: {:.2f} {:.2f} {:.2f} -->".format(*os.getloadavg()),
          flush=True)
    runs: list[Run] = []
    try:
        for name, topology in topologies(args, ("wan40",)):
            link_mbps = topology.links[0].rate_mbps
            with Testbed(topology, args.workdir / f"climb-{name}", congestion=args.cc) as bed:
                site_a = bed.site_dir("a")
                for workload in workloads:
                    if workload == "dataset":
                        data = write(plan(args.dataset, 1), site_a / "data")
                        src = f"{data}/"
                    else:
                        path = site_a / f"file-{args.file_mb}M.dat"
                        if not path.exists():
                            make_file(path, args.file_mb << 20, seed=11)
                        src = str(path)
                    runs += workload_runs(name, workload, bed, src, link_mbps, args)
    except TestbedUnavailable as exc:
        print(f"bench_climb: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    what = f"the dataset {args.dataset}; " if "dataset" in workloads else ""
    print(f"\n## climb end to end ({what}{args.cc}; {args.baseline_repeats} run(s) a baseline, "
          f"{args.repeats + 1} an optimizer, interleaved; seconds from submission to the "
          f"job's end)")
    if args.knob:
        print("\nevery daemon with " + ", ".join(f"{k} = {v}" for k, v in args.knob.items()))
    print_table(runs)
    print(f"\nwall time: {time.monotonic() - started:.0f} s; load average at the end: "
          "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
