"""The valley figure of bench/bench_dataset.py (bench/valley.py) on synthetic series."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from valley import valley, window_rates

RATE = 12.5e6  # bytes/s: 100 Mbit/s


def steady(seconds: float, stalls: tuple[tuple[float, float], ...] = (), lead_s: float = 2.0,
           step_s: float = 0.25) -> list[tuple[float, float]]:
    """Bytes at the destination sampled every `step_s`: nothing for `lead_s` (listing),
    then 100 Mbit/s for `seconds`, except in the `stalls` (start, length after the first
    byte), where nothing lands."""
    series = []
    for k in range(int((lead_s + seconds) / step_s) + 1):
        t = k * step_s
        moving = max(0.0, min(t - lead_s, seconds))
        for at, length in stalls:
            moving -= max(0.0, min(moving, at + length) - at)
        series.append((t, moving * RATE))
    return series


def test_steady_flow_has_no_valley() -> None:
    found = valley(steady(40), tail_bytes=8 * RATE)
    assert found.note == ""
    assert found.median_mbps == pytest.approx(100)
    assert found.lowest_share == pytest.approx(1)
    assert found.span_s == pytest.approx(40) and found.start_s == pytest.approx(2)
    assert found.judged_from_s == pytest.approx(10)
    assert found.judged_to_s == pytest.approx(32)  # the last 8 s carry the last 8 x RATE
    assert found.windows == 81  # windows starting at 10.0, 10.25, ... 30.0


def test_one_second_stall_is_half_the_median() -> None:
    found = valley(steady(40, stalls=((20, 1),)), tail_bytes=8 * RATE)
    assert found.median_mbps == pytest.approx(100)
    assert found.lowest_mbps == pytest.approx(50)
    assert found.lowest_share == pytest.approx(0.5)
    assert 19 <= (found.lowest_at_s or 0) <= 20


def test_stalls_at_the_start_and_in_the_tail_are_not_judged() -> None:
    found = valley(steady(40, stalls=((3, 2), (36, 2))), tail_bytes=8 * RATE)
    assert found.lowest_share == pytest.approx(1)
    assert found.median_mbps == pytest.approx(100)


def test_bytes_taken_back_count_as_no_progress() -> None:
    series = steady(40)
    series[100] = (series[100][0], series[100][1] - 5e6)  # a file truncated, sent again
    found = valley(series, tail_bytes=8 * RATE)
    assert found.lowest_share is not None and 0.7 < found.lowest_share < 1


@pytest.mark.parametrize(("series", "says"), [
    ([], "0 samples"),
    ([(0.0, 0.0)], "1 samples"),
    ([(0.0, 0.0), (5.0, 0.0)], "0 bytes landed"),
    (steady(1.5), "shorter than one 2 s window"),
    (steady(12), "no 2 s window between 10 s after the first byte"),
])
def test_too_little_data_says_so(series: list[tuple[float, float]], says: str) -> None:
    found = valley(series, tail_bytes=8 * RATE)
    assert found.lowest_share is None and found.windows == 0
    assert found.note.startswith("too little data") and says in found.note


def test_a_tail_as_large_as_the_run_leaves_nothing_to_judge() -> None:
    found = valley(steady(40), tail_bytes=41 * RATE)
    assert found.lowest_share is None and "no 2 s window" in found.note
    assert found.median_mbps == pytest.approx(100)


def test_window_rates_cover_the_series() -> None:
    rates = window_rates(steady(10))
    assert rates[0] == (0.0, 0.0) and rates[-1][0] == pytest.approx(10)
    assert rates[-1][1] == pytest.approx(100) and len(rates) == 41
    assert window_rates([(0.0, 0.0)]) == []
