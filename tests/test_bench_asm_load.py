"""bench_asm_load's load target figures on a synthetic run: a fixed cell's rate over its
middle 80% of bytes, a phase's rate from 20 s after its switch measured against the best
cell at its load, and --best-cells refused by name. Pure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_asm_load import (
    Phase,
    Run,
    after_mbps,
    best_cell,
    middle_mbps,
    parse_cells,
    phase_figures,
)

MB = 1_000_000


def steady(rates: list[tuple[float, float]], end_s: float) -> Run:
    """A run sampled every half second: `rates` as (from s, Mbit/s) steps."""
    run = Run("yes", 0.0, 0.0)
    landed, t = 0.0, 0.0
    while t <= end_s:
        run.samples.append((t, int(landed), 0))
        rate = [r for start, r in rates if start <= t][-1]
        landed += rate * 1e6 / 8 * 0.5
        t += 0.5
    run.end_s = end_s
    return run


def test_a_cells_rate_leaves_out_its_start_and_its_tail() -> None:
    # 2 s slow at 20 Mbit/s, then 160 Mbit/s: the middle 80% is all at 160
    run = steady([(0.0, 20.0), (2.0, 160.0)], 40.0)
    total = run.samples[-1][1]
    assert middle_mbps(run, total) == pytest.approx(160.0, rel=0.02)
    assert middle_mbps(run, 10 * total) == 0.0  # never reached 90%: no figure, not a guess


def test_a_phase_is_judged_from_twenty_seconds_after_its_switch_against_its_loads_best() -> None:
    # 180 Mbit/s, a load at 30 s drops it to 60 for 10 s, then back to 90; the load goes at 70 s
    run = steady([(0.0, 180.0), (30.0, 60.0), (40.0, 90.0), (70.0, 180.0)], 120.0)
    run.switches = [30.0, 70.0]
    total = run.samples[-1][1]
    args = argparse.Namespace(schedule=(Phase(0, 0), Phase(30, 50), Phase(70, 0)))
    figures = phase_figures(run, args, 200.0, total)
    assert figures[1].after == pytest.approx(90.0, rel=0.02)  # 50-70 s, past the 60s
    assert after_mbps(run, 70.0, 120.0, total) == pytest.approx(180.0, rel=0.02)
    assert after_mbps(run, 30.0, 45.0, total) is None  # a phase shorter than 20 s
    cells = {0.0: {"8/2/2": 150.0, "16/2/2": 185.0}, 50.0: {"8/2/2": 95.0, "16/2/2": 80.0}}
    assert best_cell(cells, 50.0) == ("8/2/2", 95.0)
    assert best_cell(cells, 25.0) is None


def test_a_cell_that_is_not_cc_p_pp_is_refused_by_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_asm_load")
    assert parse_cells("8/2/2, 16/1/4", parser) == [(8, 2, 2), (16, 1, 4)]
    with pytest.raises(SystemExit):
        parse_cells("8/2/2,16/0/4", parser)
    err = capsys.readouterr().err
    assert "--best-cells: '16/0/4' is not CC/P/PP" in err and "Traceback" not in err
