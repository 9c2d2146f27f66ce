"""An online controller (`stork.tuning.online.Climb`) replayed as one flow over measured
rates, for the replay benches (`bench_grid.py`, `bench_eos.py`). Not a test.

The flow moves `total_mbit` window by window (`WINDOW_S`) at the setting in effect: the
bytes move at `moves(setting)` (the rate the choice is judged on: cross-repeat, the mean of
the repeats the controller never saw), and the controller sees `seen(setting)` (the repeat
it probes) times 1 + N(0, `noise`), as the daemon's windows spread about their setting's
rate. After a change the flow moves `RAMP_S` seconds the controller does not see (the
daemon counts a setting's windows once every call runs at it, past slow start), then its
windows count again. The flow ends when the bytes have moved: its time includes every try
and ramp, so the replay judges what a user of the controller gets, tuning included.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from stork.server.flow_tuning import RAMP_S
from stork.transfer.worker import Setting
from stork.tuning.online import Climb
from stork.tuning.verdicts import WINDOW_S

WINDOW_NOISE = 0.05  # a window's relative spread about its setting's rate (the testbed's
# windows at one setting spread 2.7-9.5% of their mean, docs/BENCHMARKS.md 15.18-15.20)


@dataclass(frozen=True)
class Flowed:
    """What one replayed flow did."""

    elapsed_s: float  # the flow's time, tries and ramps included
    path: tuple[Setting, ...]  # the settings it ran at, in order (the prior first)
    starts: tuple[Setting, ...]  # the setting at each start of its windows (the prior,
    # then each change the controller answered, to a new setting or the same)
    final: Setting  # the setting in effect when the bytes ran out
    windows: dict[Setting, list[float]] = field(default_factory=dict)  # the rates it saw
    step_s: float = 0.0  # time spent in the controller's steps

    @property
    def changes(self) -> int:
        """Moves to another setting (0: the controller never acted on this flow)."""
        return len(self.path) - 1


def flow(climb: Climb | None, total_mbit: float, *, moves: Callable[[Setting], float],
         seen: Callable[[Setting], float], rng: random.Random,
         noise: float = WINDOW_NOISE, start: Setting | None = None) -> Flowed:
    """`climb` (at its prior) moving `total_mbit` megabits; see the module. Without a
    climb, the flow runs at `start` untouched (a flow too short to be tuned), its windows
    still seen (the transfer log's row)."""
    setting = start or (climb.prior if climb is not None else None)
    assert setting is not None, "a flow starts at a climb's prior or at `start`"
    rates: list[float] = []
    windows: dict[Setting, list[float]] = defaultdict(list)
    path, starts = [setting], [setting]
    moved = elapsed = since = step_s = 0.0
    while moved < total_mbit:
        rate = moves(setting)
        step = min(WINDOW_S, (total_mbit - moved) / rate)
        moved, elapsed, since = moved + rate * step, elapsed + step, since + step
        if step < WINDOW_S:
            break  # the last, partial window: the data ran out
        rates.append(seen(setting) * max(0.0, 1 + rng.gauss(0.0, noise)))
        windows[setting].append(rates[-1])
        if climb is None:
            continue
        recent = statistics.fmean(rates[-3:])
        left_s = (total_mbit - moved) / recent if recent > 0 else None
        started = time.perf_counter()
        change = climb.step(rates, left_s=left_s, try_s=since)
        step_s += time.perf_counter() - started
        if change is None:
            continue
        if change.setting != setting:
            path.append(change.setting)
        setting, rates, since = change.setting, [], 0.0
        starts.append(setting)
        ramp = min(RAMP_S, (total_mbit - moved) / moves(setting))
        moved, elapsed = moved + moves(setting) * ramp, elapsed + ramp
    return Flowed(elapsed, tuple(path), tuple(starts), setting, dict(windows), step_s)
