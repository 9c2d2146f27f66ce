"""ASM: adaptive sampling over surfaces learned offline (the paper's Algorithm 1). Pure.

The offline analysis (`stork.tuning.asm_analysis`) has clustered the transfer log and built, per
cluster, throughput surfaces for each level of load, lightest first. Online:

1. the dataset's closest cluster (`Model.lookup`: centroids only, independent of the history's
   size);
2. the first probe, with real files of the dataset, at the sampling point of the surface of
   median load intensity (or, when the daemon knows of transfers it runs itself on the same
   link, `DatasetDescription.known_load`, of the surface whose intensity is nearest their fair
   share k / (k + 1));
3. a measurement inside that surface's confidence band at the point: converged. Above it:
   the load is lighter, so only the lighter surfaces remain; below it: only the heavier;
   the next surface is the remaining one whose value at the probed point is closest to the
   measurement, and it is probed at its own sampling point. Each probe halves the
   candidates, at most `max_probes` probes;
4. the samples Algorithm 1 left (`explore`; the paper converges in about three, and its
   answer, the chosen surface's maximum, is a prediction): the chosen surface's maximum,
   then the maxima of the other load surfaces, nearest in load first, then the chosen
   surface's next best grid points, each not sampled yet, until `max_probes` samples;
5. the rest of the dataset at the best sample (the one with the fewest streams when others
   measured within `tolerance` of it). When Algorithm 1 spent every sample and the chosen
   surface's maximum was never sampled, the maximum, unless a sample measured more than it
   predicts (a measurement of this transfer beats a prediction). A probe that found no file
   left to send ends the sampling; cc is at most the dataset's file count
   (`cc_at_most_files`).

During the transfer (`retune`): a chunk whose throughput leaves the band makes the next
`optimize` switch surface without probing: the surface whose value at the running
parameters is closest to the achieved throughput, and its maximum. Every switch that
changes the parameters costs new processes and a new slow start; `switches` counts them.

Without a model the optimizer analyses the history it is given (the replay benchmark does;
the daemon passes the model its scheduled analysis persisted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stork.dataset.chunks import Params
from stork.errors import AsmError
from stork.translog import TransferRecord
from stork.tuning.asm_analysis import Aggregate, Cluster, Model, build_model, maximum
from stork.tuning.asm_surface import Surface
from stork.tuning.base import (
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
    best_probe,
)
from stork.tuning.harp import probe_bytes


@dataclass(frozen=True)
class AsmSettings:
    max_probes: int = 3  # the paper converges in about three
    probe_seconds: float = 2.0  # probe size: this long at the link's rate, as HARP's
    probe_share: float = 0.25  # and at most this share of the dataset
    # where a surface is probed: "region" (its sampling point: near its maximum, where the
    # surfaces differ most) or "maximum" (its maximum, the paper's equation 24 read literally)
    sample_at: str = "region"
    # the samples Algorithm 1 leaves go to the surfaces' maxima and the chosen surface's best
    # grid points (False: unused, as before)
    explore: bool = True
    tolerance: float = 0.0  # samples measured within this of the best: the fewest streams
    cc_at_most_files: bool = True


class AsmOptimizer(Optimizer):
    name = "asm"

    def __init__(self, settings: AsmSettings | None = None, model: Model | None = None) -> None:
        self.settings = settings or AsmSettings()
        self.model = model
        self.switches = 0  # surface switches during the transfer that changed the parameters
        self._cluster: Cluster | None = None
        self._drift: tuple[Decision, float] | None = None

    def optimize(self, history: Sequence[TransferRecord], dataset: DatasetDescription,
                 limits: Limits, probe: Probe) -> Decision:
        if self._drift is not None and self._cluster is not None:
            decision, achieved = self._drift
            self._drift = None
            return self._switch(self._cluster, decision, achieved, limits)
        model = self.model
        if model is None:
            agg = Aggregate()
            agg.add(history)
            model = self.model = build_model(agg)
        if self.settings.cc_at_most_files:
            limits = limits.at_most_cc(dataset.file_count)
        if not model.clusters:
            raise AsmError("asm", "the offline analysis has no transfers to learn from (run "
                           "stork_history analyze, or wait for ASM_ANALYSIS_INTERVAL)")
        cluster = self._cluster = model.lookup(dataset)
        return self._sample(cluster, dataset, limits, probe)

    def retune(self, decision: Decision, achieved_mbps: float) -> bool:
        if not decision.outside_band(achieved_mbps):
            return False
        self._drift = (decision, achieved_mbps)
        return True

    # -- Algorithm 1 ----------------------------------------------------------------------

    def _sample(self, cluster: Cluster, dataset: DatasetDescription, limits: Limits,
                probe: Probe) -> Decision:
        surfaces = cluster.surfaces
        candidates = list(range(len(surfaces)))
        current = self._first(cluster, dataset)
        size = self.probe_bytes(dataset)
        probes: list[ProbeResult] = []
        path: list[str] = []
        how = "closest surface to the last probe"
        while True:
            s = surfaces[current]
            point = (cluster.samples[current] if self.settings.sample_at == "region"
                     else maximum(s, limits)[0])
            if not limits.admits(point):
                point = maximum(s, limits)[0]
            result = probe(point, size)
            if result.empty:
                how = "no file left to probe"
                break
            probes.append(result)
            low, high = s.band(point)
            measured = result.throughput_mbps
            path.append(f"load {s.intensity:.2f} at {_cell(point)}: {measured:.0f} in "
                        f"[{low:.0f}, {high:.0f}]")
            if low <= measured <= high:
                how = "converged"
                break
            lighter = measured > high
            candidates = [c for c in candidates if (c < current if lighter else c > current)]
            if not candidates or len(probes) >= self.settings.max_probes:
                current = _closest(surfaces, range(len(surfaces)), point, measured)
                break
            current = _closest(surfaces, candidates, point, measured)
        chosen = surfaces[current]
        params, predicted = maximum(chosen, limits)
        if self.settings.explore and how != "no file left to probe":
            how += self._explore(surfaces, current, limits, probe, size, probes)
        if self.settings.explore and params in {r.params for r in probes}:
            kept = best_probe(probes, self.settings.tolerance)
            params, predicted = kept.params, kept.throughput_mbps
            how += f"; best sample {_cell(params)}"
        elif probes:
            best = max(probes, key=lambda r: r.throughput_mbps)
            if best.throughput_mbps > predicted and limits.admits(best.params):
                params, predicted = best.params, best.throughput_mbps
                how += f"; probe {_cell(best.params)} measured more than the surface's maximum"
        return self._decision(cluster, chosen, params, predicted, tuple(probes),
                              f"cluster {cluster.id} ({len(surfaces)} load surfaces), "
                              f"{how}: {'; '.join(path)}")

    def _explore(self, surfaces: Sequence[Surface], current: int, limits: Limits,
                 probe: Probe, size: int, probes: list[ProbeResult]) -> str:
        """Step 4: the samples left, on the surfaces' maxima and the chosen surface's best
        grid points; what it did, for the reason."""
        load = surfaces[current].intensity
        nearest = sorted(range(len(surfaces)),
                         key=lambda i: (abs(surfaces[i].intensity - load), i))
        wanted = [maximum(surfaces[i], limits)[0] for i in nearest]
        wanted += surfaces[current].ranked(limits.max_streams)
        sampled = {r.params for r in probes}
        added: list[str] = []
        for point in wanted:
            if len(probes) >= self.settings.max_probes:
                break
            if point in sampled or not limits.admits(point):
                continue
            result = probe(point, size)
            if result.empty:
                added.append("no file left to probe")
                break
            probes.append(result)
            sampled.add(point)
            added.append(f"{_cell(point)}: {result.throughput_mbps:.0f}")
        return f"; then {', '.join(added)}" if added else ""

    def _first(self, cluster: Cluster, dataset: DatasetDescription) -> int:
        surfaces = cluster.surfaces
        if dataset.known_load > 0:
            share = dataset.known_load / (dataset.known_load + 1)
            return min(range(len(surfaces)), key=lambda i: abs(surfaces[i].intensity - share))
        return (len(surfaces) - 1) // 2  # the median (the lighter of two middles)

    def _switch(self, cluster: Cluster, decision: Decision, achieved: float,
                limits: Limits) -> Decision:
        surfaces = cluster.surfaces
        current = _closest(surfaces, range(len(surfaces)), decision.params, achieved)
        params, predicted = maximum(surfaces[current], limits)
        if params != decision.params:
            self.switches += 1
        return self._decision(
            cluster, surfaces[current], params, predicted, (),
            f"cluster {cluster.id}: achieved {achieved:.0f} Mbit/s outside "
            f"[{decision.band_mbps[0]:.0f}, {decision.band_mbps[1]:.0f}]" if decision.band_mbps
            else f"cluster {cluster.id}: achieved {achieved:.0f} Mbit/s", )

    def _decision(self, cluster: Cluster, s: Surface, params: Params, predicted: float,
                  probes: tuple[ProbeResult, ...], reason: str) -> Decision:
        band = s.band(params)
        scale = predicted / max(s.at(params), 1e-9)
        return Decision(self.name, params, predicted,
                        (band[0] * scale, band[1] * scale), probes,
                        f"{reason}; surface of load {s.intensity:.2f} "
                        f"(switches {self.switches})",
                        unit_mbps=s.at(Params(1, params.p, params.pp)) * scale)

    def probe_bytes(self, dataset: DatasetDescription) -> int:
        """About how much one probe sends (`stork.tuning.harp.probe_bytes`)."""
        return probe_bytes(dataset, self.settings.probe_seconds, self.settings.probe_share)


def _closest(surfaces: Sequence[Surface], among: Sequence[int] | range, point: Params,
             measured: float) -> int:
    return min(among, key=lambda i: (abs(surfaces[i].at(point) - measured), i))


def _cell(p: Params) -> str:
    return f"({p.cc},{p.p},{p.pp})"
