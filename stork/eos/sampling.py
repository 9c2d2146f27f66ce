"""Where to sample and what to choose: Algorithm 2 of the EOS paper and guided sampling.

The strategies take a `measure(streams) -> Sample` callable, so they are tested and
benchmarked without any network (a replay of measured curves), and run unchanged against
GridFTP or iperf3.

* `doubling` (the paper's Algorithm 2): 1, 2, 4, ... streams; stop when the gain per added
  stream falls below `slope_threshold` times the one-stream throughput, when throughput drops,
  or at `n_max`.
* `guided` (this project's default): 1 and 4 streams; if 4 gains less than `tolerance`, the
  path does not reward parallelism and sampling stops. Otherwise 16, fit, then sample where
  the fitted model puts the optimum, until the prediction settles on an already measured
  count or `max_samples` are taken; a sample left over checks half the chosen count (fewer
  streams that do as well are better for the hosts). On the LONI sweeps this reaches a higher
  share of the best throughput than Algorithm 2 with fewer samples (bench/bench_eos.py).

`decide` then picks the fewest streams whose throughput (measured where sampled, predicted
by the fitted model elsewhere) is within `tolerance` of the best.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stork.eos.models import DynamicOrder, Estimate, SecondOrder, estimate
from stork.errors import FitError


@dataclass(frozen=True)
class Sample:
    streams: int
    mbps: float  # steady-state throughput, megabits per second
    duration_s: float = 0.0
    bytes_moved: int = 0
    raw: dict[str, object] = field(default_factory=dict)  # what the tool reported
    setup_s: float = 0.0  # from the start of the sample to the first byte at the destination
    startup_s: float = 0.0  # from the first byte to the steady part (TCP start-up)
    startup_bytes: int = 0  # bytes at the destination when the steady part began
    finish_s: float = 0.0  # time at the end beyond the steady rate (streams filling gaps)

    def seconds_for(self, size_bytes: int, steady_mbps: float) -> float:
        """Time for a transfer of `size_bytes`: this sample's set-up and start-up, then the
        steady rate, then its finish (a transfer smaller than the start-up moves at the
        start-up's pace)."""
        if self.startup_bytes and size_bytes <= self.startup_bytes:
            return self.setup_s + self.startup_s * size_bytes / self.startup_bytes
        rest = size_bytes - self.startup_bytes
        return (self.setup_s + self.startup_s + rest * 8 / 1e6 / max(steady_mbps, 1e-9)
                + self.finish_s)


Measure = Callable[[int], Sample]


@dataclass(frozen=True)
class Decision:
    streams: int
    throughput_mbps: float  # measured at `streams` when sampled there, else predicted
    model: str  # second_order, dynamic_order or best_sample
    reason: str
    params: dict[str, float]


def allowed_levels(n_max: int, levels: Sequence[int] | None) -> list[int]:
    if levels is None:
        return list(range(1, n_max + 1))
    return sorted({n for n in levels if 1 <= n <= n_max})


def _snap(n: int, levels: list[int]) -> int:
    """The allowed level nearest to n (ties to the smaller)."""
    return min(levels, key=lambda level: (abs(level - n), level))


def doubling(measure: Measure, n_max: int, slope_threshold: float) -> list[Sample]:
    """Algorithm 2: double the streams until the slope flattens or throughput drops."""
    samples = [measure(1)]
    n = 1
    while n * 2 <= n_max:
        sample = measure(n * 2)
        samples.append(sample)
        previous = samples[-2]
        if sample.mbps < previous.mbps:
            break
        slope = (sample.mbps - previous.mbps) / (sample.streams - previous.streams)
        n *= 2
        if slope < slope_threshold * samples[0].mbps:
            break
    return samples


def _fit(samples: Sequence[Sample], n_max: int, levels: list[int]) -> Estimate | None:
    if len({s.streams for s in samples}) < 3:
        return None
    try:
        return estimate([s.streams for s in samples], [s.mbps for s in samples], n_max, levels)
    except FitError:
        return None


def guided(measure: Measure, n_max: int, tolerance: float, max_samples: int = 4,
           levels: Sequence[int] | None = None) -> list[Sample]:
    """1 and 4 streams, stop if flat; then 16 and the fitted optimum until it settles."""
    allowed = allowed_levels(n_max, levels)
    samples: list[Sample] = []
    taken: set[int] = set()

    def take(n: int) -> Sample | None:
        n = _snap(n, allowed)
        if n in taken:
            return None
        taken.add(n)
        sample = measure(n)
        samples.append(sample)
        return sample

    first = take(1)
    second = take(4)
    if first is None or second is None or second.mbps < first.mbps * (1 + tolerance):
        return samples
    take(16)
    while len(samples) < max_samples:
        fitted = _fit(samples, n_max, allowed)
        if fitted is None:
            break
        if fitted.model == "best_sample":
            # no model may extrapolate that far: if the curve still rises at the largest
            # count measured, look further out instead of guessing
            top = max(samples, key=lambda s: s.streams)
            if top is not max(samples, key=lambda s: s.mbps) or top.streams >= allowed[-1]:
                break
            if take(min(top.streams * 4, allowed[-1])) is None:
                break
            continue
        if fitted.streams in taken:
            break
        take(fitted.streams)
    if len(samples) < max_samples:
        # with a sample to spare, check whether half the chosen streams would do as well
        chosen = decide(samples, n_max, tolerance, allowed).streams
        if chosen > 1:
            take(max(chosen // 2, 1))
    return samples


def decide(samples: Sequence[Sample], n_max: int, tolerance: float,
           levels: Sequence[int] | None = None) -> Decision:
    """The fewest streams within `tolerance` of the best (measured or fitted) throughput."""
    if not samples:
        raise FitError("no samples to decide from")
    allowed = allowed_levels(n_max, levels)
    values: dict[int, float] = {}
    fitted = _fit(samples, n_max, allowed)
    model_name, reason, params = "best_sample", "fewer than 3 stream counts sampled", {}
    if fitted is not None:
        model_name, reason, params = fitted.model, fitted.reason, fitted.params
        if params:  # a fitted model (best_sample carries none): predict the unsampled counts
            kind = SecondOrder if fitted.model == "second_order" else DynamicOrder
            predicted = kind(**params).predict(allowed)
            values = {n: float(v) for n, v in zip(allowed, predicted, strict=True)}
    for sample in samples:  # a measurement beats a prediction
        values[sample.streams] = sample.mbps
    best = max(values.values())
    chosen = min(n for n, v in values.items() if v >= best * (1 - max(tolerance, 1e-9)))
    return Decision(chosen, values[chosen], model_name, reason, params)
