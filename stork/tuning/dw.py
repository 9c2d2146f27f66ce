"""d-w fast probing as optimizers of datasets: "dw" (Algorithm 1 of Sen, Rao et al.) and
"dw-interval" (the variant of their reference [11]); the searches themselves are pure
functions in `stork.tuning.probing` (docs/OPTIMIZERS.md says what of Algorithm 1 they implement).

`DwOptimizer` runs the search for the stream count p (cc = 1, pp = 1) and then, at the chosen
p, for the concurrency cc of a dataset, each over the powers of two the limits allow (cc at
most a quarter of the files over the depth, so the top level's probes leave files for the
rest). A probe sends about twice the BDP (at least 1 MiB), less when the most probes the two
searches could take would pass half the dataset; when the files run out the search decides
from what it measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stork.dataset.chunks import Params
from stork.errors import SamplingError
from stork.translog import TransferRecord
from stork.tuning.base import (
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
)
from stork.tuning.probing import (
    DEPTH,
    SEARCHES,
    WIDTH,
    Measure,
    Probing,
    check,
    interval_search,
    powers_of_two,
    window_search,
)

if TYPE_CHECKING:
    from stork.config import Settings

BAND = 0.25  # an achieved throughput this far off the chosen level's mean asks again

__all__ = ["DwIntervalOptimizer", "DwOptimizer", "Probing", "interval_search", "powers_of_two",
           "window_search"]


class DwOptimizer(Optimizer):
    """d-w probing of the stream count p (cc = 1), then of the concurrency cc at that p."""

    name = "dw"
    variant = "window"

    def __init__(self, depth: int = DEPTH, width: int = WIDTH) -> None:
        check([1], depth, width, "width")
        self.depth = depth
        self.width = width

    @classmethod
    def from_settings(cls, settings: Settings) -> DwOptimizer:
        return cls(settings.dw_depth, settings.dw_width)

    def optimize(self, history: Sequence[TransferRecord], dataset: DatasetDescription,
                 limits: Limits, probe: Probe) -> Decision:
        search = SEARCHES[self.variant]
        p_levels = powers_of_two(limits.allowed(1), limits.max_streams)
        # the concurrency's top level: its d probes take at most a quarter of the files
        cc_top = min(limits.max_cc, max(1, dataset.file_count // (4 * self.depth)))
        most = self.depth * (len(p_levels) + len(powers_of_two(limits.allowed(0), cc_top)))
        # a probe of about twice the BDP (at least 1 MiB: past TCP's start-up), but all the
        # probes the search could take at most half the dataset
        size = max(int(2 * (dataset.bdp_bytes or 0)), 1 << 20)
        size = max(1, min(size, dataset.total_bytes // (2 * most)))
        results: list[ProbeResult] = []

        def measure_with(params_of: Callable[[int], Params]) -> Measure:
            def measure(level: int) -> float | None:
                result = probe(limits.nearest(params_of(level)), size)
                if result.empty:
                    return None  # the dataset has no file left to probe with
                results.append(result)
                return result.throughput_mbps
            return measure

        streams = search(measure_with(lambda n: Params(1, n, 1)), p_levels, self.depth,
                         self.width)
        p = streams.chosen
        reason = f"{self.name} (d={self.depth}, w={self.width}) p={p}: {streams.reason}"
        chosen = streams
        cc_levels = powers_of_two(limits.allowed(0), min(cc_top, limits.max_streams // p))
        if len(cc_levels) > 1 and not streams.exhausted:
            try:
                chosen = search(measure_with(lambda n: Params(n, p, 1)), cc_levels,
                                self.depth, self.width)
                reason += f"; cc={chosen.chosen}: {chosen.reason}"
            except SamplingError as exc:  # no file left for the concurrency: cc = 1
                reason += f"; cc=1: {exc}"
        cc = chosen.chosen if chosen is not streams else 1
        params = limits.nearest(Params(cc, p, 1))
        mbps = chosen.mean_mbps
        return Decision(self.name, params, mbps, (mbps * (1 - BAND), mbps * (1 + BAND)),
                        tuple(results), reason, streams.mean_mbps)


class DwIntervalOptimizer(DwOptimizer):
    """The interval variant ([11]): DW_WIDTH is the stride between probed levels."""

    name = "dw-interval"
    variant = "interval"
