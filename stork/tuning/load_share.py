"""PURE: a load that shares the path with a flow by streams (TCP's fair share).

A flow of N streams beside a load that weighs k streams keeps N / (N + k) of the path.
From a fall of the flow's rate at an unchanged setting the online controllers
(`stork.tuning.online`) weigh the load that came (`load_streams`), choose how many times
the streams their first try under it takes (`win_back`) and where that lands (`jumped`).
"""

from __future__ import annotations

import math

from stork.transfer.worker import Setting
from stork.tuning.base import Limits
from stork.tuning.verdicts import neighbour

WIN_BACK = 0.9  # the share of a flow's rate before a load came that its first try under
# the load aims to win back (issue 28's load target), with at most
JUMP_MAX = 8  # this many times the streams at once (three doublings: a wrong jump costs
# streams; two were too few in docs/BENCHMARKS.md 15.32's run L4: see `win_back`)


def load_streams(n: int, before_mbps: float, now_mbps: float) -> float:
    """The weight, in streams, of a load that took a flow of `n` streams from
    `before_mbps` to `now_mbps` at an unchanged setting, when it shares the path by streams
    (TCP's fair share): a flow of n streams keeps n / (n + k) of the path, so
    k = n (1 - f) / f for a fall to the share f (`win_back`'s model); 0 when it did not
    fall."""
    if before_mbps <= 0 or now_mbps >= before_mbps:
        return 0.0
    share = max(now_mbps / before_mbps, 1e-3)
    return n * (1 - share) / share


def win_back(before_mbps: float, now_mbps: float) -> int:
    """How many times the streams a flow whose rate fell from `before_mbps` to `now_mbps`
    at an unchanged setting tries first (`stork.tuning.online`): the fewest doublings that win
    back WIN_BACK of the rate before, from one to those of JUMP_MAX.

    A load that shares the path by streams (TCP's fair share) leaves a flow of N streams
    N / (N + k) of it, so a fall to a share f of the rate says the load weighs
    k = N (1 - f) / f streams, and N' / (N' + k) = WIN_BACK asks for
    N' = N (1 - f) / f x WIN_BACK / (1 - WIN_BACK). On wan40 a fall to 0.66 (166.1 to
    109.9 Mbit/s at cc 8 p 3) asks for 4.6 times the streams; one doubling at a time, the
    flow reached cc 32 39 s after the fall was seen (docs/BENCHMARKS.md 15.30, run Q4).
    The model is TCP's, not fitted to those runs; the cap bounds what a wrong reading of
    the fall (a dip that passed) costs. The fewest that reach WIN_BACK, not the nearest
    power of two on a log scale: on wan40 a fall to 0.76 asked for 2.8 times the streams,
    the nearest was one doubling, and under that load cc 32 made 0.89 of cc 64
    (docs/BENCHMARKS.md 15.31, run L3). Three doublings at most, not two: a fall to 0.64
    at cc 8 p 3 asked for 5.1 times, two doublings went to cc 32, and cc 64, 15% faster
    under that load, was kept 51 s later (15.32, run L4)."""
    if before_mbps <= 0 or now_mbps >= before_mbps:
        return 1
    need = load_streams(1, before_mbps, now_mbps) * WIN_BACK / (1 - WIN_BACK)
    return int(min(max(2 ** math.ceil(math.log2(max(need, 1.0)) - 1e-9), 2), JUMP_MAX))


def jumped(setting: Setting, factor: int, limits: Limits) -> Setting | None:
    """`setting` with `cc` doubled as many times as `factor` holds two (inside `limits`:
    as far as it can go), or None when it cannot go up at all."""
    out = None
    for _ in range(max(int(math.log2(factor)), 1)):
        up = neighbour(out or setting, "cc", True, limits)
        if up is None:
            return out
        out = up
    return out
