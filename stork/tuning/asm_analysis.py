"""The offline analysis of ASM (the paper's section 3.1): five phases over the transfer log.
Pure: arrays and records in, a `Model` out; no I/O, no clock.

The analysis is additive: `Aggregate.add(records)` folds new transfer log rows into per-dataset
tallies (the mean path and dataset features, and every row's throughput and known load per
(cc, p, pp) cell), and everything else is derived from the tallies by `build_model`, a
deterministic function of them. Adding rows A, then B, gives the same tallies, and so the same
model, as adding A + B.

Phases (names as in the paper):
1. Clustering in hierarchy. A *group* is one dataset of one host pair (file size to half an
   octave, file count to an octave). Groups are clustered first by their network (log2 of
   RTT, bottleneck rate and TCP buffer), then, inside each network cluster, by their dataset
   (log2 of the mean file size and file count): hierarchical agglomerative clustering with
   UPGMA (average) linkage, the number of clusters the one where the Calinski-Harabasz index
   (scikit-learn) has its first local maximum (see `cluster`), one cluster when the points
   are within `TOLERANCE` of each other.
2. Surface construction: for each cluster and each load level, a piecewise cubic spline
   surface (`stork.tuning.asm_surface`) through the median throughput of each measured cell.
3. Maxima: each surface's largest value on the whole-number lattice the limits allow.
4. Load intensity tagging: a row run while the daemon knew k other transfers on the link
   (`sharing`) has intensity k / (k + 1) (its fair share, the paper's assumption 1); a row
   with none known has intensity 1 - T / T90, T90 the cell's 90th percentile in the cluster
   (the deviation that only unknown load explains, assumption 2). Intensities are binned in
   `LEVELS` (about 0%, 25%, 50%, 75% of the link taken); a level with rows in at least
   `MIN_COVERAGE` of the cluster's cells gets a surface.
5. Sampling regions: around each surface's maximum, the grid points within one grid step;
   on them the least relative distance between any two surfaces (the max-min of section
   3.1.5); the `REGION_POINTS` best are the cluster's sampling region, and each surface's
   sampling point is the point of its own neighbourhood within `NEAR_MAX` of its maximum
   where the surfaces are most distinguishable.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from stork.dataset.chunks import Params
from stork.translog import COMPLETED, TransferRecord
from stork.tuning.asm_surface import SIGMA_FLOOR, Floats, Surface

if TYPE_CHECKING:  # (stork.tuning imports this module: no cycle at run time)
    from stork.tuning.base import DatasetDescription, Limits

TOLERANCE = 0.5  # log2 units: points closer than this (1.4x) are one cluster
MAX_CLUSTERS = 12  # per level of the hierarchy
EDGES = (0.125, 0.375, 0.625)  # load intensity bins -> levels 0..3
LEVELS = (0.0, 0.25, 0.5, 0.75)  # what each level stands for
MIN_COVERAGE = 0.25  # share of a cluster's cells a load level must have rows in
TOP_QUANTILE = 90  # the unloaded throughput of a cell: this percentile of its rows
REGION_POINTS = 8  # points in a cluster's sampling region
NEAR_MAX = 0.95  # a surface's sampling point is within this share of its maximum


# -- the additive tallies -----------------------------------------------------------------

def group_key(r: TransferRecord) -> str:
    size = round(2 * math.log2(max(r.file_size_bytes, 1.0)))
    count = round(math.log2(max(r.file_count, 1)))
    return f"{r.src_host}|{r.dest_host.split('/')[0]}|{size}|{count}"


@dataclass
class Group:
    """One dataset of one host pair: sums for its mean features, and per cell every row's
    (throughput Mbit/s, known contending transfers)."""

    src: str
    dest: str
    rows: int = 0
    sums: dict[str, float] = field(default_factory=dict)  # feature -> sum over rows knowing it
    counts: dict[str, int] = field(default_factory=dict)  # feature -> rows knowing it
    cells: dict[str, list[list[float]]] = field(default_factory=dict)  # "cc,p,pp" -> rows

    def mean(self, feature: str) -> float | None:
        n = self.counts.get(feature, 0)
        return self.sums[feature] / n if n else None

    def add(self, r: TransferRecord) -> None:
        self.rows += 1
        for feature, value in (("rtt_s", r.rtt_s), ("bandwidth_bps", r.bandwidth_bps),
                               ("buffer_bytes", r.buffer_bytes),
                               ("file_size_bytes", r.file_size_bytes),
                               ("file_count", r.file_count)):
            if value:
                self.sums[feature] = self.sums.get(feature, 0.0) + float(value)
                self.counts[feature] = self.counts.get(feature, 0) + 1
        cell = self.cells.setdefault(f"{r.cc},{r.p},{r.pp}", [])
        cell.append([float(r.throughput_mbps), float(r.sharing)])
        cell.sort()


@dataclass
class Aggregate:
    """Everything the analysis keeps of the rows it has read (the persisted ASM state)."""

    groups: dict[str, Group] = field(default_factory=dict)
    rows: int = 0  # rows folded in
    last_row_id: int = 0  # the transfer log's newest row read (set by the caller)

    def add(self, records: Iterable[TransferRecord]) -> int:
        """Fold in completed rows that moved data; returns how many."""
        added = 0
        for r in records:
            if r.outcome != COMPLETED or r.throughput_mbps <= 0 or min(r.cc, r.p, r.pp) < 1:
                continue
            key = group_key(r)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = Group(r.src_host, r.dest_host.split("/")[0])
            group.add(r)
            added += 1
        self.rows += added
        return added

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "last_row_id": self.last_row_id,
                "groups": {k: {"src": g.src, "dest": g.dest, "rows": g.rows, "sums": g.sums,
                               "counts": g.counts, "cells": g.cells}
                           for k, g in sorted(self.groups.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Aggregate:
        groups = {k: Group(g["src"], g["dest"], g["rows"], dict(g["sums"]), dict(g["counts"]),
                           {c: [list(v) for v in rows] for c, rows in g["cells"].items()})
                  for k, g in data["groups"].items()}
        return cls(groups, int(data["rows"]), int(data["last_row_id"]))


# -- phase 1: clustering --------------------------------------------------------------------

def network_features(rtt_s: float | None, bandwidth_bps: float | None,
                     buffer_bytes: float | None) -> list[float]:
    return [_log2(rtt_s, 1e3), _log2(bandwidth_bps, 1e-6), _log2(buffer_bytes, 1 / 2**20)]


def dataset_features(file_size_bytes: float | None, file_count: float | None) -> list[float]:
    return [_log2(file_size_bytes, 1.0), _log2(file_count, 1.0)]


def _log2(value: float | None, scale: float) -> float:
    return math.log2(value * scale) if value else math.nan


@dataclass(frozen=True)
class Clustering:
    labels: tuple[int, ...]
    k: int
    scores: dict[int, float]  # k -> Calinski-Harabasz index


def cluster(points: Floats) -> Clustering:
    """HAC (average linkage) with the Calinski-Harabasz index choosing the count."""
    from sklearn.cluster import AgglomerativeClustering
    from sklearn.metrics import calinski_harabasz_score

    x = np.round(_filled(points), 2)  # a hundredth of an octave: measurement noise
    unique, inverse = np.unique(x, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    n = len(unique)
    spread = max((float(np.max(np.abs(unique[i] - unique[j])))
                  for i in range(n) for j in range(i + 1, n)), default=0.0)
    if n == 1 or spread <= TOLERANCE:
        return Clustering(tuple(0 for _ in range(len(x))), 1, {})
    if n == 2:
        return Clustering(tuple(int(i) for i in inverse), 2, {})
    scores: dict[int, float] = {}
    found: dict[int, Any] = {}
    for k in range(2, min(n - 1, MAX_CLUSTERS) + 1):
        found[k] = AgglomerativeClustering(n_clusters=k, linkage="average").fit_predict(unique)
        scores[k] = float(calinski_harabasz_score(unique, found[k]))
    # the first local maximum: with few points per cluster the index grows again as the
    # count nears the number of points (singletons have no within-cluster spread)
    ks = sorted(scores)
    k = next((k for i, k in enumerate(ks)
              if i + 1 == len(ks) or scores[k] >= scores[ks[i + 1]]), ks[-1])
    return Clustering(tuple(int(found[k][i]) for i in inverse), k, scores)


def _filled(points: Floats) -> Floats:
    """Unknown features (NaN) as the column's mean (0 when none knows it)."""
    x = np.array(points, dtype=np.float64)
    for j in range(x.shape[1]):
        column = x[:, j]
        known = column[~np.isnan(column)]
        column[np.isnan(column)] = float(known.mean()) if len(known) else 0.0
    return x


# -- the model ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cluster:
    """A cluster of datasets on similar networks: its surfaces, lightest load first."""

    id: int
    network: tuple[float, ...]  # centroids, in the features of phase 1
    dataset: tuple[float, ...]
    groups: tuple[str, ...]  # "SRC->DEST size x count" of each dataset in it
    surfaces: tuple[Surface, ...]
    rows: tuple[int, ...]  # rows behind each surface
    samples: tuple[Params, ...]  # each surface's sampling point (phase 5)
    region: tuple[tuple[Params, float], ...]  # the sampling region: point, max-min distance


@dataclass(frozen=True)
class Model:
    clusters: tuple[Cluster, ...]
    network_scores: dict[int, float]  # Calinski-Harabasz by cluster count (top level)
    rows: int

    def lookup(self, d: DatasetDescription) -> Cluster:
        """The closest cluster: nearest network centroid, then nearest dataset centroid
        among that network's clusters (features unknown on either side count for neither).
        Its time grows with the number of clusters only, never with the history."""
        net = network_features(d.rtt_s, d.bandwidth_bps, d.buffer_bytes)
        data = dataset_features(d.avg_file_bytes, d.file_count)
        nearest_net = min(_distance(net, c.network) for c in self.clusters)
        candidates = [c for c in self.clusters
                      if _distance(net, c.network) <= nearest_net + 1e-9]
        return min(candidates, key=lambda c: _distance(data, c.dataset))


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
    return math.sqrt(sum((x - y) ** 2 for x, y in pairs))


def build_model(agg: Aggregate) -> Model:
    """Phases 1-5 over the tallies."""
    keys = sorted(agg.groups)
    if not keys:
        return Model((), {}, agg.rows)
    groups = [agg.groups[k] for k in keys]
    net = np.array([network_features(g.mean("rtt_s"), g.mean("bandwidth_bps"),
                                     g.mean("buffer_bytes")) for g in groups])
    data = np.array([dataset_features(g.mean("file_size_bytes"), g.mean("file_count"))
                     for g in groups])
    top = cluster(net)
    clusters: list[Cluster] = []
    for n in range(top.k):
        members = [i for i, label in enumerate(top.labels) if label == n]
        inner = cluster(data[members])
        for m in range(inner.k):
            chosen = [members[i] for i, label in enumerate(inner.labels) if label == m]
            built = _cluster(len(clusters), [_label(groups[i]) for i in chosen],
                             [groups[i] for i in chosen], _filled(net)[chosen].mean(axis=0),
                             _filled(data)[chosen].mean(axis=0))
            if built is not None:
                clusters.append(built)
    return Model(tuple(clusters), top.scores, agg.rows)


def _label(g: Group) -> str:
    size, count = g.mean("file_size_bytes") or 0.0, g.mean("file_count") or 0.0
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)):
        if size >= scale or unit == "B":
            return f"{g.src}->{g.dest} {size / scale:.3g} {unit} x {count:.0f}"
    raise AssertionError  # (the loop always returns)


def _cluster(index: int, labels: list[str], groups: list[Group], net: Floats,
             data: Floats) -> Cluster | None:
    """Phases 2-5 for one cluster."""
    pooled: dict[tuple[int, int, int], list[list[float]]] = defaultdict(list)
    for g in groups:
        for name, rows in g.cells.items():
            cc, p, pp = (int(v) for v in name.split(","))
            pooled[(cc, p, pp)].extend(rows)
    if not pooled:
        return None
    # phase 4: load intensity of every row
    tops: dict[tuple[int, int, int], float] = {}
    tagged: dict[int, dict[tuple[int, int, int], list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list))
    for cell, rows in pooled.items():
        free = [t for t, k in rows if k == 0] or [t for t, _ in rows]
        tops[cell] = float(np.percentile(free, TOP_QUANTILE))
        for t, k in rows:
            intensity = k / (k + 1) if k > 0 else min(max(1 - t / tops[cell], 0.0), 1.0)
            level = int(np.digitize(intensity, EDGES))
            tagged[level][cell].append((t, intensity))
    grid = tuple(tuple(sorted({c[axis] for c in pooled})) for axis in range(3))
    surfaces: list[tuple[Surface, int]] = []
    most = max(tagged, key=lambda lv: (sum(len(v) for v in tagged[lv].values()), -lv))
    for level in sorted(tagged):
        cells = tagged[level]
        if len(cells) < MIN_COVERAGE * len(pooled) and level != most:
            continue
        surfaces.append((_surface(grid, level, cells, tops), sum(len(v) for v in cells.values())))
    surfaces.sort(key=lambda s: s[0].intensity)
    shapes = tuple(s for s, _ in surfaces)
    samples, region = _regions(shapes)
    return Cluster(index, tuple(float(v) for v in net), tuple(float(v) for v in data),
                   tuple(labels), shapes, tuple(n for _, n in surfaces), samples, region)


def _surface(grid: tuple[tuple[int, ...], ...], level: int,
             cells: dict[tuple[int, int, int], list[tuple[float, float]]],
             tops: dict[tuple[int, int, int], float]) -> Surface:
    """Phase 2 for one load level: the median of the level's rows in each cell; a measured
    cell without rows at this level gets its unloaded throughput less the level's load; a
    grid point never measured gets the value of the nearest one that has (in log2 steps)."""
    shape = tuple(len(a) for a in grid)
    values = np.full(shape, np.nan)
    index = [{v: i for i, v in enumerate(a)} for a in grid]
    for cell, top in tops.items():
        at = tuple(index[axis][cell[axis]] for axis in range(3))
        rows = cells.get(cell)
        values[at] = (float(np.median([t for t, _ in rows])) if rows
                      else top * (1 - LEVELS[level]))
    if np.isnan(values).any():
        known = np.argwhere(~np.isnan(values))
        logs = [np.log2(np.array(a, dtype=np.float64)) for a in grid]
        for missing in np.argwhere(np.isnan(values)):
            point = np.array([logs[axis][missing[axis]] for axis in range(3)])
            near = min(known, key=lambda k: float(np.sum(
                (np.array([logs[axis][k[axis]] for axis in range(3)]) - point) ** 2)))
            values[tuple(missing)] = values[tuple(near)]
    deviations = [t / values[tuple(index[axis][cell[axis]] for axis in range(3))] - 1
                  for cell, rows in cells.items() for t, _ in rows]
    sigma = max(SIGMA_FLOOR, float(np.std(deviations))) if deviations else SIGMA_FLOOR
    intensity = float(np.mean([i for rows in cells.values() for _, i in rows]))
    return Surface(grid[0], grid[1], grid[2], values, sigma, intensity)


def _regions(surfaces: Sequence[Surface]
             ) -> tuple[tuple[Params, ...], tuple[tuple[Params, float], ...]]:
    """Phase 5 on the grid points (where every surface passes through measurements)."""
    first = surfaces[0]
    shape = first.values.shape
    maxima = [np.unravel_index(int(np.argmax(s.values)), shape) for s in surfaces]
    if len(surfaces) == 1:
        return (_params(first, maxima[0]),), ((_params(first, maxima[0]), 0.0),)
    stack = np.stack([s.values for s in surfaces])
    distance = np.full(shape, np.inf)
    for i in range(len(surfaces)):
        for j in range(i + 1, len(surfaces)):
            pair = np.abs(stack[i] - stack[j]) / np.maximum(np.maximum(stack[i], stack[j]),
                                                            1e-9)
            distance = np.minimum(distance, pair)
    hoods = [_neighbourhood(m, shape) for m in maxima]
    union = sorted(set().union(*hoods), key=lambda at: (-distance[at], at))
    region = tuple((_params(first, at), float(distance[at])) for at in union[:REGION_POINTS])
    samples = []
    for s, m, hood in zip(surfaces, maxima, hoods, strict=True):
        near = [at for at in hood if s.values[at] >= NEAR_MAX * s.values[m]]
        samples.append(_params(first, max(near, key=lambda at: (distance[at], s.values[at]))))
    return tuple(samples), region


def _neighbourhood(center: tuple[Any, ...], shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    ranges = [range(max(0, int(c) - 1), min(n, int(c) + 2)) for c, n in zip(center, shape,
                                                                           strict=True)]
    return {(a, b, c) for a in ranges[0] for b in ranges[1] for c in ranges[2]}


def _params(s: Surface, at: tuple[Any, ...]) -> Params:
    return Params(s.cc[int(at[0])], s.p[int(at[1])], s.pp[int(at[2])])


def maximum(surface: Surface, limits: Limits) -> tuple[Params, float]:
    """Phase 3 under `limits`: the surface's largest value on the allowed lattice."""
    return surface.maximum(limits.allowed(0), limits.allowed(1), limits.allowed(2),
                           limits.max_streams)
