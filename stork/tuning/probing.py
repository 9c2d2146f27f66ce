"""d-w fast probing (Sen, Rao et al., section V, Algorithm 1) and the interval variant of
their reference [11], as pure searches over `measure(level)`: tested on fixed curves, replayed
on measured ones (`bench/bench_eos.py`), run by the EOS with real samples (`EOS_SAMPLING =
dw`) and by the optimizers "dw" and "dw-interval" (`stork.tuning.dw`) with probes of real
files.

The window search (`window_search`) exploits the unimodality of the rate over the number of
flows: it starts at the largest level and slides a window of `width` consecutive levels down
one level at a time; every level in a window is measured `depth` times and averaged (each
level once: a level measured for an earlier window is not measured again). The window's
mean slope is the mean of its pairwise slopes, taken in the search's direction: the rate
gained per level *removed*. Positive: fewer flows do better, go on down. When two
consecutive windows have a negative mean slope (fewer flows do worse, twice), the search
stops, and the level with the highest average in the first of the two windows (the one
nearer the top: the peak is at its top or in it) is chosen. The paper's `y_peak` is the
highest single measurement at that level (`Probing.peak_mbps`); the mean is what a transfer
at that level can expect (`Probing.mean_mbps`).

What Algorithm 1 prints, and what is implemented (docs/OPTIMIZERS.md says why):
* line 12, `i <- i - 1`, is printed inside the `if` after `break`, where it never runs (the
  loop would measure the same window forever): here the window moves down after every window
  that did not stop the search;
* `while i > w` never evaluates the lowest window {1..w}: here the windows go down to it, and
  when no two consecutive windows stop the search (a rate that falls with every added flow)
  the best average measured is chosen;
* lines 7-9 compare S_i with S_{i-1} and choose in P_{i-1}; read with i counting windows in
  the order they are measured, S_{i-1} is the previous (higher) window, the one chosen from.

The interval variant (`interval_search`, [11]): `depth` means the same, `width` is the
stride between probed levels (2: every other level is jumped over), the stopping rule is the
same (two consecutive negative slopes between probed levels) and the best average probed
is chosen.
"""


from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stork.errors import ConfigError, SamplingError

DEPTH = 3  # DW_DEPTH's default: measurements per level
WIDTH = 2  # DW_WIDTH's default: levels per window (the interval variant: the stride)

# level -> measured Mbit/s; None: nothing is left to measure with (the search stops there)
Measure = Callable[[int], float | None]


@dataclass(frozen=True)
class Probing:
    """The outcome of one search over the levels."""

    chosen: int  # the level chosen
    mean_mbps: float  # the average of its measurements
    peak_mbps: float  # the highest single measurement at it (the paper's y_peak)
    measurements: dict[int, tuple[float, ...]] = field(default_factory=dict)  # in order
    stopped: bool = False  # the stopping rule fired (else the levels or the files ran out)
    exhausted: bool = False  # the files to probe with ran out
    reason: str = ""

    @property
    def probes(self) -> int:
        return sum(len(v) for v in self.measurements.values())


class _Measured:
    """Each level measured `depth` times, once; remembers the order."""

    def __init__(self, measure: Measure, levels: Sequence[int], depth: int) -> None:
        self.measure = measure
        self.levels = levels
        self.depth = depth
        self.values: dict[int, tuple[float, ...]] = {}
        self.exhausted = False

    def mean(self, index: int) -> float | None:
        level = self.levels[index]
        if level not in self.values:
            got: list[float] = []
            for _ in range(self.depth):
                value = self.measure(level)
                if value is None:
                    self.exhausted = True
                    break
                got.append(value)
            if not got:
                return None
            self.values[level] = tuple(got)
        values = self.values[level]
        return sum(values) / len(values)

    def best(self, indexes: Sequence[int], stopped: bool, reason: str) -> Probing:
        """The highest average among `indexes` (the fewer flows on a tie)."""
        measured = [i for i in indexes if self.levels[i] in self.values]
        if not measured:
            raise SamplingError(f"d-w probing measured nothing: {reason}")
        index = max(measured, key=lambda i: (self._avg(i), -i))
        level = self.levels[index]
        return Probing(level, self._avg(index), max(self.values[level]), dict(self.values),
                       stopped, self.exhausted, reason)

    def _avg(self, index: int) -> float:
        values = self.values[self.levels[index]]
        return sum(values) / len(values)


def check(levels: Sequence[int], depth: int, width: int, what: str) -> list[int]:
    if depth < 1:
        raise ConfigError(f"d-w probing: the depth (DW_DEPTH) must be 1 or more, got {depth}")
    if width < 2:
        raise ConfigError(f"d-w probing: the {what} (DW_WIDTH) must be 2 or more, got {width}")
    ordered = sorted(set(levels))
    if not ordered:
        raise ConfigError("d-w probing: no levels to probe")
    return ordered


def window_search(measure: Measure, levels: Sequence[int], depth: int = DEPTH,
                  width: int = WIDTH) -> Probing:
    """Algorithm 1 over `levels` (any ascending whole numbers; the window slides one level at
    a time); see the module's text. A window wider than the levels is cut to them."""
    ordered = check(levels, depth, width, "width")
    seen = _Measured(measure, ordered, depth)
    width = min(width, len(ordered))
    previous: tuple[list[int], float] | None = None
    for top in range(len(ordered) - 1, width - 2, -1):
        window = list(range(top - width + 1, top + 1))
        got = {i: seen.mean(i) for i in reversed(window)}  # measured from the top down
        means = [got[i] for i in window]
        if seen.exhausted or any(m is None for m in means):
            return seen.best(range(len(ordered)), False, "no files left to probe with")
        slope = _mean_slope(window, [m for m in means if m is not None])
        if previous is not None and previous[1] < 0 and slope < 0:
            levels_txt = ", ".join(str(ordered[i]) for i in previous[0])
            return seen.best(previous[0], True,
                             f"two consecutive windows with fewer flows doing worse; chosen "
                             f"in {{{levels_txt}}}")
        previous = (window, slope)
    return seen.best(range(len(ordered)), False,
                     "the rate never fell twice with fewer flows; the best average measured")


def _mean_slope(window: Sequence[int], means: Sequence[float]) -> float:
    """The mean of the pairwise slopes in the search's direction: the rate gained per level
    removed (positive: fewer flows do better)."""
    pairs = list(itertools.combinations(range(len(window)), 2))
    return sum((means[a] - means[b]) / (window[b] - window[a]) for a, b in pairs) / len(pairs)


def interval_search(measure: Measure, levels: Sequence[int], depth: int = DEPTH,
                    interval: int = WIDTH) -> Probing:
    """The d-w method of the paper's reference [11]: from the largest level down by
    `interval` levels at a time, each probed level measured `depth` times; stops after two
    consecutive probed levels that each did worse than the one above it; the best average
    probed is chosen."""
    ordered = check(levels, depth, interval, "interval")
    seen = _Measured(measure, ordered, depth)
    probed: list[int] = []
    falls = 0
    for index in range(len(ordered) - 1, -1, -interval):
        mean = seen.mean(index)
        if mean is None or seen.exhausted:
            if mean is not None:
                probed.append(index)
            return seen.best(probed, False, "no files left to probe with")
        if probed:
            above = seen.mean(probed[-1])
            falls = falls + 1 if above is not None and mean < above else 0
        probed.append(index)
        if falls >= 2:
            return seen.best(probed, True, "two consecutive probed levels with fewer flows "
                                           "doing worse")
    return seen.best(probed, False,
                     "the rate never fell twice with fewer flows; the best average probed")


SEARCHES: dict[str, Callable[[Measure, Sequence[int], int, int], Probing]] = {
    "window": window_search,
    "interval": interval_search,
}


def powers_of_two(allowed: Sequence[int], top: int) -> list[int]:
    """The powers of two among `allowed` up to `top` (the smallest allowed when none)."""
    chosen = [v for v in allowed if v <= top and v & (v - 1) == 0]
    return chosen or [min(allowed)]
