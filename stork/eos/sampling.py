"""Where to sample and what to choose: Algorithm 2 of the EOS paper and guided sampling.

The strategies take a `measure(streams) -> Sample` callable, so they are tested and
benchmarked without any network (a replay of measured curves), and run unchanged against
GridFTP or iperf3. Everything here is a pure function of the samples (and of the history
passed in): no clock, no I/O.

* `doubling` (the paper's Algorithm 2): 1, 2, 4, ... streams; stop when the gain per added
  stream falls below `slope_threshold` times the one-stream throughput, when throughput drops,
  or at `n_max`.
* `guided` (this project's default). Without history: 1 and 4 streams, then 16 even when 4
  gained nothing over 1 (two samples cannot tell a flat path from noise: sampling stops on a
  flat reading only when a third, far count agrees); then the fitted optimum, sampled when
  the fit promises a gain larger than its own error at the samples, else further out when the
  curve still rises (by more than the tolerance) at the largest count measured; a sample
  left over checks half the chosen count. With history (earlier runs on the same path, whose
  curves share a shape): the count that path rewarded most (`path_prior`) and its
  neighbours, onwards while the best is at an edge, and a count the path's recent runs
  measured least (so the history does not only ever see the counts around its best).
  Under a sampling budget, which may stop the run after any sample, and without history:
  a count likely fast first (EOS_DEFAULT_STREAMS), then twice as many, then onwards in the
  direction that gains (`_fast_first`), so the samples a tight budget allows are short ones
  at counts that move the data fast.

Decisions that survive noise (`decide`):
* the answer is always a count that was measured in this run: a fitted model only says where
  to sample next, and its optimum is used once a sample has checked it;
* how much a count is worth is its measurement, pulled towards what the path's history
  predicts for it (`path_prior`: the runs' level effects and the noise measured between them),
  so one lucky or unlucky sample does not decide alone;
* then the fewest streams within `tolerance` of the best.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from stork.eos.models import Estimate, estimate
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
# earlier runs on the same path, oldest first: each run's samples, and the transfer that
# followed as one more Sample at the stream count it used (its achieved rate)
History = Sequence[Sequence[Sample]]

# The most recent runs of a path's history that count (paths change).
HISTORY_RUNS = 50
# Runs with two or more stream counts needed before history guides anything.
MIN_PRIOR_RUNS = 5
# Runs that must have measured a count before history may start from it.
MIN_SUPPORT = 2
# The noise of one sample (log units, about relative) assumed until history measures it.
DEFAULT_NOISE = 0.1
# History places the samples only when the runs of the path share a shape: their curves
# depart from the path's by less than this (log units) beyond the noise. Otherwise (a path
# that carries small and large files, whose best counts differ) each run starts from scratch.
PLACE_SPREAD = 0.15


@dataclass(frozen=True)
class Decision:
    streams: int
    throughput_mbps: float  # measured at `streams` in this run
    model: str  # the fit that guided the samples: second_order, dynamic_order or best_sample
    reason: str
    params: dict[str, float]


@dataclass(frozen=True)
class PathPrior:
    """What earlier runs on a path say. `effects`: log throughput of each stream count
    relative to the path's best (0 at the best; each run's own level removed), `support`: how
    many runs measured each count. In log units (about relative): `noise`, the spread of one
    sample around its own run's smooth curve; `spread`, how far a run's curve departs from
    the path's shape beyond that noise; `total`, the two together."""

    effects: dict[int, float]
    support: dict[int, int]
    noise: float
    spread: float
    total: float
    runs: int

    def best(self, allowed: Sequence[int], tolerance: float) -> int | None:
        """The fewest streams, among counts enough runs measured, within `tolerance` of the
        best such count."""
        candidates = set(allowed)
        known = {n: e for n, e in self.effects.items()
                 if n in candidates and self.support.get(n, 0) >= MIN_SUPPORT}
        if not known:
            return None
        top = max(known.values())
        return min(n for n, e in known.items() if e >= top + math.log1p(-tolerance))

    def weight(self, n: int) -> float:
        """How much a measurement at n counts against the path's prediction for it."""
        shape = self.spread ** 2 + self.total ** 2 / max(self.support.get(n, 0), 1)
        return shape / (shape + self.noise ** 2) if shape + self.noise ** 2 > 0 else 1.0


def allowed_levels(n_max: int, levels: Sequence[int] | None) -> list[int]:
    if levels is None:
        return list(range(1, n_max + 1))
    return sorted({n for n in levels if 1 <= n <= n_max})


def _snap(n: float, levels: list[int]) -> int:
    """The allowed level nearest to n (ties to the smaller)."""
    return min(levels, key=lambda level: (abs(level - n), level))


def _neighbour(n: int, levels: list[int], up: bool) -> int | None:
    """The allowed count about twice (or half) n, if there is one other than n."""
    target = _snap(n * 2 if up else n / 2, levels)
    if target == n:
        above = [x for x in levels if (x > n if up else x < n)]
        if not above:
            return None
        target = above[0] if up else above[-1]
    return target


def _by_count(samples: Sequence[Sample]) -> dict[int, float]:
    """Log throughput per stream count (the mean of the logs where a count was measured
    more than once); non-positive rates are left out."""
    logs: dict[int, list[float]] = {}
    for s in samples:
        if s.mbps > 0 and math.isfinite(s.mbps):
            logs.setdefault(s.streams, []).append(math.log(s.mbps))
    return {n: sum(v) / len(v) for n, v in logs.items()}


def _roughness(runs: list[dict[int, float]]) -> tuple[float, int]:
    """Squared residuals and their degrees of freedom of each run's samples around a
    quadratic in log(streams): the noise of one sample, a run's own curve shape removed."""
    rss, dof = 0.0, 0
    for run in runs:
        if len(run) < 4:
            continue
        x = np.log(np.array(list(run), dtype=float))
        y = np.array(list(run.values()))
        design = np.column_stack([x * x, x, np.ones_like(x)])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        rss += float(((design @ coef - y) ** 2).sum())
        dof += len(run) - 3
    return rss, dof


def path_prior(history: History | None) -> PathPrior | None:
    """Fit log Th(run, n) = level(run) + effect(n) to the last HISTORY_RUNS runs (alternating
    least squares), and split the residual into sample noise (`_roughness`) and the runs'
    own shapes. None when fewer than MIN_PRIOR_RUNS runs measured two counts or more."""
    if not history:
        return None
    runs = [r for r in (_by_count(run) for run in history[-HISTORY_RUNS:]) if len(r) >= 2]
    if len(runs) < MIN_PRIOR_RUNS:
        return None
    counts = sorted({n for r in runs for n in r})
    index = {n: i for i, n in enumerate(counts)}
    run_of = np.array([i for i, r in enumerate(runs) for _ in r])
    count_of = np.array([index[n] for r in runs for n in r])
    y = np.array([v for r in runs for v in r.values()])
    per_run = np.bincount(run_of, minlength=len(runs)).astype(float)
    per_count = np.bincount(count_of, minlength=len(counts)).astype(float)
    effect = np.zeros(len(counts))
    level = np.zeros(len(runs))
    for _ in range(30):
        level = np.bincount(run_of, y - effect[count_of], len(runs)) / per_run
        effect = np.bincount(count_of, y - level[run_of], len(counts)) / per_count
    resid = y - level[run_of] - effect[count_of]
    dof = len(y) - len(runs) - len(counts) + 1
    total = float(np.sqrt((resid ** 2).sum() / dof)) if dof > 0 else DEFAULT_NOISE
    rss, rough_dof = _roughness(runs)
    noise = math.sqrt(rss / rough_dof) if rough_dof >= MIN_PRIOR_RUNS else min(total,
                                                                                DEFAULT_NOISE)
    # a spread below the noise cannot be told from none: never trust the path's shape more
    # than one sample (so a run's own measurements always weigh at least half)
    spread = max(math.sqrt(max(total ** 2 - noise ** 2, 0.0)), noise)
    effect -= effect.max()
    return PathPrior({n: float(effect[index[n]]) for n in counts},
                     {n: int(per_count[index[n]]) for n in counts}, noise, spread, total,
                     len(runs))


def _scores(samples: Sequence[Sample], prior: PathPrior | None) -> dict[int, float]:
    """Log throughput each measured count is worth: its measurement, pulled towards the
    history's prediction for it (the run's own level times the path's shape) when there is
    one."""
    measured = _by_count(samples)
    if prior is None:
        return measured
    known = {n: v for n, v in measured.items() if n in prior.effects}
    if not known:
        return measured
    run_level = sum(v - prior.effects[n] for n, v in known.items()) / len(known)
    scores = {}
    for n, v in measured.items():
        w = prior.weight(n) if n in known else 1.0
        scores[n] = w * v + (1 - w) * (run_level + prior.effects.get(n, 0.0))
    return scores


def _fewest(scores: dict[int, float], tolerance: float) -> int:
    top = max(scores.values())
    return min(n for n, v in scores.items() if v >= top + math.log1p(-max(tolerance, 1e-9)))


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


class _Run:
    """The samples of one run, at most one per stream count."""

    def __init__(self, measure: Measure, allowed: list[int], max_samples: int) -> None:
        self.measure, self.allowed, self.max_samples = measure, allowed, max_samples
        self.samples: list[Sample] = []

    @property
    def full(self) -> bool:
        return len(self.samples) >= self.max_samples

    def taken(self, n: int) -> bool:
        return any(s.streams == n for s in self.samples)

    def take(self, n: float | None) -> bool:
        """Sample n (snapped to the allowed counts); False if taken already or out of budget."""
        if n is None or self.full:
            return False
        n = _snap(n, self.allowed)
        if self.taken(n):
            return False
        self.samples.append(self.measure(n))
        return True


def guided(measure: Measure, n_max: int, tolerance: float, max_samples: int = 4,
           levels: Sequence[int] | None = None, history: History | None = None,
           first: int | None = None) -> list[Sample]:
    """Sample where the answer is likely, at most `max_samples` times (see the module
    docstring): from the path's history when it has one, else 1, 4, 16 and the fit; or,
    given `first` (a run under a sampling budget, which may stop it after any sample), from
    that count outwards (`_fast_first`)."""
    allowed = allowed_levels(n_max, levels)
    run = _Run(measure, allowed, max(max_samples, 3))
    prior = path_prior(history)
    start = prior.best(allowed, tolerance) if prior is not None else None
    if prior is not None and start is not None and prior.spread <= PLACE_SPREAD:
        _from_prior(run, prior, start, tolerance)
    elif first is not None:
        _fast_first(run, first, tolerance)
    else:
        _from_scratch(run, n_max, tolerance)
    return run.samples


def _fast_first(run: _Run, first: int, tolerance: float) -> None:
    """The order for a run that a budget may stop after any sample, where a sample's time is
    its cost: `first`, a count likely fast (the daemon's EOS_DEFAULT_STREAMS: on long or
    lossy paths most of the gain of parallel streams has come by 32, on short ones that many
    streams lose little), then twice as many; then further up while the most streams
    measured are needed (they beat the rest by more than the tolerance), else down by fours
    while the fewest measured do as well, to find the fewest streams that are enough. The
    samples a tight budget allows are then the short ones, and the answer is the best of
    counts that move the data fast; the 1-4-16 order would spend the whole budget on its
    slowest sample first."""
    start = _snap(first, run.allowed)
    run.take(start)
    run.take(_neighbour(start, run.allowed, up=True))
    while not run.full:
        measured = _by_count(run.samples)
        if not measured:
            break
        best = _fewest(measured, tolerance)
        if best == max(measured):
            step = _neighbour(best, run.allowed, up=True)
        elif best == min(measured) and best > 1:
            step = _snap(best / 4, run.allowed)
        else:
            break  # the best count lies between two measured ones
        if not run.take(step):
            break


def _from_prior(run: _Run, prior: PathPrior, start: int, tolerance: float) -> None:
    """The count the path rewarded most and its neighbours, then onwards while the best
    count (by `_scores`) is at the edge of what was measured."""
    run.take(start)
    run.take(_neighbour(start, run.allowed, up=False))
    run.take(_neighbour(start, run.allowed, up=True))
    while not run.full:
        scores = _scores(run.samples, prior)
        best = _fewest(scores, tolerance)
        if best == max(scores) and run.take(_neighbour(best, run.allowed, up=True)):
            continue  # the most streams measured did best: one step further up
        if best == min(scores) and run.take(_neighbour(best, run.allowed, up=False)):
            continue  # the fewest did as well: one step further down
        # keep the history honest: measure the count of the doubling ladder that the path's
        # recent runs measured least (else they only ever see the counts around its best)
        ladder = sorted({_snap(2 ** k, run.allowed)
                         for k in range(int(math.log2(run.allowed[-1])) + 1)})
        fresh = [n for n in ladder if not run.taken(n)]
        if fresh:
            run.take(min(fresh, key=lambda n: (prior.support.get(n, 0),
                                               -abs(math.log(n / start)))))
        break


def _from_scratch(run: _Run, n_max: int, tolerance: float) -> None:
    """1, 4 and 16 streams (16 also on a flat reading: two samples cannot tell flat from
    noise), then the fitted optimum when the fit promises more than its own error."""
    run.take(1)
    run.take(4)
    run.take(16)
    measured = _by_count(run.samples)
    if not measured:
        return  # nothing moved at any count: nothing to fit
    if max(measured.values()) - min(measured.values()) < math.log1p(tolerance):
        return  # three counts as far apart as 1 and 16 agree: the path is flat
    while not run.full:
        fitted = _fit(run.samples, n_max, run.allowed)
        if fitted is None:
            break
        measured = _by_count(run.samples)
        best = max(measured, key=lambda n: measured[n])
        # the fitted optimum is worth a sample when it promises more than the fit's own
        # error at the samples (and than the tolerance) over the best measured count
        promise = math.log(max(fitted.throughput_mbps, 1e-12)) - measured[best]
        if (fitted.model != "best_sample" and fitted.streams != best
                and promise > max(fitted.fit_error, math.log1p(tolerance))
                and run.take(fitted.streams)):
            continue
        # else, if the curve still rises at the largest count measured (by more than the
        # tolerance: less is no rise), look further out: twice as far, or four times when
        # no model may extrapolate that far (as in the paper's doubling, a rise that steep
        # is far from its knee)
        below = max((v for n, v in measured.items() if n < best), default=-math.inf)
        rising = best == max(measured) and measured[best] - below >= math.log1p(tolerance)
        further = (min(best * 4, run.allowed[-1]) if fitted.model == "best_sample"
                   else _neighbour(best, run.allowed, up=True))
        if not (rising and run.take(further)):
            break
    if not run.full:
        # with a sample to spare, check whether half the chosen streams would do as well
        chosen = _fewest(_by_count(run.samples), tolerance)
        if chosen > 1:
            run.take(chosen // 2)


def decide(samples: Sequence[Sample], n_max: int, tolerance: float,
           levels: Sequence[int] | None = None, history: History | None = None) -> Decision:
    """The fewest measured streams within `tolerance` of the best measured count, where a
    count's worth is its measurement pulled towards the history's prediction (`_scores`)."""
    if not samples:
        raise FitError("no samples to decide from")
    allowed = allowed_levels(n_max, levels)
    usable = [s for s in samples if s.streams in set(allowed)] or list(samples)
    prior = path_prior(history)
    scores = _scores(usable, prior)
    if not scores:
        raise FitError("no sample with a positive throughput")
    chosen = _fewest(scores, tolerance)
    fitted = _fit(usable, n_max, allowed)
    model, params = ("best_sample", {}) if fitted is None else (fitted.model, fitted.params)
    how = (f"measured {len(scores)} counts; with the path's history of {prior.runs} runs "
           f"(noise {prior.noise:.0%})" if prior is not None else
           f"measured {len(scores)} counts")
    at_chosen = [s.mbps for s in usable if s.streams == chosen]
    return Decision(chosen, sum(at_chosen) / len(at_chosen), model,
                    f"{how}: the fewest streams within {tolerance:.0%} of the best", params)
