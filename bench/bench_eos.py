"""EOS benchmarks (not tests): model cost, replay against measured curves, sampling overhead.

    .venv/bin/python bench/bench_eos.py [--skip-transfer] [--mode same|cross|both]
        [--history] [--data FILE[:NOTE] ...] [--synthetic SIGMAS] [--json]

The replay answers each sample from a measured curve instead of transferring. Every repeat of
a measurement is a curve of its own (no medians):
- ../shared/data/transfer-logs/parallelism-sweeps/{loni,didclab}.csv, rows with
  Note == "chris-parallelism": one curve per file (FileSize, FileNumbers, hosts) and repeat
  (the k-th row of a file at each P);
- ../shared/data/transfer-logs/harp-grids/{BTData,SGData}.csv: the parallelism slices of the
  grids, one curve per file, concurrency, pipelining and repeat (rows above the link's
  bandwidth are dropped with the repeat they belong to);
- synthetic: each loni file's mean curve, three repeats with lognormal noise (sigma 0.1, 0.2,
  0.3) and random dips (a count that is bad on that file in every repeat, and one-off dips).
`--data FILE[:NOTE]` replays any table in the parallelism-sweeps column format instead.
Those tables are not part of the repository and are read where they lie.

d-w probing (`dw d=D w=W`: Algorithm 1; `dw-interval`: the variant of the paper's [11];
stork/eos/probing.py) measures each level D times: the k-th measurement of a count is the
file's k-th repeat from the sampled one on (cycling; a file measured once gives the same value
again). It is judged, in `same`, on the mean of the repeats it drew on and, in `cross`, on the
mean of the file's repeats it never saw (a file with D repeats or fewer is left out: the curve
count is then given beside the name). Besides the share it reports the paper's figures: flow
selection (the chosen count is the judging curve's best), the curves within 5% of the best (the
target: 96%), and the probing overhead against a full sweep that measures every level D times
(`levels x d`) and against the paper's, which measured every configuration 10 times (`levels x
10`; the target: 25%).

Judging: `same` takes the samples and the outcome from one repeat; `cross` takes the samples
from one repeat and judges the chosen count on the mean of the file's other repeats (what a
transfer after its samples sees), on files with two repeats or more. Share = throughput at the
chosen count / the best count's, on the judging curve. `--history` replays the curves in
order and lets each optimization use what earlier curves on the same path (hosts, and
concurrency and pipelining) sampled and what their transfers achieved at the chosen count
(the repeat's own value, never the judging repeats').
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.eos.models import estimate
from stork.eos.probing import interval_search, window_search
from stork.eos.sampling import Measure, Sample, decide, doubling, guided

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO.parent / "shared" / "data" / "transfer-logs"
SWEEPS = LOGS / "parallelism-sweeps"
GRIDS = LOGS / "harp-grids"
TOLERANCE = 0.03  # EOS_TOLERANCE's default
MAX_SAMPLES = 4  # EOS_MAX_SAMPLES's default
SYNTHETIC_REPEATS = 3
DEFAULT = "guided"  # the strategy the daemon runs (EOS_SAMPLING's default)

Curve = dict[int, float]  # stream count -> Mbit/s


@dataclass(frozen=True)
class File:
    """One file (and concurrency, pipelining) measured over P, with its repeats in order."""

    key: tuple[str, ...]
    path: tuple[str, ...]  # what history is shared by: hosts (and CC, PP)
    repeats: tuple[Curve, ...]
    order: tuple[int, ...]  # each repeat's place in the table (its first row)


@dataclass(frozen=True)
class DataSet:
    name: str
    files: tuple[File, ...]
    levels: tuple[int, ...]
    note: str = ""


# a strategy replayed on one curve: (measure, allowed levels, earlier runs on the path)
# -> (samples taken, streams chosen)
History = Sequence[Sequence[Sample]]
Strategy = Callable[[Measure, list[int], History | None], tuple[list[Sample], int]]


# -- loading ------------------------------------------------------------------------------

def _mbps_limit(bandwidth: str) -> float:
    """A row's link capacity in Mbit/s (the tables mix bit/s and Mbit/s)."""
    value = float(bandwidth)
    return value / 1e6 if value > 1e6 else value


def _group(rows: list[tuple[tuple[str, ...], tuple[str, ...], int, float, bool]],
           name: str, note: str = "") -> DataSet:
    """Rows (file key, path key, P, Mbit/s, usable) -> one curve per file and repeat. The
    k-th row of a file at a P is its k-th repeat; a repeat with an unusable row is dropped."""
    table: dict[tuple[str, ...], dict[int, list[tuple[float, bool, int]]]] = defaultdict(
        lambda: defaultdict(list))
    paths: dict[tuple[str, ...], tuple[str, ...]] = {}
    for i, (key, path, p, mbps, usable) in enumerate(rows):
        table[key][p].append((mbps, usable, i))
        paths[key] = path
    files, dropped = [], 0
    for key, by_p in table.items():
        count = min(len(v) for v in by_p.values())
        repeats, order = [], []
        for r in range(count):
            if all(by_p[p][r][1] for p in by_p):
                repeats.append({p: by_p[p][r][0] for p in sorted(by_p)})
                order.append(min(by_p[p][r][2] for p in by_p))
            else:
                dropped += 1
        if repeats:
            files.append(File(key, paths[key], tuple(repeats), tuple(order)))
    levels = sorted({p for f in files for p in f.repeats[0]})
    if dropped:
        note = (note + "; " if note else "") + f"{dropped} repeats dropped (a row above the link)"
    return DataSet(name, tuple(files), tuple(levels), note)


def load_sweeps(path: Path, note: str | None = "chris-parallelism",
                name: str | None = None) -> DataSet:
    """A table in the parallelism-sweeps format; rows that differ in CC or PP are other
    curves; `note` selects the rows (None: all)."""
    rows = []
    skipped = 0
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if note is not None and row["Note"] != note:
                continue
            hosts = (row["Source"], row["Destination"])
            options = (row.get("CC", "na"), row.get("PP", "na"))
            try:  # P is "na" where the row did not vary it
                p, mbps, limit = int(row["P"]), float(row["Throughput"]), row["Bandwidth"]
                usable = 0 < mbps <= _mbps_limit(limit)
            except ValueError:
                skipped += 1
                continue
            rows.append(((row["FileSize"], row["FileNumbers"], *hosts, *options),
                         (*hosts, *options), p, mbps, usable))
    return _group(rows, name or path.stem + (f":{note}" if note else ""),
                  f"{skipped} rows without a numeric P or throughput" if skipped else "")


def load_grid(path: Path) -> DataSet:
    """The parallelism slices of a HARP grid: one curve per file, CC, PP and repeat."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            hosts = (row["Source"], row["Destination"])
            options = (row["Concurrency"], row["Pipelining"])
            mbps = float(row["Throughput"])
            rows.append(((row["FileSize"], row["FileCount"], *hosts, *options),
                         (*hosts, *options), int(row["Parallelism"]),
                         mbps, 0 < mbps <= _mbps_limit(row["Bandwidth"])))
    rtt = f"RTT {float(row['RTT']) * 1000:.0f} ms" if rows else ""
    return _group(rows, path.stem, rtt)


def synthetic(base: DataSet, sigma: float, seed: int = 13) -> DataSet:
    """Each file's mean curve, SYNTHETIC_REPEATS repeats with multiplicative lognormal noise
    of `sigma`; one file in five has a count that dips (x 0.5-0.8) in every repeat, and each
    point dips by itself (x 0.4-0.8) with probability 0.05."""
    rng = np.random.default_rng(seed)
    files = []
    for f in base.files:
        mean = {p: statistics.mean(r[p] for r in f.repeats) for p in f.repeats[0]}
        levels = sorted(mean)
        dip = dict.fromkeys(levels, 1.0)
        if rng.random() < 0.2:
            dip[levels[int(rng.integers(1, len(levels)))]] = float(rng.uniform(0.5, 0.8))
        repeats = []
        for _ in range(SYNTHETIC_REPEATS):
            noise = rng.lognormal(0.0, sigma, len(levels))
            once = np.where(rng.random(len(levels)) < 0.05, rng.uniform(0.4, 0.8, len(levels)),
                            1.0)
            repeats.append({p: mean[p] * dip[p] * float(n * o)
                            for p, n, o in zip(levels, noise, once, strict=True)})
        files.append(File(f.key, f.path, tuple(repeats),
                          tuple(len(files) * SYNTHETIC_REPEATS + r for r in range(len(repeats)))))
    return DataSet(f"loni+noise sigma {sigma:g}", tuple(files), base.levels,
                   f"{SYNTHETIC_REPEATS} synthetic repeats per loni file, dips")


# -- strategies -----------------------------------------------------------------------------

def _guided(measure: Measure, levels: list[int], history: History | None
            ) -> tuple[list[Sample], int]:
    samples = guided(measure, levels[-1], TOLERANCE, MAX_SAMPLES, levels, history)
    return samples, decide(samples, levels[-1], TOLERANCE, levels, history).streams


def _doubling(threshold: float) -> Strategy:
    def run(measure: Measure, levels: list[int], history: History | None
            ) -> tuple[list[Sample], int]:
        samples = doubling(measure, levels[-1], threshold)
        return samples, decide(samples, levels[-1], TOLERANCE, levels).streams
    return run


def _dw(depth: int, width: int, interval: bool = False) -> Strategy:
    """d-w probing (stork.eos.probing): each level `depth` times; a repeated measurement
    of a level is the file's next repeat (see `replay`)."""
    search = interval_search if interval else window_search

    def run(measure: Measure, levels: list[int], history: History | None
            ) -> tuple[list[Sample], int]:
        samples: list[Sample] = []

        def once(n: int) -> float:
            samples.append(measure(n))
            return samples[-1].mbps

        return samples, search(once, levels, depth, width).chosen
    return run


DW_CASES = ((3, 2), (3, 3), (5, 2), (5, 3))  # the paper's (d, w)
STRATEGIES: dict[str, Strategy] = {
    "guided": _guided,
    "doubling 0.02": _doubling(0.02),
    "doubling 0.1": _doubling(0.1),
    **{f"dw d={d} w={w}": _dw(d, w) for d, w in DW_CASES},
    **{f"dw-interval d={d} w={w}": _dw(d, w, interval=True) for d, w in DW_CASES},
}
# measurements per level of a strategy (its full sweep measures every level this often)
DEPTH: dict[str, int] = {label: int(label.split()[1].removeprefix("d="))
                         for label in STRATEGIES if label.startswith("dw")}
PAPER_SWEEP_REPEATS = 10  # the paper's full sweep measured every configuration 10 times
WITHIN = 0.05  # the target: peak within 5% of the best ...
TARGET_CURVES = 0.96  # ... on at least 96% of the curves
TARGET_OVERHEAD = 0.25  # ... with at most 25% of the full sweep's measurements


# -- replay ---------------------------------------------------------------------------------

@dataclass
class Row:
    shares: list[float]
    samples: list[int]
    below: int = 0  # curves where this did worse than the best fixed P on the same curve
    excess: int = 0  # curves with more streams than the smallest count within TOLERANCE
    depth: int = 1  # measurements per level (d-w's d; 1 for the others)
    levels: int = 1  # levels of the full sweep
    exact: int = 0  # curves where the chosen count is the judging curve's best
    missed: list[str] | None = None  # curves below 1 - WITHIN (a few, for the report)
    unjudged: int = 0  # cross-repeat cases where the strategy measured every repeat

    def summary(self) -> dict[str, float | int | list[str]]:
        if not self.shares:  # cross-repeat, and every file measured in full
            return {"curves": 0, "unjudged": self.unjudged}
        within = sum(s >= 1 - WITHIN - 1e-12 for s in self.shares) / len(self.shares)
        overhead = statistics.mean(self.samples) / (self.levels * self.depth)
        paper = statistics.mean(self.samples) / (self.levels * PAPER_SWEEP_REPEATS)
        return {"mean_share": round(statistics.mean(self.shares), 4),
                "p10": round(float(np.percentile(self.shares, 10)), 4),
                "mean_samples": round(statistics.mean(self.samples), 2),
                "below_best_fixed": self.below, "more_streams_than_needed": self.excess,
                "curves": len(self.shares),
                "within_5pct": round(within, 4),
                "flow_selection": round(self.exact / len(self.shares), 4),
                "overhead_same_depth": round(overhead, 4),
                "overhead_paper_sweep": round(paper, 4),
                "missed_examples": (self.missed or [])[:5], "unjudged": self.unjudged}


def _needed(curve: Curve) -> int:
    best = max(curve.values())
    return min(p for p, v in curve.items() if v >= best * (1 - TOLERANCE))


def _cases(data: DataSet, mode: str) -> list[tuple[File, Curve, Curve, int]]:
    """(file, sampled repeat, judging curve, the repeat's index) in the order of the
    table's rows."""
    cases = []
    for f in data.files:
        for r, curve in enumerate(f.repeats):
            if mode == "same":
                cases.append((f.order[r], f, curve, curve, r))
            elif len(f.repeats) > 1:
                others = [o for i, o in enumerate(f.repeats) if i != r]
                cases.append((f.order[r], f, curve, {p: statistics.mean(o[p] for o in others)
                                                     for p in curve}, r))
    cases.sort(key=lambda c: c[0])
    return [c[1:] for c in cases]


def replay(data: DataSet, mode: str, history: bool,
           strategies: dict[str, Strategy]) -> dict[str, object]:
    cases = _cases(data, mode)
    if not cases:
        return {"curves": 0}
    fixed = {p: Row([c[2][p] / max(c[2].values()) for c in cases], [0] * len(cases))
             for p in data.levels}
    best_p = max(fixed, key=lambda p: statistics.mean(fixed[p].shares))
    best_share = fixed[best_p].summary()["mean_share"]
    rows: dict[str, Row] = {}
    for label, strategy in strategies.items():
        row = Row([], [], depth=DEPTH.get(label, 1), levels=len(data.levels), missed=[])
        runs: dict[tuple[str, ...], list[tuple[tuple[str, ...], list[Sample]]]] = \
            defaultdict(list)
        for f, curve, judged, r in cases:
            judge = judged
            taken: dict[int, int] = defaultdict(int)

            def measure(n: int, c: Curve = curve, f: File = f, r: int = r,
                        taken: dict[int, int] = taken) -> Sample:
                # the k-th measurement of a count is the k-th repeat from this one on
                # (cycling): a strategy that measures each count once sees this repeat only
                k = taken[n]
                taken[n] += 1
                return Sample(n, c[n] if k == 0 else f.repeats[(r + k) % len(f.repeats)][n])

            # judged on the other repeats, a run may not learn from those repeats
            earlier = ([run for key, run in runs[f.path] if mode == "same" or key != f.key]
                       if history else None)
            samples, chosen = strategy(measure, sorted(curve), earlier)
            if row.depth > 1:  # judged on what it drew on (same) or never saw (cross)
                used = {(r + k) % len(f.repeats) for k in range(row.depth)}
                pool = [f.repeats[i] for i in range(len(f.repeats))
                        if (i in used) == (mode == "same")]
                if not pool:  # every repeat was measured: nothing left to judge on
                    row.unjudged += 1
                    continue
                judge = {n: statistics.mean(o[n] for o in pool) for n in curve}
            top = max(judge.values())
            row.shares.append(judge[chosen] / top)
            row.exact += judge[chosen] >= top - 1e-9
            if judge[chosen] / top < 1 - WITHIN and row.missed is not None:
                row.missed.append(f"{f.key[0]} B #{r}: {chosen} -> {judge[chosen] / top:.2f}")
            row.samples.append(len(samples))
            row.below += judge[chosen] < judge[best_p] - 1e-9
            row.excess += chosen > _needed(judge)
            if history:  # what the transfer at the chosen count achieved on this repeat
                runs[f.path].append((f.key, [*samples, Sample(chosen, curve[chosen],
                                                               raw={"kind": "transfer"})]))
        rows[label] = row
    for p, row in fixed.items():
        row.excess = sum(p > _needed(c[2]) for c in cases)
        row.below = sum(c[2][p] < c[2][best_p] - 1e-9 for c in cases)
    return {
        "curves": len(cases), "files": len({c[0].key for c in cases}),
        "best_fixed": {"streams": best_p, "mean_share": best_share},
        "strategies": {label: {**row.summary(), "best_fixed_share": best_share,
                               "default": label == DEFAULT}
                       for label, row in rows.items()},
        "fixed": {str(p): row.summary() for p, row in fixed.items()},
    }


def print_table(data: DataSet, mode: str, history: bool, result: dict[str, object]) -> None:
    judged = ("same curve" if mode == "same" else
              "cross-repeat: judged on the mean of the other repeats")
    print(f"\n### {data.name}, {judged}{', with history' if history else ''}\n")
    if not result["curves"]:
        print("(no file with two repeats or more)")
        return
    note = f"; {data.note}" if data.note else ""
    best = result["best_fixed"]
    assert isinstance(best, dict)
    print(f"{result['curves']} curves from {result['files']} files{note}. Best fixed P: "
          f"{best['streams']} ({best['mean_share']:.4f}).\n")
    print("| method | mean share of best | p10 | within 5% of best | flow selection | "
          "curves below best fixed P | mean samples | samples / (levels x d) | "
          "samples / (levels x 10) | more streams than needed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    strategies = result["strategies"]
    fixed = result["fixed"]
    assert isinstance(strategies, dict) and isinstance(fixed, dict)
    for label, s in strategies.items():
        name = f"**{label}** (default)" if s["default"] else label
        if s["curves"] != result["curves"]:
            name += f" ({s['curves']} curves)"
        if not s["curves"]:
            print(f"| {name} | no file has more repeats than it measures |" + " |" * 9)
            continue
        print(f"| {name} | {s['mean_share']:.4f} | {s['p10']:.4f} | {s['within_5pct']:.4f} | "
              f"{s['flow_selection']:.4f} | {s['below_best_fixed']} | {s['mean_samples']:.2f} | "
              f"{s['overhead_same_depth']:.3f} | {s['overhead_paper_sweep']:.3f} | "
              f"{s['more_streams_than_needed']} |")
    for p, s in fixed.items():
        mark = " (best fixed P)" if int(p) == best["streams"] else ""
        print(f"| fixed {p}{mark} | {s['mean_share']:.4f} | {s['p10']:.4f} | "
              f"{s['within_5pct']:.4f} | {s['flow_selection']:.4f} | "
              f"{s['below_best_fixed']} | 0 | | | {s['more_streams_than_needed']} |")
    for label, s in strategies.items():
        if not label.startswith("dw") or not s["curves"]:
            continue
        hit = s["within_5pct"] >= TARGET_CURVES
        cheap = s["overhead_paper_sweep"] <= TARGET_OVERHEAD
        if not (hit and cheap):
            what = [] if hit else [f"within 5% on {s['within_5pct']:.1%} < {TARGET_CURVES:.0%}"]
            cost = f"{s['overhead_paper_sweep']:.1%} of a 10-repeat sweep > {TARGET_OVERHEAD:.0%}"
            what += [] if cheap else [cost]
            print(f"\n- {label} misses the target: {', '.join(what)}; e.g. (file, repeat: "
                  f"chosen -> share) {'; '.join(s['missed_examples'][:3]) or '-'}")


# -- the other benchmarks ---------------------------------------------------------------------

def model_cost() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for count in (3, 4, 6):
        times = []
        for _ in range(300):
            n = np.array([1, 4, 16, 32, 8, 2][:count], dtype=float)
            th = 100 * n / np.sqrt(1 + 0.01 * n * n) * (1 + rng.normal(0, 0.02, count))
            start = time.perf_counter()
            estimate(n, th, 64)
            times.append(time.perf_counter() - start)
        rows.append((count, statistics.median(times) * 1000, np.percentile(times, 95) * 1000))
    print("\n## Model fit plus optimum per call (both models, guards, choice over 1..64)\n")
    print("| samples | median | p95 | target |")
    print("| ---: | ---: | ---: | --- |")
    for count, median, p95 in rows:
        print(f"| {count} | {median:.2f} ms | {p95:.2f} ms | median < 2 ms |")


def sampling_overhead() -> None:
    from tests.support import GridFtpServer, StorkServer, make_file, wait_for

    with tempfile.TemporaryDirectory(prefix="stork-bench-eos-") as tmp:
        work = Path(tmp)
        src = make_file(work / "1G.dat", 1024 ** 3, seed=5)
        with GridFtpServer(work / "gridftp") as gridftp:
            server = StorkServer(work / "stork", {"EOS_SAMPLE_SIZE": "64M"}).start()
            try:
                ids = []
                for policy, extra in (("default (1 stream)", 'optimization = "NO"'),
                                      ("fixed 4 streams", 'arguments = "-p 4"'),
                                      ("optimized (sampling)", 'optimization = "YES"')):
                    dest = work / f"dest-{len(ids)}.dat"
                    [job_id] = server.submit(f"""[ dap_type = transfer; {extra};
                        src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")
                    wait_for(lambda j=job_id: server.job(j)["job"]["state"] in
                             ("COMPLETED", "FAILED"), 900, what=policy)
                    ids.append((policy, job_id))
                    dest.unlink()
                print("\n## Sampling overhead: 1 GiB over loopback GridFTP (one job at a time)\n")
                print("| policy | streams | sampling time | transfer time | total | achieved |")
                print("| --- | ---: | ---: | ---: | ---: | ---: |")
                base = None
                for policy, job_id in ids:
                    r = server.job(job_id)["job"]["result"]
                    sampling = r.get("eos_sampling_time_s", 0.0)
                    total = sampling + r["transfer_time_s"]
                    base = base or r["transfer_time_s"]
                    print(f"| {policy} | {r['streams_used']} | {sampling:.2f} s | "
                          f"{r['transfer_time_s']:.2f} s | {total:.2f} s | "
                          f"{r['achieved_throughput_mbps']:.0f} Mbit/s |")
                print("\nOn loopback every stream count moves data at memory speed, so sampling "
                      "cannot save time here; bench/bench_wan_eos.py and bench/bench_batch.py "
                      "measure the gain on emulated WAN links.")
            finally:
                server.stop()


# -- command line ---------------------------------------------------------------------------

def data_sets(specs: list[str], sigmas: list[float]) -> list[DataSet]:
    if specs:
        out = []
        for spec in specs:
            path, _, note = (spec, "", "") if Path(spec).exists() else spec.rpartition(":")
            out.append(load_sweeps(Path(path), note or None))
        return out
    if not SWEEPS.exists():
        return []
    loni = load_sweeps(SWEEPS / "loni.csv", name="loni")
    out = [loni, load_sweeps(SWEEPS / "didclab.csv", name="didclab")]
    out += [load_grid(GRIDS / f"{name}.csv") for name in ("BTData", "SGData")
            if (GRIDS / f"{name}.csv").exists()]
    out += [synthetic(loni, sigma) for sigma in sigmas]
    return out


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip-transfer", action="store_true", help="skip the 1 GiB GridFTP run")
    p.add_argument("--mode", choices=("same", "cross", "both"), default="both",
                   help="judge on the sampled repeat, on the other repeats, or both")
    p.add_argument("--history", action="store_true",
                   help="each optimization may use the earlier curves on the same path")
    p.add_argument("--data", action="append", default=[], metavar="FILE[:NOTE]",
                   help="replay this table (parallelism-sweeps format) instead of the defaults")
    p.add_argument("--synthetic", default="0.1,0.2,0.3", metavar="SIGMAS",
                   help="noise levels of the synthetic loni data sets ('' for none)")
    p.add_argument("--strategies", default=",".join(STRATEGIES),
                   help=f"comma-separated, of: {', '.join(STRATEGIES)}")
    p.add_argument("--json", action="store_true",
                   help="print the replay only, as JSON (no model cost, no transfer)")
    args = p.parse_args()
    sigmas = [float(s) for s in args.synthetic.split(",") if s.strip()]
    chosen = {name: STRATEGIES[name] for name in args.strategies.split(",") if name}
    modes = ("same", "cross") if args.mode == "both" else (args.mode,)
    sets = data_sets(args.data, sigmas)
    if not args.json:
        model_cost()
        if not sets:
            print(f"\n(replay skipped: {SWEEPS} not found)")
        print(f"\n## Replay of measured curves (commit {_commit()})")
    out: dict[str, object] = {"commit": _commit(), "history": args.history,
                              "tolerance": TOLERANCE, "default_strategy": DEFAULT,
                              "data_sets": {}}
    for data in sets:
        per_mode = {}
        for mode in modes:
            result = replay(data, mode, args.history, chosen)
            per_mode[mode] = result
            if not args.json:
                print_table(data, mode, args.history, result)
        out["data_sets"][data.name] = {"note": data.note, **per_mode}  # type: ignore[index]
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    elif not args.skip_transfer:
        sampling_overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
