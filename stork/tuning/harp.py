"""HARP (Arslan, Guner, Kosar): historical analysis and real-time probing. Pure.

The strategy (section III of the paper; where this differs from it, and why, is in
docs/OPTIMIZERS.md):
1. Similar history (`similarity.select`): the paper's six features and weights; the nearest
   datasets first until 3,000 rows match; their rows in groups measured together (one
   background-traffic condition each).
2. A surface per group (`surfaces.fit_surface`): a polynomial over log2 (cc, p, pp) of degree
   2 to 4 chosen by cross-validation; groups whose cross-validated R^2 is below 0.6 are
   dropped.
3. The choice (`_choose`): the maximum of the weighted mean of the surfaces, by SLSQP inside
   the limits and inside the parameter ranges the groups measured (no extrapolation), in
   whole numbers. Guard: a maximum above `guard` times the best throughput observed (the
   groups' best cells, scaled to the probes, and the probes) is not believed, the groups'
   best measured cell is taken instead; no prediction is above what was observed. Then the
   relaxation: the fewest streams (then the least pipelining) that the weighted surface
   predicts within `relax` of the maximum (`agree_weight` makes every heavy surface agree
   too: measured, it keeps more streams for no gain).
4. Real-time probing: the choice is probed on real files of the dataset (the first choice,
   before any probe, weighs every similar group alike; `first_probe="heuristic"` probes the
   size class's heuristic parameters first, as the paper does). Each probe re-weighs the
   surfaces: their errors at the probed parameters, |T - f(x)| / T (after scaling each
   surface to the probes' level when there are two probes or more, so that it is the shape
   that is judged), are clustered by DBSCAN, and the classes, most accurate last, weigh
   2^0, 2^1, ..., 2^(k-1); each surface is scaled to the probes' level (least squares,
   within 1/4..4). The next probe is the new choice; when that was probed already
   (`explore`), the best cell of the heaviest surface not probed yet (surfaces in the order
   of their weights; each surface's best cell on the ladder lattice inside the measured
   range), until `max_probes` probes were used. Without `explore` the probing stops when the
   choice repeats. A probe that found no file left to send ends the probing.
5. The decision (`pick="probed"`): the best measured probe, the one with the fewest streams
   when others measured within `tolerance` of it: every answer was measured on this
   transfer. `pick="choice"`: the last choice, unless a probe measured more than it
   predicts; then the best probed parameters.
6. cc is at most the dataset's file count (`cc_at_most_files`): more channels than files
   have nothing to carry.
7. No surface passed (a few noisy rows per group, as a testbed sweep leaves): the probes go
   to each similar group's best measured cell, the most similar first, and the size class's
   heuristic parameters (`_without_surfaces`); the best probe is kept. No similar history at
   all: the heuristic's parameters, probed once.
The decision's band is the prediction +- max(`band`, 2 x the cross-validated relative error
of the weighted surfaces); `retune` (the base class's) asks again when a chunk leaves it.

`share_concurrency` is Algorithm 1's multi-chunk step: chunks of several size classes that
run together share the largest concurrency any of them asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from sklearn.cluster import DBSCAN

from stork.dataset.chunks import Params, default_params
from stork.translog import TransferRecord
from stork.tuning.base import (
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
    best_probe,
)
from stork.tuning.similarity import PAPER_WEIGHTS, Group, features, select
from stork.tuning.surfaces import (
    Floats,
    Surface,
    fit_surface,
    integer_best,
    lattice,
    maximize,
    optima,
    predict,
    relax,
    to_u,
)


@dataclass(frozen=True)
class HarpSettings:
    weights: tuple[float, ...] = PAPER_WEIGHTS  # bandwidth, RTT, BDP/buffer, class, size, count
    threshold: float | None = None  # None: nearest datasets first; the paper: 0.99
    threshold_step: float = 0.01  # ... coming down by this
    threshold_floor: float = 0.5
    min_rows: int = 3000  # relax the threshold until this many rows match
    max_groups: int = 64
    min_cells: int = 20  # distinct (cc, p, pp) cells a group needs for a surface of its own
    degrees: tuple[int, ...] = (2, 3, 4)
    folds: int = 5
    min_r2: float = 0.6
    cluster_eps: float = 0.1  # DBSCAN radius, in relative error at the probes
    scale_range: tuple[float, float] = (0.25, 4.0)
    guard: float = 1.25  # believe no prediction above this times the best observed
    relax: float = 0.95
    # None: relax on the weighted surface (the paper); a share: the surfaces weighing at least
    # that share of the heaviest must each agree too
    agree_weight: float | None = None
    confirm: bool = False  # a probe inside the predicted band ends the probing
    # when the choice was probed already, probe the best cell of the heaviest surface not
    # probed yet (False: stop, as before)
    explore: bool = True
    pick: Literal["probed", "choice"] = "probed"  # the best probe, or the last choice
    tolerance: float = 0.0  # probes measured within this of the best: the fewest streams
    cc_at_most_files: bool = True
    band: float = 0.15  # least half-width of the predicted band, relative
    max_probes: int = 3
    first_probe: str = "model"  # "model": the surfaces' choice; "heuristic": the paper's
    probe_seconds: float = 2.0  # probe size: this long at the link's rate (the paper's 2 x BW)
    probe_share: float = 0.25  # ... but at most this share of the dataset


@dataclass(frozen=True)
class _Model:
    group: Group
    surface: Surface


@dataclass(frozen=True)
class _Choice:
    params: Params
    predicted_mbps: float
    band: float  # relative half-width
    coef: Floats  # the weighted surface it was read from
    notes: tuple[str, ...] = field(default_factory=tuple)
    optima: tuple[Params, ...] = ()  # each surface's best cell, heaviest surface first

    def unit_mbps(self, params: Params) -> float:
        """The weighted surface at cc = 1 with `params`' p and pp (the paper's UT)."""
        return max(float(predict(self.coef, np.array([[0.0, *to_u(params)[1:]]]))[0]), 0.0)


class HarpOptimizer(Optimizer):
    name = "harp"

    def __init__(self, settings: HarpSettings | None = None) -> None:
        self.settings = settings or HarpSettings()

    def optimize(self, history: Sequence[TransferRecord], dataset: DatasetDescription,
                 limits: Limits, probe: Probe) -> Decision:
        s = self.settings
        if s.cc_at_most_files:
            limits = limits.at_most_cc(dataset.file_count)
        models, groups, found = self.models(history, dataset)
        size = self.probe_bytes(dataset)
        if not models:
            return self._without_surfaces(groups, found, dataset, limits, probe, size)
        probes: list[ProbeResult] = []
        stop = ""
        if s.first_probe == "heuristic":
            heuristic = probe(first_probe(dataset, limits), size)
            if heuristic.empty:
                stop = "no file left to probe"
            else:
                probes.append(heuristic)
        choice = self._choose(models, probes, limits)
        confirmed = False
        while not stop and len(probes) < s.max_probes:
            target = self._next(choice, probes)
            if target is None:
                break
            check = probe(target, size)
            if check.empty:
                stop = "no file left to probe"
                break
            probes.append(check)
            if s.confirm and target == choice.params and abs(
                    check.throughput_mbps - choice.predicted_mbps) <= (
                    choice.band * choice.predicted_mbps):
                confirmed = True
                break
            choice = self._choose(models, probes, limits)
        params, predicted, notes = self._decide(choice, probes, confirmed)
        how = "confirmed by its probe" if confirmed else f"{len(probes)} probe(s)"
        return Decision(self.name, params, predicted, _band(predicted, choice.band),
                        tuple(probes), f"{found}; {how}; " + "; ".join(
                            notes + ([stop] if stop else [])),
                        unit_mbps=choice.unit_mbps(params))

    def _without_surfaces(self, groups: Sequence[Group], found: str,
                          dataset: DatasetDescription, limits: Limits, probe: Probe,
                          size: int) -> Decision:
        """No surface passed the gate (too few or too noisy rows): probe what the similar
        history measured instead (`measured_best_cells`) beside the heuristic's parameters,
        and keep the best probe. Without similar history: the heuristic's parameters."""
        s = self.settings
        heuristic = first_probe(dataset, limits)
        cells = [c for c in measured_best_cells(groups, limits) if c != heuristic]
        candidates = [*cells[:s.max_probes - 1], heuristic] if cells else [heuristic]
        probes: list[ProbeResult] = []
        for params in candidates:
            result = probe(params, size)
            if result.empty:
                break
            probes.append(result)
        source = ("the similar history's best measured cells and the heuristic's parameters"
                  if cells else "no usable history, the heuristic's parameters")
        if not probes:
            return Decision(self.name, heuristic, None, None, (),
                            f"{found}: {source}; no file left to probe")
        kept = best_probe(probes, s.tolerance)
        return Decision(self.name, kept.params, kept.throughput_mbps,
                        _band(kept.throughput_mbps, s.band), tuple(probes),
                        f"{found}: {source} probed ({len(probes)}), the best kept")

    def _decide(self, choice: _Choice, probes: Sequence[ProbeResult], confirmed: bool
                ) -> tuple[Params, float, list[str]]:
        """Step 5: the parameters for the rest, their predicted throughput, and notes."""
        notes = list(choice.notes)
        params, predicted = choice.params, choice.predicted_mbps
        if not probes or confirmed:
            return params, predicted, notes
        if self.settings.pick == "probed":
            kept = best_probe(probes, self.settings.tolerance)
            if kept.params != params:
                notes.append(f"probe {kept.params.label()} kept over the surfaces' "
                             f"{params.label()} ({predicted:.0f} Mbit/s predicted)")
            return kept.params, kept.throughput_mbps, notes
        measured = {r.params: r.throughput_mbps for r in probes}
        best = max(probes, key=lambda r: r.throughput_mbps)
        if best.throughput_mbps >= measured.get(params, predicted):
            if best.params != params:
                notes.append(f"best probe {best.params.label()} taken over the surfaces' "
                             f"{params.label()} ({predicted:.0f} Mbit/s predicted)")
            params, predicted = best.params, best.throughput_mbps
        return params, predicted, notes

    def _next(self, choice: _Choice, probes: Sequence[ProbeResult]) -> Params | None:
        """What to probe next: the choice, else (`explore`) the best cell of the heaviest
        surface not probed yet; None: nothing left worth a probe."""
        probed = {r.params for r in probes}
        if choice.params not in probed:
            return choice.params
        if not self.settings.explore:
            return None
        return next((c for c in choice.optima if c not in probed), None)

    def models(self, history: Sequence[TransferRecord], dataset: DatasetDescription
               ) -> tuple[list[_Model], tuple[Group, ...], str]:
        """The surfaces of the history similar to `dataset`, the groups they were fitted to
        (those too noisy for a surface included), and a summary of how they were found."""
        s = self.settings
        query = features(dataset.rtt_s, dataset.bandwidth_bps, dataset.buffer_bytes,
                         dataset.size_class, dataset.avg_file_bytes, dataset.file_count)
        selection = select(history, query, weights=s.weights, threshold=s.threshold,
                           step=s.threshold_step, floor=s.threshold_floor,
                           min_rows=s.min_rows, max_groups=s.max_groups,
                           min_cells=s.min_cells)
        models, rejected = [], 0
        for group in selection.groups:
            surface, _ = fit_surface(group.cells, group.mbps, degrees=s.degrees,
                                     folds=s.folds, min_r2=s.min_r2)
            if surface is None:
                rejected += 1
            else:
                models.append(_Model(group, surface))
        found = (f"{selection.rows} history rows of {selection.datasets} datasets at "
                 f"similarity >= {selection.threshold:.4f}, {len(models)} surfaces "
                 f"({rejected} groups below R^2 {s.min_r2})")
        return models, selection.groups, found

    def probe_bytes(self, dataset: DatasetDescription) -> int:
        """About how much one probe sends (see `HarpSettings`)."""
        return probe_bytes(dataset, self.settings.probe_seconds, self.settings.probe_share)

    def _choose(self, models: list[_Model], probes: list[ProbeResult],
                limits: Limits) -> _Choice:
        s = self.settings
        probes = [r for r in probes if r.throughput_mbps > 0]  # (a failed batch tells no level)
        points = np.array([to_u(r.params) for r in probes])
        measured = np.array([r.throughput_mbps for r in probes])
        if probes:
            weights, scales, errors = probe_weights([m.surface for m in models], points,
                                                    measured, s.cluster_eps, s.scale_range)
        else:  # before any probe: every similar group alike
            weights, scales, errors = (np.ones(len(models)), np.ones(len(models)),
                                       np.zeros(len(models)))
        coef = sum(w * c * m.surface.coef for w, c, m in zip(weights, scales, models,
                                                             strict=True)) / weights.sum()
        lower = np.log2([limits.allowed(i)[0] for i in range(3)]).astype(float)
        seen_top = np.max(np.vstack([m.group.cells for m in models]), axis=0)
        upper = np.maximum(np.minimum(seen_top, np.log2(limits.maxima())), lower)
        starts = [m.group.cells[int(np.argmax(m.group.mbps))]
                  for m in _top(models, weights, 3)] + list(points) + [(lower + upper) / 2]
        u_star, _ = maximize(coef, lower, upper, math.log2(limits.max_streams), starts)
        params, value = integer_best(coef, u_star, limits, upper)
        observed = max(float(np.max(m.group.mbps)) * c for m, c in zip(models, scales,
                                                                       strict=True))
        observed = max(observed, float(measured.max(initial=0.0)))
        notes = []
        if value > s.guard * observed:
            params, value = self._best_observed(models, coef, limits)
            notes.append(f"guard: the surfaces promised more than {s.guard} x the best "
                         f"observed {observed:.0f} Mbit/s, best measured cell taken")
        heavy = [] if s.agree_weight is None else [
            c * m.surface.coef for w, c, m in zip(weights, scales, models, strict=True)
            if w >= weights.max() * s.agree_weight]
        relaxed, relaxed_value = relax(coef, params, limits, s.relax, heavy)
        if relaxed != params:
            notes.append(f"relaxed from {params.label()}")
        predicted = min(relaxed_value, observed)
        spread = float(np.average([m.surface.cv_rel_rmse for m in models], weights=weights))
        best = int(np.argmax(weights))
        notes.append(f"heaviest surface {models[best].group.label} "
                     f"(probe error {errors[best]:.0%})")
        order = np.argsort(-weights, kind="stable")  # heaviest first, then most similar
        cells = [c for c in lattice(limits, upper) if limits.admits(c)]
        best_cells = optima([models[i].surface.coef for i in order], cells)
        return _Choice(relaxed, max(predicted, 0.0), max(s.band, 2 * spread), coef,
                       tuple(notes), tuple(dict.fromkeys(best_cells)))

    @staticmethod
    def _best_observed(models: list[_Model], coef: Floats, limits: Limits
                       ) -> tuple[Params, float]:
        cells = {limits.nearest(Params(*(round(2 ** v) for v in cell)))
                 for m in models for cell in m.group.cells}
        cells = {c for c in cells if limits.admits(c)} or cells
        ranked = sorted(cells, key=lambda c: float(predict(coef, to_u(c))[0]))
        best = ranked[-1]
        return best, float(predict(coef, to_u(best))[0])


def probe_weights(surfaces: Sequence[Surface], points: Floats, measured: Floats, eps: float,
                  scale_range: tuple[float, float]) -> tuple[Floats, Floats, Floats]:
    """(weight, scale, relative error) of each surface from the probes (see the module's text):
    errors |T - f(x)| / T averaged over the probes, DBSCAN classes of them weighing 2^rank
    with the most accurate class highest; scales fit each surface's level to the probes."""
    predictions = np.array([s.predict(points) for s in surfaces])  # (surfaces, probes)
    low, high = scale_range
    denominator = (predictions ** 2).sum(axis=1)
    raw = np.divide((predictions * measured[None, :]).sum(axis=1), denominator,
                    out=np.ones(len(surfaces)), where=denominator > 0)
    scales = np.clip(raw, low, high)
    # one probe: the level (the paper's epsilon); more: the shape, each surface scaled first
    fitted = predictions * scales[:, None] if len(measured) > 1 else predictions
    errors = np.mean(np.abs(measured[None, :] - fitted) / measured[None, :], axis=1)
    labels = DBSCAN(eps=eps, min_samples=1).fit(errors.reshape(-1, 1)).labels_
    classes = sorted(set(labels.tolist()), key=lambda c: -float(errors[labels == c].mean()))
    rank = {c: k for k, c in enumerate(classes)}
    weights = np.array([2.0 ** rank[c] for c in labels.tolist()])
    return weights, scales, errors


def _top(models: list[_Model], weights: Floats, n: int) -> list[_Model]:
    order = np.argsort(-weights, kind="stable")[:n]
    return [models[i] for i in order]


def _band(mbps: float, half_width: float) -> tuple[float, float]:
    return mbps * (1 - half_width), mbps * (1 + half_width)


def measured_best_cells(groups: Sequence[Group], limits: Limits) -> list[Params]:
    """Each group's best measured cell within the limits, in the selection's order (the most
    similar groups first), without repeats: what history says worked best for transfers like
    this one, with no model between."""
    cells: list[Params] = []
    for group in groups:
        if len(group.mbps):
            cc, p, pp = (round(2 ** v) for v in group.cells[int(np.argmax(group.mbps))])
            best = limits.nearest(Params(cc, p, pp))
            if best not in cells:
                cells.append(best)
    return cells


def first_probe(dataset: DatasetDescription, limits: Limits) -> Params:
    """The heuristic parameters of the dataset's size class (the paper's reference [4], as
    `stork.dataset.chunks` computes them), within the limits."""
    bdp = dataset.bdp_bytes or dataset.avg_file_bytes
    return limits.nearest(default_params(dataset.size_class, dataset.avg_file_bytes, bdp))


def probe_bytes(dataset: DatasetDescription, probe_seconds: float, probe_share: float) -> int:
    """About how much one probe of real files sends: `probe_seconds` at the link's rate, at
    least two files per stream of the size class's preset, at most `probe_share` of the
    dataset (at least one file)."""
    preset = default_params(dataset.size_class, dataset.avg_file_bytes,
                            dataset.bdp_bytes or dataset.avg_file_bytes)
    least = 2 * preset.cc * dataset.avg_file_bytes
    want = probe_seconds * dataset.bandwidth_bps / 8 if dataset.bandwidth_bps else least
    return int(min(max(want, least), max(dataset.total_bytes * probe_share,
                                         dataset.avg_file_bytes)))


def share_concurrency(chunks: Sequence[tuple[float, int, float]]) -> list[int]:
    """Algorithm 1, lines 9-22: chunks (bytes, cc asked, unit throughput UT at cc = 1) that run
    together -> the concurrency each gets. The largest cc asked (maxCC) is shared out by
    weight = bytes * TT / UT (TT = the sum of the UTs: a chunk with more bytes, or slower per
    channel, gets more channels), each at least 1. The paper's line 22 takes the maximum of
    that share and the chunk's own estimate, which undoes the sharing (every chunk would
    keep what it asked for); see docs/OPTIMIZERS.md."""
    if not chunks:
        return []
    total_ut = sum(max(ut, 1e-9) for _, _, ut in chunks)
    max_cc = max(cc for _, cc, _ in chunks)
    weights = [size * total_ut / max(ut, 1e-9) for size, _, ut in chunks]
    total = sum(weights) or 1.0
    return [max(1, math.floor(max_cc * w / total)) for w in weights]
