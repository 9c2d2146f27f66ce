"""The figures of bench/bench_engine.py on synthetic series: the rates before and after a
change of cc, the time to the new rate, answers counted per file, the link's counters and
the ranges in flight. No testbed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stork.engine import Window
from stork.transfer.worker import Setting

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_engine

S4, S12 = Setting(4, 1, 2), Setting(12, 1, 2)


def series(rates_mbps: list[float], step_s: float, short_at: float | None = None) -> list[Window]:
    """1-s windows from 0 at the given rates, the setting changing at `step_s`."""
    out = []
    for i, rate in enumerate(rates_mbps):
        seconds = 0.5 if short_at == i else 1.0
        out.append(Window(float(i), seconds, rate * 1e6 / 8 * seconds,
                          S4 if i < step_s else S12, 0))
    return out


def test_median_rate_takes_whole_windows_inside_the_span() -> None:
    windows = series([10, 50, 52, 54, 56, 999], step_s=10, short_at=2)
    assert bench_engine.median_rate(windows, 1, 5) == pytest.approx(54)  # 50, 54, 56
    assert bench_engine.median_rate(windows, 1, 4.5) == pytest.approx(52)  # 50, 54
    assert bench_engine.median_rate(windows, 7, 9) is None


def test_time_to_rate_needs_the_rate_held_and_counts_later_dips() -> None:
    # step at 4: 50 before, a climb, a lone early peak at 5, held from 7 on, a dip at 10
    rates = [50, 50, 50, 50, 60, 130, 100, 121, 125, 130, 100, 128, 127, 40, 10]
    windows = series(rates, step_s=4)
    reach, below = bench_engine.time_to_rate(windows, 4.0, 0.9 * 130, until_s=13)
    assert reach == pytest.approx(4.0)  # the window [7, 8) ends 4 s after the step
    assert below == 1  # [10, 11) at 100 after it; the tail from 13 not judged
    assert bench_engine.time_to_rate(windows, 4.0, 0.9 * 130, until_s=13, hold=1) == \
        (pytest.approx(2.0), 2)  # the peak at 5 alone; 6 and 10 below after it
    assert bench_engine.time_to_rate(windows, 4.0, 200, until_s=13) == (None, 0)


def test_files_answered_more_than_once() -> None:
    assert bench_engine.answered_twice([0, 1, 2, 3]) == 0
    assert bench_engine.answered_twice([0, 1, 1, 2, 2, 2]) == 2


NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop
    lo:     120       2    0    0    0     0          0         0      120       2    0    0
stb42l0b: 1073741824  741000    0    0    0     0          0         0  9000000  150000    0    0
"""


def test_link_counters_from_proc_net_dev() -> None:
    assert bench_engine.link_device(NET_DEV) == "stb42l0b"
    assert bench_engine.rx_counter(NET_DEV, "stb42l0b") == (1073741824, 741000)
    assert bench_engine.rx_counter(NET_DEV, "lo") == (120, 2)
    with pytest.raises(ValueError):
        bench_engine.rx_counter(NET_DEV, "eth0")


def test_ranges_in_flight_are_the_daemons_own_children_for_the_file() -> None:
    dest = "file:///tmp/b/big-out.dat"
    guc = "/usr/bin/globus-url-copy -vb -p 2"

    def ranged(ppid: int, offset: int) -> str:
        return f"  {ppid} {guc} -partial-offset {offset} -partial-length 64 ftp://a/big {dest}"

    lines = [
        ranged(77, 134217728),
        ranged(77, 0),
        ranged(78, 67108864),  # another daemon's child
        f"  77 {guc} ftp://a/other.dat file:///tmp/b/other",
        "   1 /sbin/init",
    ]
    assert bench_engine.partial_offsets(lines, 77, dest) == [0, 134217728]
    assert bench_engine.span_bytes([[0, 100], [200, 250]]) == 150


def test_counter_windows_on_the_flows_grid_cut_at_the_step() -> None:
    # a counter at 1 MB/s (8 Mbit/s) until 2.5 s, 3 MB/s after, read every 0.5 s
    samples = [(t / 2, 1e6 * min(t / 2, 2.5) + 3e6 * max(t / 2 - 2.5, 0)) for t in range(11)]
    windows = bench_engine.counter_windows(samples, step_s=2.5, end_s=4.8)
    assert [(w.start_s, w.seconds) for w in windows] == [
        (0, 1), (1, 1), (2, 0.5), (2.5, 1), (3.5, 1), (4.5, pytest.approx(0.3))]
    assert [w.rate_mbps for w in windows[:5]] == pytest.approx([8, 8, 8, 24, 24])
    assert [w.setting for w in windows] == [S4, S4, S4, S12, S12, S12]
    # between two readings the counter is interpolated: [0.25, 1.25) holds 1 MB
    [inner] = bench_engine.counter_windows(samples, None, 1.25, start_s=0.25)[:1]
    assert inner.bytes == pytest.approx(1e6)
    assert bench_engine.counter_windows(samples[:1], None, 3) == []


def test_figures_of_a_step_run_and_of_a_fixed_one() -> None:
    rates = [20] * 4 + [50] * 8 + [100, 130] + [132] * 16 + [60, 10]
    windows = series(rates, step_s=12)
    got = bench_engine.figures(windows, 12.0, tail_s=28.0)
    assert got.before_mbps == pytest.approx(50)  # windows [4, 12)
    assert got.after_mbps == pytest.approx(132)  # windows [20, 28)
    assert got.reach_s == pytest.approx(2.0) and got.below_after == 0  # [13, 14) at 130
    assert got.first_s == pytest.approx(2.0) and got.noise == (0, 8)
    rates[21] = 110  # a dip in the stretch of the rate after: held and first now differ
    rates[13] = 110
    rates[12] = 125
    got = bench_engine.figures(series(rates, step_s=12), 12.0, tail_s=28.0)
    assert (got.first_s, got.reach_s) == (pytest.approx(1.0), pytest.approx(3.0))
    assert got.below_after == 1 and got.noise == (1, 8)
    fixed = bench_engine.figures(series([20] * 4 + [132] * 9 + [100, 5], step_s=99), None, 14.0)
    assert fixed == bench_engine.Figures(None, pytest.approx(132), None, 0, None, (1, 10))
