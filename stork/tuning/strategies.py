"""PURE: the EOS's ways of sampling a single file's stream count, one table by name
(`EOS_SAMPLING`), as `registry` is for the dataset optimizers.

Each strategy takes the sampler's `measure` (one sample at a stream count), the knobs'
limits, the path's history and, under a sampling budget, the count to start from; it returns
the samples it took, and d-w its own choice (`Probing`), which then decides instead of
`sampling.decide`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stork.tuning.probing import Probing, powers_of_two, window_search
from stork.tuning.sampling import History, Measure, Sample, doubling, guided


@dataclass(frozen=True)
class SamplingLimits:
    """What the knobs allow a strategy: EOS_MAX_STREAMS, EOS_TOLERANCE, EOS_MAX_SAMPLES,
    EOS_SLOPE_THRESHOLD, DW_DEPTH and DW_WIDTH."""

    max_streams: int
    tolerance: float
    max_samples: int
    slope_threshold: float
    dw_depth: int
    dw_width: int


@dataclass(frozen=True)
class Sampled:
    samples: list[Sample]
    probed: Probing | None = None  # d-w's own choice over its measurements


Strategy = Callable[[Measure, SamplingLimits, History | None, int | None], Sampled]


def _guided(measure: Measure, limits: SamplingLimits, history: History | None,
            first: int | None) -> Sampled:
    """Where the answer is likely: from the path's history, else 1, 4, 16 and the fit; from
    `first` outwards under a budget (`sampling.guided`)."""
    return Sampled(guided(measure, limits.max_streams, limits.tolerance, limits.max_samples,
                          history=history, first=first))


def _doubling(measure: Measure, limits: SamplingLimits, history: History | None,
              first: int | None) -> Sampled:
    """The paper's Algorithm 2: doubling until the slope flattens (`sampling.doubling`)."""
    return Sampled(doubling(measure, limits.max_streams, limits.slope_threshold))


def _dw(measure: Measure, limits: SamplingLimits, history: History | None,
        first: int | None) -> Sampled:
    """d-w probing (`probing.window_search`, DW_DEPTH and DW_WIDTH) over the powers of two
    up to EOS_MAX_STREAMS; every measurement is a sample."""
    samples: list[Sample] = []

    def once(n: int) -> float:
        samples.append(measure(n))
        return samples[-1].mbps

    levels = powers_of_two(range(1, limits.max_streams + 1), limits.max_streams)
    return Sampled(samples, window_search(once, levels, limits.dw_depth, limits.dw_width))


STRATEGIES: dict[str, Strategy] = {"guided": _guided, "doubling": _doubling, "dw": _dw}
