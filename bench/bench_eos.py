"""EOS benchmarks (not tests): model cost, replay against measured curves, sampling overhead.

    .venv/bin/python bench/bench_eos.py [--skip-transfer] [--judge cross-repeat|same-curve|both]
        [--history] [--data FILE[:NOTE] ...] [--synthetic SIGMAS] [--json]

The replay answers each sample from a measured curve instead of transferring. Every repeat of
a measurement is a curve of its own (no medians). By default:
- every table of ../shared/data/transfer-logs/parallelism-sweeps/, one data set per Note
  (`chris-parallelism` rows named after the table: `loni`, `didclab`; `loni:engin-losf`):
  one curve per file (FileSize, FileNumbers, hosts, CC, PP) and repeat (the k-th row of a
  file at a P is its k-th repeat). A note whose curves hold a median of fewer than three
  counts is no sweep over P and is left out with a note (loni's `Chris-data`);
- ../shared/data/transfer-logs/harp-grids/{BTData,SGData}.csv: the parallelism slices of the
  grids, one curve per file, concurrency, pipelining and repeat;
- synthetic: each loni file's mean curve, three repeats with lognormal noise (sigma 0.1, 0.2,
  0.3) and random dips (a count that is bad on that file in every repeat, and one-off dips).
`--data FILE[:NOTE]` replays any table in the parallelism-sweeps column format instead.
Those tables are not part of the repository and are read where they lie.

Any table in those formats is read as it is: the levels are the counts it measured; a file
or a repeat that lacks a count has a curve without it (a repeat left with one count is left
out); a row above its Bandwidth (empty, na or 0: unknown) is dropped alone, a row without a
numeric P or throughput is skipped and counted; BufferSize is not read. A strategy that asks
for a count the curve lacks (doubling does not keep to the levels) is answered, and judged,
at the curve's nearest level; such stand-ins are counted. A table with a missing column, no
row of the given note, or no usable row ends the bench with exit status 2 and one line naming
the file and what is missing.

The default strategy, `climb`, is what `optimization = "YES"` runs: the online controller
(`stork.tuning.online.Climb`) on the transfer itself, along P (the curve's concurrency and
pipelining are the table's), replayed as one flow of the transfer the curve measured (its
files' size times their number) by `bench/flow_replay.py`: every 2-s window moves the
judging curve's rate at the count in effect and shows the controller the sampled repeat's
value with 5% noise; a change moves 1 s unseen. It starts where the daemon starts the
transfer without a history (the preset, below), or with `--history` where the path's earlier
flows put it (`prior_from_history` over the windows they saw). Its share is the bytes over
the flow's time, tries included, against the judging curve's best; its samples are the
counts the flow ran at; the table says on how many curves it changed its count at all (a
transfer of a few seconds runs at its start: those curves measure the start, not the
controller). The probing strategies below (the EOS's `guided` sampling, which estimation
jobs run, doubling, d-w) are judged on the count they choose, their samples taking no time.

d-w probing (`dw d=D w=W`: Algorithm 1; `dw-interval`: the variant of the paper's [11];
stork/tuning/probing.py) measures each level D times: the k-th measurement of a count is the
file's k-th repeat from the sampled one on (cycling; a file measured once gives the same value
again). It is judged, in `same`, on the mean of the repeats it drew on and, in `cross`, on the
mean of the file's repeats it never saw (a file with D repeats or fewer is left out: the curve
count is then given beside the name). Besides the share it reports the paper's figures: flow
selection (the chosen count is the judging curve's best), the curves within 5% of the best (the
target: 96%), and the probing overhead against a full sweep that measures every level D times
(`levels x d`) and against the paper's, which measured every configuration 10 times (`levels x
10`; the target: 25%).

Judging (`--judge`): `cross-repeat` (`cross`, the default) takes the samples from one repeat
and judges the chosen count on the mean of the file's other repeats that measured it (what a
transfer after its samples sees), on files with two repeats or more; `same-curve` (`same`)
takes the samples and the outcome from one repeat; `both` runs the two. Share = throughput at
the chosen count / the best count's, on the judging curve. `--history` replays the curves in
order and lets each optimization use what earlier curves on the same path (hosts, and
concurrency and pipelining) sampled and what their transfers achieved at the chosen count
(the repeat's own value, never the judging repeats').

Baselines, judged the same way: every fixed P (on a curve that lacks it, at the nearest
level), the best fixed P in hindsight, the best fixed P learned from the other measured data
sets (leave one out: the P with the highest mean share over them, each data set weighing the
same; the synthetic sets are never learned from), Stork's preset (the streams the daemon
starts the transfer with on the row's RTT and Bandwidth: a single file as `FileRun` starts
it, `stork.server.file_run.file_preset`'s ranges in flight times their streams; files of a
dataset as their size class's chunk, `stork.dataset.chunks.default_params`' files in flight
times streams, a stand-in on a table that measured one file at a time; on a grid's slice,
whose concurrency is the table's, the chunk's streams per file), and the oracle (1.0). The
last table puts the default strategy beside them on every data set, with the target of issue
28: a mean share at least the best fixed P of the other data sets.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
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
from flow_replay import Flowed, flow  # (bench/, beside this script)

from stork import config
from stork.dataset.chunks import default_params, size_class
from stork.engine.items import range_bytes
from stork.errors import StorkError, TransferLogError
from stork.server.file_run import file_preset
from stork.server.flow_tuning import shortest_tuned_s, untuned_setting
from stork.transfer.worker import Setting
from stork.tuning.base import Limits
from stork.tuning.models import estimate
from stork.tuning.online import Climb
from stork.tuning.path_history import SIZE_NEAR, pooled_jobs, prior_from_history
from stork.tuning.probing import interval_search, window_search
from stork.tuning.sampling import Measure, Sample, decide, doubling, guided
from stork.tuning.verdicts import Measured

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO.parent / "shared" / "data" / "transfer-logs"
SWEEPS = LOGS / "parallelism-sweeps"
GRIDS = LOGS / "harp-grids"
TOLERANCE = 0.03  # EOS_TOLERANCE's default
MAX_SAMPLES = 4  # EOS_MAX_SAMPLES's default
SYNTHETIC_REPEATS = 3
DEFAULT = "climb"  # what `optimization = "YES"` runs (EOS_OPTIMIZER's default controller)
EXIT_TABLE = 2  # a table the bench cannot use
MIN_SWEEP_LEVELS = 3  # a default table part whose curves hold fewer counts is no P sweep

Curve = dict[int, float]  # stream count -> Mbit/s


@dataclass(frozen=True)
class File:
    """One file (and concurrency, pipelining) measured over P, with its repeats in order. A
    repeat holds the counts it measured (a table may lack some)."""

    key: tuple[str, ...]
    path: tuple[str, ...]  # what history is shared by: hosts (and CC, PP)
    repeats: tuple[Curve, ...]
    order: tuple[int, ...]  # each repeat's place in the table (its first row)
    preset: int | None = None  # Stork's per-size-class streams for this file and path
    link_mbps: float | None = None  # the path's rate (the table's Bandwidth), when known
    bdp_bytes: float | None = None  # the path's bandwidth-delay product, when known


@dataclass(frozen=True)
class DataSet:
    name: str
    files: tuple[File, ...]
    levels: tuple[int, ...]
    note: str = ""
    source: str = ""  # the measured data set a synthetic one is made from ("": itself)


# a strategy replayed on one curve: (measure, allowed levels, earlier runs on the path)
# -> (samples taken, streams chosen)
History = Sequence[Sequence[Sample]]
Strategy = Callable[[Measure, list[int], History | None], tuple[list[Sample], int]]


# -- loading ------------------------------------------------------------------------------

SWEEP_COLUMNS = ("FileSize", "FileNumbers", "Source", "Destination", "P", "Throughput")
GRID_SLICE_COLUMNS = ("FileSize", "FileCount", "Source", "Destination", "Parallelism",
                      "Concurrency", "Pipelining", "Throughput")
_MISSING = frozenset({"", "na", "n/a", "nan", "none", "null"})


@dataclass(frozen=True)
class Point:
    """One usable measurement of a table."""

    key: tuple[str, ...]  # the file (and options) it measured
    path: tuple[str, ...]
    p: int
    mbps: float
    preset: int | None
    link_mbps: float | None = None
    bdp_bytes: float | None = None


def _mbps_limit(bandwidth: str) -> float | None:
    """A row's link capacity in Mbit/s (the tables mix bit/s and Mbit/s); None: unknown
    (empty, na, 0)."""
    if bandwidth.strip().lower() in _MISSING:
        return None
    value = float(bandwidth)
    if value <= 0:
        return None
    return value / 1e6 if value > 1e6 else value


def _bdp(rtt: str, bandwidth: str) -> float | None:
    """The row's bandwidth-delay product in bytes; None where the table does not say."""
    try:
        rtt_s, limit = float(rtt), _mbps_limit(bandwidth)
    except ValueError:
        return None
    return rtt_s * limit * 1e6 / 8 if rtt_s > 0 and limit is not None else None


def _preset(size: str, bdp: float | None, count: str = "1", *,
            streams: bool = True) -> int | None:
    """The streams Stork starts `count` files of `size` bytes with on a path of `bdp` bytes
    (`_bdp`) without a history (None where the table does not say): one file as `FileRun`
    starts it (`file_preset`: its large-file preset's ranges in flight times their streams,
    or as many streams sent whole), more as a chunk of their size class (`default_params`:
    files in flight times streams each). With `streams` False the chunk's streams per file
    alone (a grid's slice, whose concurrency is the table's)."""
    try:
        size_bytes, files = float(size), int(float(count))
    except ValueError:
        return None
    if size_bytes <= 0 or bdp is None:
        return None
    if streams and files <= 1:
        one = file_preset(round(size_bytes), range_bytes(bdp, RANGE_MIN_BYTES), bdp)
        return one.cc * one.p
    chunk = default_params(size_class(round(size_bytes), bdp), size_bytes, bdp)
    return chunk.cc * chunk.p if streams else chunk.p


def _check_columns(path: Path, header: Sequence[str] | None, needed: Sequence[str],
                   what: str) -> None:
    missing = [c for c in needed if c not in (header or ())]
    if missing:
        raise TransferLogError(str(path), f"not {what}: no column {', '.join(missing)} "
                                          f"(header: {', '.join(list(header or [])[:16])})")


def _group(rows: list[Point], name: str, note: str = "") -> DataSet:
    """Rows -> one curve per file and repeat: the k-th row of a file at a P is its k-th
    repeat, so a repeat holds the counts measured that often; repeats with fewer than two
    counts (nothing to choose among) are left out."""
    table: dict[tuple[str, ...], dict[int, list[tuple[float, int]]]] = defaultdict(
        lambda: defaultdict(list))
    first: dict[tuple[str, ...], Point] = {}
    for i, row in enumerate(rows):
        table[row.key][row.p].append((row.mbps, i))
        first.setdefault(row.key, row)
    files, single = [], 0
    for key, by_p in table.items():
        repeats, order = [], []
        for r in range(max(len(v) for v in by_p.values())):
            curve = {p: v[r][0] for p, v in sorted(by_p.items()) if len(v) > r}
            if len(curve) < 2:
                single += 1
                continue
            repeats.append(curve)
            order.append(min(v[r][1] for v in by_p.values() if len(v) > r))
        if repeats:
            files.append(File(key, first[key].path, tuple(repeats), tuple(order),
                              first[key].preset, first[key].link_mbps,
                              first[key].bdp_bytes))
    levels = sorted({p for f in files for c in f.repeats for p in c})
    if single:
        note = (note + "; " if note else "") + f"{single} repeats with one count left out"
    return DataSet(name, tuple(files), tuple(levels), note)


def _usable(path: Path, rows: list[Point], counts: dict[str, int], first_bad: dict[str, str],
            what: str) -> None:
    """TransferLogError naming the table and why, when it gave no curve."""
    if rows:
        return
    if not counts:
        raise TransferLogError(str(path), f"no usable row: no {what}")
    why = "; ".join(f"{n} {reason} (e.g. {first_bad[reason]})" for reason, n in counts.items())
    raise TransferLogError(str(path), f"no usable row: {why}")


def load_sweeps(path: Path, note: str | None = "chris-parallelism",
                name: str | None = None) -> DataSet:
    """A table in the parallelism-sweeps format; rows that differ in CC or PP are other
    curves; `note` selects the rows (None: all). Rows without a numeric P or throughput
    are skipped and counted, a throughput above the row's Bandwidth drops that row (an
    empty, na or 0 Bandwidth is unknown); raises TransferLogError naming the table when a
    column is missing or no row is usable."""
    rows: list[Point] = []
    counts: dict[str, int] = defaultdict(int)
    first_bad: dict[str, str] = {}
    selected = 0
    notes: set[str] = set()

    def bad(reason: str, line: int, detail: str) -> None:
        counts[reason] += 1
        first_bad.setdefault(reason, f"line {line}: {detail}")

    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        _check_columns(path, reader.fieldnames,
                       SWEEP_COLUMNS + (("Note",) if note is not None else ()),
                       "a parallelism sweep table")
        for row in reader:
            notes.add(row.get("Note") or "")
            if note is not None and row["Note"] != note:
                continue
            selected += 1
            line = reader.line_num
            hosts = (row["Source"], row["Destination"])
            options = (row.get("CC") or "na", row.get("PP") or "na")
            try:  # P is "na" where the row did not vary it
                p = int(row["P"])
            except (TypeError, ValueError):
                bad("rows without a numeric P", line, f"P {row['P']!r}")
                continue
            try:
                mbps = float(row["Throughput"])
                limit = _mbps_limit(row.get("Bandwidth") or "")
            except (TypeError, ValueError):
                bad("rows without a numeric Throughput or Bandwidth", line,
                    f"Throughput {row['Throughput']!r}, Bandwidth {row.get('Bandwidth')!r}")
                continue
            if p < 1 or not mbps > 0:
                bad("rows with P below 1 or no throughput", line, f"P {p}, Throughput {mbps}")
                continue
            if limit is not None and mbps > limit:
                bad("rows above the link", line, f"{mbps:g} Mbit/s, link {limit:g}")
                continue
            bdp = _bdp(row.get("RTT") or "", row.get("Bandwidth") or "")
            rows.append(Point((row["FileSize"], row["FileNumbers"], *hosts, *options),
                            (*hosts, *options), p, mbps,
                            _preset(row["FileSize"], bdp, row["FileNumbers"]), limit, bdp))
    if note is not None and not selected:
        raise TransferLogError(str(path), f"no row with Note {note!r} (the table's notes: "
                                          f"{', '.join(sorted(notes)) or 'none'})")
    _usable(path, rows, counts, first_bad, "data rows")
    data = _group(rows, name or path.stem + (f":{note}" if note else ""),
                  "; ".join(f"{n} {reason}" for reason, n in counts.items()))
    if not data.files:
        raise TransferLogError(str(path), "no usable curve: no file measured at two "
                                          "stream counts or more")
    return data


def load_grid(path: Path) -> DataSet:
    """The parallelism slices of a HARP grid: one curve per file, CC, PP and repeat (a row
    above the link is dropped)."""
    rows: list[Point] = []
    counts: dict[str, int] = defaultdict(int)
    first_bad: dict[str, str] = {}
    rtts: set[str] = set()
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        _check_columns(path, reader.fieldnames, GRID_SLICE_COLUMNS, "a HARP grid table")
        for row in reader:
            hosts = (row["Source"], row["Destination"])
            options = (row["Concurrency"], row["Pipelining"])
            try:
                p, mbps = int(row["Parallelism"]), float(row["Throughput"])
                limit = _mbps_limit(row.get("Bandwidth") or "")
            except (TypeError, ValueError):
                counts["rows without a numeric Parallelism or Throughput"] += 1
                first_bad.setdefault("rows without a numeric Parallelism or Throughput",
                                     f"line {reader.line_num}")
                continue
            if p < 1 or not mbps > 0 or (limit is not None and mbps > limit):
                counts["rows above the link or without throughput"] += 1
                first_bad.setdefault("rows above the link or without throughput",
                                     f"line {reader.line_num}: {mbps:g} Mbit/s")
                continue
            rtts.add(row.get("RTT") or "")
            bdp = _bdp(row.get("RTT") or "", row.get("Bandwidth") or "")
            rows.append(Point((row["FileSize"], row["FileCount"], *hosts, *options),
                            (*hosts, *options), p, mbps,
                            _preset(row["FileSize"], bdp, streams=False), limit, bdp))
    _usable(path, rows, counts, first_bad, "data rows")
    rtt = ", ".join(f"RTT {float(r) * 1000:.0f} ms" for r in sorted(rtts)
                    if r.strip().lower() not in _MISSING)
    dropped = "; ".join(f"{n} {reason}" for reason, n in counts.items())
    data = _group(rows, path.stem, "; ".join(x for x in (rtt, dropped) if x))
    if not data.files:
        raise TransferLogError(str(path), "no usable curve: no file measured at two "
                                          "stream counts or more")
    return data


def synthetic(base: DataSet, sigma: float, seed: int = 13) -> DataSet:
    """Each file's mean curve, SYNTHETIC_REPEATS repeats with multiplicative lognormal noise
    of `sigma`; one file in five has a count that dips (x 0.5-0.8) in every repeat, and each
    point dips by itself (x 0.4-0.8) with probability 0.05."""
    rng = np.random.default_rng(seed)
    files = []
    for f in base.files:
        mean = {p: statistics.mean(r[p] for r in f.repeats if p in r)
                for p in sorted({p for r in f.repeats for p in r})}
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
                          tuple(len(files) * SYNTHETIC_REPEATS + r for r in range(len(repeats))),
                          f.preset, f.link_mbps, f.bdp_bytes))
    return DataSet(f"{base.name}+noise sigma {sigma:g}", tuple(files), base.levels,
                   f"{SYNTHETIC_REPEATS} synthetic repeats per {base.name} file, dips",
                   source=base.name)


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
    """d-w probing (stork.tuning.probing): each level `depth` times; a repeated measurement
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
# the online controller, replayed as one flow over each curve (`replay_flow`)
FLOWS = ("climb",)
DEFAULTS = config.load(None, env={"HOME": "/nonexistent"})  # the daemon's knobs' defaults
# a single file predicted shorter than this runs untuned, at the EOS_SAMPLING_BUDGET default
SHORTEST_TUNED_S = shortest_tuned_s(DEFAULTS.eos_sampling_budget)
RANGE_MIN_BYTES = DEFAULTS.range_min_mb << 20  # STORK_RANGE_MIN_MB's default
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
    stand_ins: int = 0  # samples and choices of counts a curve lacks, at the nearest level
    acted: int | None = None  # a flow's curves where the controller changed its setting

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
                "missed_examples": (self.missed or [])[:5], "unjudged": self.unjudged,
                "stand_ins": self.stand_ins,
                **({"acted": self.acted} if self.acted is not None else {})}


def _needed(curve: Curve) -> int:
    best = max(curve.values())
    return min(p for p, v in curve.items() if v >= best * (1 - TOLERANCE))


def _cases(data: DataSet, mode: str) -> list[tuple[File, Curve, Curve, int]]:
    """(file, sampled repeat, judging curve, the repeat's index) in the order of the
    table's rows. Cross-repeat: each count is judged on the mean of the other repeats
    that measured it, and the sampled repeat offers the counts some other repeat measured
    (a curve left with fewer than two is no case)."""
    cases = []
    for f in data.files:
        for r, curve in enumerate(f.repeats):
            if mode == "same":
                cases.append((f.order[r], f, curve, curve, r))
                continue
            others = [o for i, o in enumerate(f.repeats) if i != r]
            judged = {p: statistics.mean(o[p] for o in others if p in o)
                      for p in curve if any(p in o for o in others)}
            if len(judged) > 1:
                cases.append((f.order[r], f, {p: curve[p] for p in judged}, judged, r))
    cases.sort(key=lambda c: c[0])
    return [c[1:] for c in cases]


def _nearest_level(levels: Sequence[int], want: int) -> int:
    """The level nearest to `want` on a log scale (the fewer streams on a tie)."""
    return min(levels, key=lambda p: (abs(math.log2(p) - math.log2(want)), p))


def _nth(f: File, r: int, n: int, k: int) -> float:
    """The k-th measurement of count `n` from repeat `r` on: the repeats that measured `n`,
    in order from `r`, cycling."""
    have = [i for i in (*range(r, len(f.repeats)), *range(r)) if n in f.repeats[i]]
    return float(f.repeats[have[k % len(have)]][n])


def replay(data: DataSet, mode: str, history: bool,
           strategies: dict[str, Strategy], flows: Sequence[str] = ()) -> dict[str, object]:
    cases = _cases(data, mode)
    if not cases:
        return {"curves": 0}
    # every fixed P on every curve; on a curve that lacks it, at the curve's nearest level
    fixed: dict[int, Row] = {}
    for p in data.levels:
        at = [p if p in c[2] else _nearest_level(sorted(c[2]), p) for c in cases]
        fixed[p] = Row([c[2][a] / max(c[2].values()) for c, a in zip(cases, at, strict=True)],
                       [0] * len(cases), stand_ins=sum(a != p for a in at))
        fixed[p].excess = sum(a > _needed(c[2]) for c, a in zip(cases, at, strict=True))
    # the best fixed P in hindsight: of the counts measured on half the curves or more
    enough = [p for p, row in fixed.items() if 2 * row.stand_ins <= len(cases)] or list(fixed)
    best_p = max(enough, key=lambda p: statistics.mean(fixed[p].shares))
    best_share = fixed[best_p].summary()["mean_share"]
    preset = Row([], [])
    for f, _, judged, _ in cases:
        if f.preset is not None:
            chosen = _nearest_level(sorted(judged), f.preset)
            preset.shares.append(judged[chosen] / max(judged.values()))
            preset.samples.append(0)
    rows: dict[str, Row] = {}
    for label, strategy in strategies.items():
        row = Row([], [], depth=DEPTH.get(label, 1), levels=len(data.levels), missed=[])
        runs: dict[tuple[str, ...], list[tuple[tuple[str, ...], list[Sample]]]] = \
            defaultdict(list)
        for f, curve, judged, r in cases:
            judge = judged
            taken: dict[int, int] = defaultdict(int)

            def measure(n: int, c: Curve = curve, f: File = f, r: int = r,
                        taken: dict[int, int] = taken, row: Row = row) -> Sample:
                # the k-th measurement of a count is the k-th repeat from this one on
                # (cycling): a strategy that measures each count once sees this repeat only;
                # a count the curve lacks (doubling does not keep to the levels) is answered
                # at the nearest level
                at = n if n in c else _nearest_level(sorted(c), n)
                row.stand_ins += at != n
                k = taken[at]
                taken[at] += 1
                return Sample(n, c[at] if k == 0 else _nth(f, r, at, k))

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
                judge = {n: statistics.mean(o[n] for o in pool if n in o) for n in curve
                         if any(n in o for o in pool)}
                if chosen not in judge:  # the repeats left did not measure the choice
                    row.unjudged += 1
                    continue
            if chosen not in judge:  # judged at the nearest level the curve has
                row.stand_ins += 1
                chosen = _nearest_level(sorted(judge), chosen)
            top = max(judge.values())
            row.shares.append(judge[chosen] / top)
            row.exact += judge[chosen] >= top - 1e-9
            if judge[chosen] / top < 1 - WITHIN and row.missed is not None:
                row.missed.append(f"{f.key[0]} B #{r}: {chosen} -> {judge[chosen] / top:.2f}")
            row.samples.append(len(samples))
            row.below += best_p in judge and judge[chosen] < judge[best_p] - 1e-9
            row.excess += chosen > _needed(judge)
            if history:  # what the transfer at the chosen count achieved on this repeat
                achieved = curve[chosen] if chosen in curve else judge[chosen]
                runs[f.path].append((f.key, [*samples, Sample(chosen, achieved,
                                                               raw={"kind": "transfer"})]))
        rows[label] = row
    for label in flows:
        rows[label] = replay_flow(cases, mode, history, best_p)
        rows[label].levels = len(data.levels)
    best_row = fixed[best_p]
    for row in fixed.values():
        row.below = sum(mine < best - 1e-9
                        for mine, best in zip(row.shares, best_row.shares, strict=True))
    return {
        "curves": len(cases), "files": len({c[0].key for c in cases}),
        "levels": list(data.levels),
        "best_fixed": {"streams": best_p, "mean_share": best_share},
        "strategies": {label: {**row.summary(), "best_fixed_share": best_share,
                               "default": label == DEFAULT}
                       for label, row in rows.items()},
        "fixed": {str(p): row.summary() for p, row in fixed.items()},
        "preset": preset.summary() if preset.shares else None,
    }


def _bytes(f: File) -> float:
    """The bytes of the transfer a curve measured: its files' size times their number."""
    try:
        return float(f.key[0]) * float(f.key[1])
    except ValueError:
        return 0.0


def replay_flow(cases: Sequence[tuple[File, Curve, Curve, int]], mode: str, history: bool,
                best_p: int, seed: int = 1) -> Row:
    """The climb (`stork.tuning.online.Climb`, along P alone: the curve's concurrency and
    pipelining are the table's) on each case moved as one flow of the transfer the curve
    measured (`flow_replay.flow`: the windows it sees are the sampled repeat's value at the
    setting, with noise; the bytes move at the judging curve's). It starts where the daemon
    starts a job: the path's history (`--history`: the windows earlier flows on the path saw,
    pooled per count, of files within `SIZE_NEAR` of its size when there are such flows,
    `prior_from_history`), else the file's per-class preset (1 stream
    where the table does not say). A single file predicted shorter than `SHORTEST_TUNED_S`
    (at the best rate of that history, else the table's Bandwidth) runs untuned where the
    history puts it, or at the doubling of that the history has not measured, never at
    the halving a tuned job may start at, as the daemon runs it (`untuned_setting`). A
    count the curve lacks runs at its nearest level (counted once each time the flow goes
    to it). Its share is the transfer's bytes over the flow's time,
    tries and ramps included, against the judging curve's best rate; its samples are the
    counts the flow ran at; `acted` counts the curves where it changed its count (a
    transfer shorter than a few windows runs at its start)."""
    row = Row([], [], missed=[])
    acted = 0
    rng = random.Random(seed)
    runs: dict[tuple[str, ...], list[tuple[tuple[str, ...], dict[Setting, list[float]]]]] = \
        defaultdict(list)
    for f, curve, judged, r in cases:
        total_mbit = _bytes(f) * 8 / 1e6
        if total_mbit <= 0:
            continue
        levels = sorted(judged)
        limits = Limits(max_cc=1, max_p=levels[-1], max_pp=1, max_streams=levels[-1])

        def at(s: Setting, levels: list[int] = levels) -> int:
            """The count a setting runs at on this curve (the nearest it measured)."""
            return _nearest_level(levels, s.p)

        def moves(s: Setting, judged: Curve = judged) -> float:
            return judged[at(s)]

        def sees(s: Setting, curve: Curve = curve) -> float:
            return curve[at(s)]

        preset = start = Setting(1, _nearest_level(levels, f.preset or 1), 1)
        known: dict[Setting, Measured] = {}
        if history:  # judged on the other repeats, a flow may not learn from those repeats
            earlier = [(key, w) for key, w in runs[f.path] if mode == "same" or key != f.key]
            # files of about this size first, else of its size class, as the daemon reads
            # its log (`measured_from_history`; a class unknown: any size)
            size = float(f.key[0])
            near = [(k, w) for k, w in earlier
                    if size / SIZE_NEAR <= float(k[0]) <= size * SIZE_NEAR]
            if not near and f.bdp_bytes:
                cls = size_class(round(size), f.bdp_bytes)
                earlier = [(k, w) for k, w in earlier
                           if size_class(round(float(k[0])), f.bdp_bytes) is cls]
            known = pooled_jobs([{s: Measured.of(s, rates) for s, rates in windows.items()}
                                 for _, windows in near or earlier])  # (as the daemon's log)
            start, _ = prior_from_history(known, start, limits=limits, axes=("p",))
        climb = Climb(start, limits, axes=("p",), known=known)
        tuned: Climb | None = climb
        rate = max((m.mean for m in known.values()), default=f.link_mbps or 0.0)
        if float(f.key[1]) == 1 and rate > 0 and total_mbit / rate < SHORTEST_TUNED_S:
            start, tuned = untuned_setting(climb, preset)[0], None  # as `FileRun`
        run: Flowed = flow(tuned, total_mbit, moves=moves, seen=sees, rng=rng, start=start)
        row.stand_ins += sum(s.p not in levels for s in (*run.starts, run.final))
        chosen = at(run.final)
        top = max(judged.values())
        share = total_mbit / run.elapsed_s / top if run.elapsed_s > 0 else 0.0
        row.shares.append(share)
        row.samples.append(len(run.path))
        row.exact += judged[chosen] >= top - 1e-9
        row.below += best_p in judged and share < judged[best_p] / top - 1e-9
        row.excess += chosen > _needed(judged)
        acted += run.changes > 0
        if share < 1 - WITHIN and row.missed is not None:
            row.missed.append(f"{f.key[0]} B #{r}: {run.final.p} -> {share:.2f}")
        if history:
            runs[f.path].append((f.key, run.windows))
    row.acted = acted
    return row


def best_fixed_elsewhere(results: dict[str, dict[str, dict[str, object]]],
                         sets: Sequence[DataSet]) -> None:
    """For each data set and mode, the fixed P with the highest mean share over the other
    measured data sets (each data set weighs the same; a P measured by fewer than half of
    them does not count; synthetic sets are never learned from, nor is a set's own source),
    and its share on this one: `best_fixed_elsewhere`, added in place."""
    measured = [d for d in sets if not d.source]
    for data in sets:
        own = data.source or data.name
        others = [d for d in measured if d.name != own]
        for mode, result in results[data.name].items():
            fixed = result.get("fixed")
            if not isinstance(fixed, dict) or not others:
                continue
            shares: dict[str, list[float]] = defaultdict(list)
            for d in others:
                theirs = results[d.name].get(mode, {}).get("fixed")
                if isinstance(theirs, dict):
                    for p, s in theirs.items():
                        shares[p].append(s["mean_share"])
            here = [p for p in shares if p in fixed]
            if not here:
                continue
            most = max(len(shares[p]) for p in here)
            p = max((q for q in here if 2 * len(shares[q]) >= most),
                    key=lambda q: (statistics.mean(shares[q]), -int(q)))
            result["best_fixed_elsewhere"] = {
                "streams": int(p), "mean_share": fixed[p]["mean_share"],
                "learned_from": [d.name for d in others],
                "learned_share": round(statistics.mean(shares[p]), 4)}


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
        if s.get("stand_ins"):
            name += f" ({s['stand_ins']} samples or choices at the nearest level)"
        if "acted" in s:
            name += f" (a flow: changed its count on {s['acted']} of {s['curves']} curves)"
        if not s["curves"]:
            print(f"| {name} | no file has more repeats than it measures |" + " |" * 9)
            continue
        print(f"| {name} | {s['mean_share']:.4f} | {s['p10']:.4f} | {s['within_5pct']:.4f} | "
              f"{s['flow_selection']:.4f} | {s['below_best_fixed']} | {s['mean_samples']:.2f} | "
              f"{s['overhead_same_depth']:.3f} | {s['overhead_paper_sweep']:.3f} | "
              f"{s['more_streams_than_needed']} |")
    elsewhere = result.get("best_fixed_elsewhere")
    learned = elsewhere["streams"] if isinstance(elsewhere, dict) else None
    for p, s in fixed.items():
        marks = ["best fixed P"] if int(p) == best["streams"] else []
        marks += ["best fixed P of the other data sets"] if int(p) == learned else []
        if s["stand_ins"]:
            marks.append(f"on {s['stand_ins']} curves the nearest level")
        mark = f" ({'; '.join(marks)})" if marks else ""
        print(f"| fixed {p}{mark} | {s['mean_share']:.4f} | {s['p10']:.4f} | "
              f"{s['within_5pct']:.4f} | {s['flow_selection']:.4f} | "
              f"{s['below_best_fixed']} | 0 | | | {s['more_streams_than_needed']} |")
    preset = result.get("preset")
    if isinstance(preset, dict):
        count = "" if preset["curves"] == result["curves"] else f" ({preset['curves']} curves)"
        print(f"| per-class preset{count} | {preset['mean_share']:.4f} | {preset['p10']:.4f} | "
              f"{preset['within_5pct']:.4f} | {preset['flow_selection']:.4f} | | 0 | | | |")
    if isinstance(elsewhere, dict):
        print(f"\nBest fixed P learned from the other data sets "
              f"({', '.join(elsewhere['learned_from'])}): {elsewhere['streams']} "
              f"(their mean share {elsewhere['learned_share']:.4f}; here "
              f"{elsewhere['mean_share']:.4f}).")
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


def print_summary(sets: Sequence[DataSet], results: dict[str, dict[str, dict[str, object]]],
                  history: bool) -> None:
    """The default strategy against its baselines on every data set and mode, and the
    target: a mean share at least the best fixed P learned from the other data sets."""
    print(f"\n### Every data set: the default strategy ({DEFAULT}) against the baselines"
          f"{', with history' if history else ''}\n")
    print("| data set | judged | curves | levels | " + DEFAULT + ": mean share / samples | "
          "best fixed P of the other data sets | best fixed P in hindsight | per-class preset "
          "| oracle | at least the best fixed P of the others |")
    print("| --- | --- | ---: | --- | --- | --- | --- | --- | ---: | --- |")
    missed: list[str] = []
    met: list[str] = []
    for data in sets:
        for mode, result in results[data.name].items():
            if not result.get("curves"):
                print(f"| {data.name} | {mode} | 0 | | | | | | | (no file with two repeats) |")
                continue
            strategies = result["strategies"]
            assert isinstance(strategies, dict)
            own = strategies.get(DEFAULT)
            best = result["best_fixed"]
            assert isinstance(best, dict)
            levels = result["levels"]
            assert isinstance(levels, list)
            elsewhere = result.get("best_fixed_elsewhere")
            preset = result.get("preset")
            cells = [data.name, mode, str(result["curves"]),
                     f"{levels[0]}..{levels[-1]} ({len(levels)})",
                     f"{own['mean_share']:.4f} / {own['mean_samples']:.2f}"
                     if own and own.get("curves") else "-",
                     f"{elsewhere['streams']}: {elsewhere['mean_share']:.4f}"
                     if isinstance(elsewhere, dict) else "-",
                     f"{best['streams']}: {best['mean_share']:.4f}",
                     f"{preset['mean_share']:.4f}" if isinstance(preset, dict) else "-",
                     "1.0000"]
            if own and own.get("curves") and isinstance(elsewhere, dict):
                ok = own["mean_share"] >= elsewhere["mean_share"]
                (met if ok else missed).append(f"{data.name} ({mode})")
                cells.append("met" if ok else "MISSED")
            else:
                cells.append("-")
            print("| " + " | ".join(cells) + " |")
    if met or missed:
        print(f"\ntarget {DEFAULT} >= the best fixed P of the other data sets: met on "
              f"{len(met)} of {len(met) + len(missed)}"
              + (f"; MISSED on {', '.join(missed)}" if missed else ""))


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
                                      ("optimized (sampling)", 'optimization = "eos"')):
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

def _notes(path: Path) -> list[str]:
    """The values of a table's Note column, in the order they first appear."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        if "Note" not in (reader.fieldnames or ()):
            return []
        return list(dict.fromkeys(row["Note"] for row in reader))


def data_sets(specs: list[str], sigmas: list[float]) -> tuple[list[DataSet], list[str]]:
    """The data sets to replay and a note per default table part left out. Given specs:
    those tables (errors name the table). Else every note of every parallelism-sweeps
    table (a table's `chris-parallelism` rows named after the table alone; a note whose
    curves hold a median of fewer than MIN_SWEEP_LEVELS counts is left out: loni's
    Chris-data, a grid over CC and PP with P = 1 and one other count per curve), the
    parallelism slices of BTData and SGData, and the synthetic sets from loni."""
    if specs:
        given = []
        for spec in specs:
            if Path(spec).exists():
                path, note = spec, ""
            elif ":" in spec:
                path, _, note = spec.rpartition(":")
            else:
                raise TransferLogError(spec, "no such file")
            given.append(load_sweeps(Path(path), note or None))
        return given, []
    if not SWEEPS.exists():
        return [], []
    out: list[DataSet] = []
    left_out: list[str] = []
    for table in sorted(SWEEPS.glob("*.csv")):
        parts: list[str | None] = [*_notes(table)] or [None]
        for part in parts:
            name = table.stem if part in (None, "chris-parallelism") else f"{table.stem}:{part}"
            try:
                data = load_sweeps(table, part, name=name)
            except TransferLogError as exc:
                left_out.append(f"{name} left out: {exc.reason}")
                continue
            counts = statistics.median(len(c) for f in data.files for c in f.repeats)
            if counts < MIN_SWEEP_LEVELS:
                left_out.append(f"{name} left out: its curves hold a median of {counts:g} "
                                f"stream counts, not a sweep over P (--data "
                                f"{table}:{part} replays it)")
                continue
            out.append(data)
    out += [load_grid(GRIDS / f"{name}.csv") for name in ("BTData", "SGData")
            if (GRIDS / f"{name}.csv").exists()]
    loni = next((d for d in out if d.name == "loni"), None)
    out += [synthetic(loni, sigma) for sigma in sigmas] if loni else []
    return out, left_out


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip-transfer", action="store_true", help="skip the 1 GiB GridFTP run")
    p.add_argument("--judge", choices=("cross-repeat", "same-curve", "both"),
                   default="cross-repeat",
                   help="judge the choice on the mean of the other repeats (the default), on "
                        "the sampled repeat, or both")
    p.add_argument("--mode", choices=("same", "cross", "both"), default=None,
                   help=argparse.SUPPRESS)  # the earlier name of --judge
    p.add_argument("--history", action="store_true",
                   help="each optimization may use the earlier curves on the same path")
    p.add_argument("--data", action="append", default=[], metavar="FILE[:NOTE]",
                   help="replay this table (parallelism-sweeps format) instead of the defaults")
    p.add_argument("--synthetic", default="0.1,0.2,0.3", metavar="SIGMAS",
                   help="noise levels of the synthetic loni data sets ('' for none)")
    known = (*FLOWS, *STRATEGIES)
    p.add_argument("--strategies", default=",".join(known),
                   help=f"comma-separated, of: {', '.join(known)}")
    p.add_argument("--json", action="store_true",
                   help="print the replay only, as JSON (no model cost, no transfer)")
    args = p.parse_args()
    judge = {"same": "same-curve", "cross": "cross-repeat"}.get(args.mode or "", args.mode
                                                               or args.judge)
    modes = {"same-curve": ("same",), "cross-repeat": ("cross",),
             "both": ("same", "cross")}[judge]
    sigmas = [float(s) for s in args.synthetic.split(",") if s.strip()]
    names = [n for n in args.strategies.split(",") if n]
    if unknown := [n for n in names if n not in known]:
        p.error(f"unknown strategy {', '.join(unknown)}: known are {', '.join(known)}")
    chosen = {name: STRATEGIES[name] for name in names if name in STRATEGIES}
    flows = [name for name in names if name in FLOWS]
    try:
        sets, left_out = data_sets(args.data, sigmas)
    except (StorkError, OSError) as exc:  # a table it cannot use: one line, no traceback
        print(f"{Path(sys.argv[0]).name}: {exc}", file=sys.stderr)
        return EXIT_TABLE
    results = {data.name: {mode: replay(data, mode, args.history, chosen, flows)
                           for mode in modes}
               for data in sets}
    best_fixed_elsewhere(results, sets)
    if args.json:
        out = {"commit": _commit(), "history": args.history, "tolerance": TOLERANCE,
               "default_strategy": DEFAULT, "judge": judge, "left_out": left_out,
               "data_sets": {d.name: {"note": d.note, **results[d.name]} for d in sets}}
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    model_cost()
    if not sets:
        print(f"\n(replay skipped: {SWEEPS} not found)")
    print(f"\n## Replay of measured curves (commit {_commit()})")
    for data in sets:
        for mode in modes:
            print_table(data, mode, args.history, results[data.name][mode])
    print_summary(sets, results, args.history)
    for note in left_out:
        print(f"note: {note}")
    if not args.skip_transfer:
        sampling_overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
