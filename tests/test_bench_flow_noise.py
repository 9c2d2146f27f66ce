"""The pure parts of bench/bench_flow_noise.py: the link's rate from its device counters,
and the spreads it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_flow_noise import blocks, columns, link_rates, read_counters

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_the_links_rate_is_read_from_its_counters_between_samples(tmp_path: Path) -> None:
    # 1 MB a second, then half that; sampled every 0.5 s, a window may fall between samples
    samples = [(100.0 + k / 2, round(min(k / 2, 2.0) * 1e6 + max(k / 2 - 2.0, 0) * 5e5))
               for k in range(9)]
    path = tmp_path / "counters.txt"
    path.write_text("".join(f"{t:.3f} tun0 {b}\n{t:.3f} eth9 7\n" for t, b in samples))
    counters = read_counters(path)
    assert counters == samples  # the first device only
    rates = link_rates(counters, [100.0, 100.75, 102.0, 103.5, 99.0])
    assert rates[:3] == [pytest.approx(8.0), pytest.approx(8.0), pytest.approx(4.0)]
    assert rates[3:] == [None, None]  # past the last sample, before the first
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(RuntimeError, match=r"empty\.txt: the device counters were never read"):
        read_counters(tmp_path / "empty.txt")


def test_spreads_are_of_whole_windows_of_each_length() -> None:
    rates = [90.0, 110.0] * 6  # 10% about the mean a second, steady over 2 s
    assert blocks(rates, 2) == [100.0] * 6
    assert blocks(rates, 5) == [98.0, 102.0]  # whole windows only
    assert columns(rates) == "100.0 | 0.104 | 0.000 | 0.000"


def test_a_bad_cell_is_refused_with_the_option_named() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "bench_flow_noise.py"), "--cells",
                           "4/4"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--cells '4/4': each cell is cc/p/pp" in done.stderr
