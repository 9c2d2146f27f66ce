"""Which past transfers resemble this one (HARP section III-B1): features, the weighted cosine
similarity, the threshold relaxation, and groups of rows measured together. Pure.

Features (the paper's six, with its weights 2, 2, 10, 10, 3, 1): the path's bandwidth, its
RTT, BDP / TCP buffer, the size class (small, medium, large against the BDP), the average
file size and the file count. Each is put on a scale of 0 to 1 over a fixed range (logarithmic
for all but the size class: `RANGES`), so a similarity never depends on what else the history
holds, and each enters the vector as the unit pair (cos a, sin a) with a = x * pi / 2, scaled
by its weight. The cosine of two such vectors is the weighted mean of cos(pi/2 * |x_a - x_b|)
over the features: 1 when every feature is equal, lower the further any feature is, and
never fooled by two vectors that differ only in scale (the paper's plain cosine of positive
features is: 1 MB and 1 GB files on one path would look alike). A feature unknown on either
side (no RTT recorded) counts for neither.

Selection: the paper starts at 0.99 and lowers the threshold by 0.01 until 3,000 rows match.
On these features every dataset of the same size class on the same path is above 0.999 (a
file size 8 times larger costs 0.0007), so a 0.99 start takes the whole class at once and the
threshold never moves. By default (`threshold=None`) the threshold therefore starts at the
highest similarity in the history and comes down to each next one in turn: the nearest
datasets first, until `min_rows` rows match, never below `floor`. `threshold=0.99` (with
`step`) is the paper's rule, kept for comparison (docs/OPTIMIZERS.md has both measured).

Groups (the paper's "same dataset and network, collected at approximate times"): rows of one
dataset (origin, hosts, path, file size and count) in the order they were recorded, cut into
passes: a pass ends where a (cc, p, pp, fast) cell it already has comes again, as when a grid
sweep starts over. A pass is one background-traffic condition and gets a surface of its own;
passes with fewer than `min_cells` distinct (cc, p, pp) cells (a few chunks of real transfers)
are pooled per dataset. At most `max_groups` groups are kept: the most similar datasets first,
their latest passes first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stork.dataset.chunks import SizeClass, size_class
from stork.translog import COMPLETED, TransferRecord

Floats = NDArray[np.float64]

FEATURES = ("bandwidth", "rtt", "bdp_per_buffer", "size_class", "file_size", "file_count")
PAPER_WEIGHTS = (2.0, 2.0, 10.0, 10.0, 3.0, 1.0)
# (low, high) of each feature's scale: log10 bit/s 1 Mbit/s..100 Gbit/s, log10 s 0.1 ms..1 s,
# log2 BDP/buffer 1/64..64, size class 0..1, log10 bytes 1 kB..100 GB, log10 files 1..1e6
RANGES = np.array([[6.0, 11.0], [-4.0, 0.0], [-6.0, 6.0], [0.0, 1.0], [3.0, 11.0], [0.0, 6.0]])
CLASS_POSITION = {SizeClass.SMALL: 0.0, SizeClass.MEDIUM: 0.5, SizeClass.LARGE: 1.0}


def features(rtt_s: float | None, bandwidth_bps: float | None, buffer_bytes: float | None,
             cls: SizeClass, file_size_bytes: float, file_count: int) -> Floats:
    """The six features on their 0..1 scales; NaN where unknown."""
    nan = math.nan
    bdp = rtt_s * bandwidth_bps / 8 if rtt_s and bandwidth_bps else None
    raw = [
        math.log10(bandwidth_bps) if bandwidth_bps else nan,
        math.log10(rtt_s) if rtt_s else nan,
        math.log2(bdp / buffer_bytes) if bdp and buffer_bytes else nan,
        CLASS_POSITION[cls],
        math.log10(max(file_size_bytes, 1.0)),
        math.log10(max(file_count, 1)),
    ]
    x = (np.array(raw) - RANGES[:, 0]) / (RANGES[:, 1] - RANGES[:, 0])
    out: Floats = np.clip(x, 0.0, 1.0)
    return out


def record_class(r: TransferRecord) -> SizeClass:
    """A history row's size class against its own path's BDP (medium when unknown)."""
    if not r.rtt_s or not r.bandwidth_bps:
        return SizeClass.MEDIUM
    return size_class(round(r.file_size_bytes), r.rtt_s * r.bandwidth_bps / 8)


def record_features(r: TransferRecord) -> Floats:
    return features(r.rtt_s, r.bandwidth_bps, r.buffer_bytes, record_class(r),
                    r.file_size_bytes, r.file_count)


def similarity(query: Floats, rows: Floats, weights: Sequence[float] = PAPER_WEIGHTS) -> Floats:
    """Weighted cosine similarity of `rows` (n x 6) to `query` (6,), see the module's text."""
    rows2 = np.atleast_2d(rows)
    w2 = np.asarray(weights, dtype=float) ** 2
    known = ~(np.isnan(rows2) | np.isnan(query)[None, :])
    per_feature = np.cos(np.pi / 2 * np.abs(np.nan_to_num(rows2) - np.nan_to_num(query)))
    total = (known * w2).sum(axis=1)
    score = (known * w2 * per_feature).sum(axis=1)
    out: Floats = np.divide(score, total, out=np.zeros(len(rows2)), where=total > 0)
    return out


# -- groups ----------------------------------------------------------------------------------

DatasetKey = tuple[str, str, str, float | None, float | None, int | None, float, int]


def dataset_key(r: TransferRecord) -> DatasetKey:
    return (r.origin, r.src_host, r.dest_host, r.rtt_s, r.bandwidth_bps, r.buffer_bytes,
            r.file_size_bytes, r.file_count)


@dataclass(frozen=True)
class Group:
    """Rows measured together: one surface's data. `cells` are distinct log2 (cc, p, pp)."""

    label: str
    similarity: float
    cells: Floats  # (m, 3) log2 of cc, p, pp
    mbps: Floats  # (m,) mean throughput of the cell's rows
    rows: int


@dataclass(frozen=True)
class Selection:
    threshold: float  # the threshold the relaxation stopped at
    rows: int  # history rows at or above it
    datasets: int
    groups: tuple[Group, ...]


def select(history: Sequence[TransferRecord], query: Floats, *,
           weights: Sequence[float] = PAPER_WEIGHTS, threshold: float | None = None,
           step: float = 0.01, floor: float = 0.5, min_rows: int = 3000,
           max_groups: int = 64, min_cells: int = 20) -> Selection:
    """The groups of history rows similar enough to `query` (see the module's text)."""
    by_key: dict[DatasetKey, list[TransferRecord]] = {}
    for r in history:
        if r.outcome == COMPLETED and r.throughput_mbps > 0:
            by_key.setdefault(dataset_key(r), []).append(r)
    if not by_key:
        return Selection(threshold or 1.0, 0, 0, ())
    keys = list(by_key)
    matrix = np.array([record_features(by_key[k][0]) for k in keys])
    sims = similarity(query, matrix, weights)
    order = np.argsort(-sims, kind="stable")
    sizes = np.array([len(by_key[keys[i]]) for i in order])
    cumulative = np.cumsum(sizes)
    ranked = sims[order]
    if threshold is None:  # nearest first: down to each next similarity in turn
        enough = np.nonzero(cumulative >= min_rows)[0]
        last = int(enough[0]) if len(enough) else len(order) - 1
        level = max(float(ranked[last]), floor)
    else:  # the paper's: from `threshold` down by `step`
        level = threshold
        while True:
            taken = int(np.searchsorted(-ranked, -level, side="right"))
            if (taken and cumulative[taken - 1] >= min_rows) or level - step < floor - 1e-12:
                break
            level = round(level - step, 10)
    taken = int(np.searchsorted(-ranked, -level, side="right"))
    groups: list[Group] = []
    for i in order[:taken]:
        for group in _groups(by_key[keys[i]], float(sims[i]), min_cells):
            if len(groups) >= max_groups:
                break
            groups.append(group)
    rows = int(cumulative[taken - 1]) if taken else 0
    return Selection(level, rows, taken, tuple(groups))


def _groups(records: list[TransferRecord], sim: float, min_cells: int) -> list[Group]:
    """One dataset's rows -> its passes, latest first; small passes pooled into one."""
    passes: list[list[TransferRecord]] = []
    seen: set[tuple[int, int, int, bool]] = set()
    for r in records:
        cell = (r.cc, r.p, r.pp, r.fast)
        if not passes or cell in seen:
            passes.append([])
            seen = set()
        passes[-1].append(r)
        seen.add(cell)
    first = records[0]
    name = (f"{first.src_host}->{first.dest_host} {first.file_size_bytes:.4g} B x "
            f"{first.file_count} ({first.origin})")
    distinct = [len({(r.cc, r.p, r.pp) for r in p}) for p in passes]
    out = [_group(f"{name} pass {k + 1}/{len(passes)}", sim, passes[k])
           for k in reversed(range(len(passes))) if distinct[k] >= min_cells]
    small = [r for k, p in enumerate(passes) if distinct[k] < min_cells for r in p]
    if small:
        out.append(_group(f"{name} pooled", sim, small))
    return out


def _group(label: str, sim: float, records: list[TransferRecord]) -> Group:
    sums: dict[tuple[int, int, int], list[float]] = {}
    for r in records:
        sums.setdefault((r.cc, r.p, r.pp), []).append(r.throughput_mbps)
    cells = np.log2(np.array(list(sums), dtype=float))
    mbps = np.array([sum(v) / len(v) for v in sums.values()])
    return Group(label, sim, cells, mbps, len(records))
