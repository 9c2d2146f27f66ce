"""Transfer-rate analytics (stork/analytics, `stork_history analytics`): the three families on
known surfaces, the bound on fixed numbers, the command's answers and errors (CSV tables, and
the transfer log through a real stork_server)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from stork.cli.history import main as history
from stork.errors import AnalyticsError
from stork.tuning import rate_bound as bounds
from stork.tuning.rate_models import Fit, fit_all, predict
from stork.tuning.rate_table import (
    FLOWS,
    RTT,
    Table,
    from_rows,
    groups_text,
    read_csv,
    rtt_groups,
)
from tests.support import StorkServer

RTTS = (10.0, 20.0, 40.0, 80.0, 160.0)
FLOW_LEVELS = (1, 2, 4, 8, 16, 32)
NOISE_MBPS = 20.0


def surface(rtt_ms: float, flows: float) -> float:
    """Unimodal in flows (peak near 4.5 flows), falling with RTT: 150..1050 Mbit/s."""
    return 1000 * flows / (1 + 0.05 * flows * flows) / 2.3 * (1 - rtt_ms / 400) + 150


def synthetic(repeats: int = 5, seed: int = 3, rtt_matters: bool = True) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    rows = []
    for rtt in RTTS:
        for n in FLOW_LEVELS:
            for _ in range(repeats):
                mbps = surface(rtt if rtt_matters else 40.0, n) + rng.normal(0, NOISE_MBPS)
                rows.append({RTT: rtt, FLOWS: float(n), "concurrency": 1.0,
                             "pipelining": 1.0, "file_mb": 100.0, "mbps": mbps})
    return rows


@pytest.fixture(scope="module")
def fits() -> tuple[Table, list[Fit]]:
    table = from_rows("synthetic", synthetic())
    return table, fit_all(table)


def test_each_family_recovers_a_known_surface(fits: tuple[Table, list[Fit]]) -> None:
    """Within 25 Mbit/s RMSE of the noiseless surface (the noise is 20 Mbit/s, the surface
    spans 900), and the cross-validated RMSE within 1.6x the noise."""
    table, fitted = fits
    assert table.columns == (RTT, FLOWS)  # constant predictors are left out
    grid = np.array([[r, n] for r in RTTS for n in FLOW_LEVELS], dtype=float)
    truth = np.array([surface(r, n) for r, n in grid])
    for fit in fitted:
        error = float(np.sqrt(np.mean((fit.predict(grid) - truth) ** 2)))
        assert error < 25, (fit.family, fit.setting, error)
        assert fit.cv_rmse < 1.6 * NOISE_MBPS, (fit.family, fit.cv_rmse)
        assert 0.97 < fit.cv_r2 <= fit.r2 + 0.02 and fit.r2 <= 1
        assert abs(sum(fit.importance.values()) - 1) < 1e-9
    assert [f.family for f in fitted] == ["polynomial", "bagging", "boosting"]
    poly, bag, boost = fitted
    assert poly.setting.startswith("degree ") and int(poly.setting.split()[1]) >= 3
    assert bag.oob_rmse is not None and bag.oob_rmse < 1.6 * NOISE_MBPS
    assert boost.oob_rmse is None and poly.oob_rmse is None
    # B and the shrinkage were chosen by the cross-validation: the least of those tried
    assert min(boost.cv_curve.values()) == pytest.approx(boost.cv_rmse, abs=1e-3)
    assert min(bag.cv_curve.values()) == pytest.approx(bag.cv_rmse, abs=1e-3)


def test_importance_names_the_predictor_the_rate_depends_on() -> None:
    table = from_rows("flows only", synthetic(rtt_matters=False))
    for fit in fit_all(table, families=("bagging", "boosting", "polynomial")):
        assert fit.importance[FLOWS] > 0.9, (fit.family, fit.importance)


def test_predictions_inside_the_data_and_extrapolation_flagged(
        fits: tuple[Table, list[Fit]]) -> None:
    table, fitted = fits
    inside = predict(fitted, table, 60, 6)  # neither was measured, both within the ranges
    assert not inside.extrapolated
    # trees are steps: between the measured neighbours (40 and 80 ms, 4 and 8 flows)
    corners = [surface(r, n) for r in (40, 80) for n in (4, 8)]
    for family, value in inside.estimates.items():
        assert min(corners) - 2 * NOISE_MBPS < value < max(corners) + 2 * NOISE_MBPS, family
    assert abs(inside.estimates["polynomial"] - surface(60, 6)) < 2 * NOISE_MBPS
    outside = predict(fitted, table, 366, 64)
    assert outside.outside == ("rtt_ms 366 outside the measured 10..160",
                               "flows 64 outside the measured 1..32")
    with pytest.raises(AnalyticsError, match="flows >= 1"):
        predict(fitted, table, 40, 0)


def test_the_bound_is_the_papers_formula_on_fixed_numbers() -> None:
    # polynomial: ln 16 + ln(2 L / eps) + [eps^2] ln 2 + ln l - eps^2 l / 16
    assert bounds.log_delta_poly(0.1, 10_000, 2.0) == pytest.approx(
        2.772589 + 3.688879 + 0 + 9.210340 - 6.25, abs=1e-5)
    # trees, eps = C/2: 3 ln(l / eps^2) + ln 32 + ln l - eps^2 l / 4
    assert bounds.log_delta_trees(0.5, 1000) == pytest.approx(
        3 * 8.294050 + 3.465736 + 6.907755 - 62.5, abs=1e-5)
    # below C/4 the printed cover factor would fall under 1: it is held at 1
    assert bounds.log_delta_trees(0.1, 1000) == pytest.approx(3.465736 + 6.907755 - 2.5,
                                                              abs=1e-5)
    found = bounds.bound("polynomial", 10_000, 1000.0, 2.0)
    assert found.epsilon is not None and found.delta_at_epsilon is not None
    assert found.delta_at_epsilon <= bounds.DELTA
    assert bounds.log_delta_poly(found.epsilon * 0.995, 10_000, 2.0) > math.log(bounds.DELTA)
    assert 0.165 < found.epsilon < 0.175  # eps^2 l / 16 = ln(16 (2L / eps) l / 0.05) near 0.17
    assert bounds.bound("trees", 30, 1000.0).vacuous  # 30 rows guarantee nothing
    assert "vacuous" in bounds.bound("trees", 30, 1000.0).text()


def write_sweeps(path: Path, rows: list[dict[str, float]]) -> None:
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["Note", "FileSize", "FileNumbers", "Bandwidth", "RTT", "P", "CC", "PP",
                      "Throughput"])
        for r in rows:
            out.writerow(["x", 1e8, 1, 1e10, r[RTT] / 1000, int(r[FLOWS]), "na", "na",
                          round(r["mbps"], 3)])
        out.writerow(["x", 1e8, 1, 1e10, 0.04, "na", "na", "na", 500])  # skipped: P is na


def test_the_command_fits_a_sweeps_table_predicts_and_plots(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "sweeps.csv"
    write_sweeps(table, synthetic(repeats=2))
    plots = tmp_path / "plots"
    assert history(["analytics", str(table), "--predict", "60,6", "--plot", str(plots)]) == 0
    out = capsys.readouterr().out
    assert "60 rows used, 1 skipped" in out
    for family in ("polynomial", "bagging", "boosting"):
        assert f"| {family} |" in out and (plots / f"{family}.png").stat().st_size > 10_000
    assert "C = " in out and "l = 60" in out and "L = " in out  # the bound's constants
    assert "at RTT 60 ms, 6 flows: polynomial" in out and "EXTRAPOLATED" not in out


def test_the_command_refuses_to_extrapolate_silently(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "sweeps.csv"
    write_sweeps(table, synthetic(repeats=1))
    assert history(["analytics", str(table), "--predict", "366,8"]) == 1
    captured = capsys.readouterr()
    assert "EXTRAPOLATED" in captured.out and "rtt_ms 366 outside the measured 10..160" in \
        captured.out
    assert "--extrapolate to accept" in captured.err
    assert history(["analytics", str(table), "--predict", "366,8", "--extrapolate"]) == 0


def test_the_command_names_what_is_wrong_with_a_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.csv"
    write_sweeps(small, synthetic(repeats=1)[:7])
    assert history(["analytics", str(small)]) == 1
    expected = (f"{small}: 7 usable rows (1 skipped); fitting with 5-fold cross-validation "
                "needs at least 20")
    assert expected in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("FileSize,P,Bandwidth\n1,2,3\n")
    assert history(["analytics", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: missing columns RTT, Throughput" in err
    assert history(["analytics", str(tmp_path / "nope.csv")]) == 1
    assert "nope.csv: cannot read" in capsys.readouterr().err
    one_flow = tmp_path / "one.csv"
    write_sweeps(one_flow, [r for r in synthetic() if r[FLOWS] == 4])
    assert history(["analytics", str(one_flow)]) == 1
    assert "every row has the same number of flows" in capsys.readouterr().err
    table = tmp_path / "sweeps.csv"
    write_sweeps(table, synthetic(repeats=1))
    assert history(["analytics", str(table), "--hold-out-rtt", "55"]) == 1
    assert "no rows at RTT 55 ms (within 10%) to hold out (measured: 10, 20, 40, 80, 160 ms)" \
        in capsys.readouterr().err
    assert history(["analytics", str(table), "--hold-out-rtt", "40", "--rtt-tolerance", "1"]) == 1
    assert "--rtt-tolerance is a share in [0, 1), got 1" in capsys.readouterr().err


def test_hold_out_rtt_prints_each_models_error_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "sweeps.csv"
    write_sweeps(table, synthetic(repeats=2))
    assert history(["analytics", str(table), "--hold-out-rtt", "40"]) == 0
    out = capsys.readouterr().out
    assert "held out RTT 40 ms: 12 rows (measured at 40 ms); fitted on 48 rows" in out
    assert "EXTRAPOLATED" not in out
    lines = [line for line in out.splitlines() if line.startswith("| polynomial |")]
    assert len(lines) == 1 and float(lines[0].split("|")[4]) < 0.15  # mean relative error


def jittered(seed: int = 5) -> list[dict[str, float]]:
    """The synthetic rows with each RTT as a TCP connect measures it: up to 3% above."""
    rng = np.random.default_rng(seed)
    return [{**r, RTT: r[RTT] * (1 + rng.uniform(0, 0.03))} for r in synthetic(repeats=2)]


def test_rtt_groups_gather_measured_rtts() -> None:
    rtts = np.array([40.9, 10.1, 40.2, 10.0, 160.0, 10.4, 44.5])
    assert rtt_groups(rtts, 0.1) == [(10.0, 10.4, 3), (40.2, 40.9, 2), (44.5, 44.5, 1),
                                     (160.0, 160.0, 1)]
    assert rtt_groups(rtts, 0.2)[1] == (40.2, 44.5, 3)
    assert groups_text(rtt_groups(rtts, 0.1)) == \
        "10..10.4 (3 rows), 40.2..40.9 (2 rows), 44.5 (1 rows), 160 (1 rows)"
    table = from_rows("t", [{RTT: v, FLOWS: float(i % 2 + 1), "concurrency": 1.0,
                             "pipelining": 1.0, "file_mb": 1.0, "mbps": 1.0}
                            for i, v in enumerate(rtts)])
    assert table.near_rtt(40).tolist() == [True, False, True, False, False, False, False]
    assert table.near_rtt(40, 0.15).sum() == 3
    assert table.near_rtt(40.2, 0).tolist() == [False, False, True] + [False] * 4


def test_hold_out_takes_the_measured_rtts_near_the_one_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "measured.csv"
    write_sweeps(table, jittered())
    assert history(["analytics", str(table), "--hold-out-rtt", "40"]) == 0
    out = capsys.readouterr().out
    assert "held out RTT 40 ms: 12 rows (measured at 40." in out and "fitted on 48 rows" in out
    assert history(["analytics", str(table), "--hold-out-rtt", "40", "--rtt-tolerance",
                    "0"]) == 1
    err = capsys.readouterr().err
    assert ("no rows at RTT 40 ms (within 0%) to hold out (measured: 10.01..10.3, "
            "20.04..20.58, 40..41.07, 80.36..81.93, 160.1..164.6 ms)") in err


def test_reads_the_grid_format_and_the_transfer_log_through_the_daemon(
        tmp_path: Path) -> None:
    header = ("FileSize,FileCount,Bandwidth,RTT,BufferSize,Parallelism,Concurrency,Pipelining,"
              "Fast,Throughput,Duration,Date,Time,Source,Destination")
    lines = [header]
    for i, r in enumerate(synthetic(repeats=1)):
        size, count = 1e8, 10
        duration = size * count * 8 / 1e6 / r["mbps"]
        lines.append(f"{size:.0f},{count},10000,{r[RTT] / 1000},33554432,{int(r[FLOWS])},2,1,0,"
                     f"{r['mbps']:.6f},{duration:.6f},2015-04-08,15:{i // 60:02d}:{i % 60:02d},"
                     f"alpha,beta")
    grid = tmp_path / "grid.csv"
    grid.write_text("\n".join(lines) + "\n")
    local = read_csv(grid)
    assert len(local) == 30 and local.columns == (RTT, FLOWS)
    with StorkServer(tmp_path / "s") as server:
        server.cli("stork_history", "import", str(grid), check=True)
        result = server.cli("stork_history", "analytics", "-src", "alpha",
                            "--predict", "30,4", timeout=300)
        assert result.returncode == 0, result.stderr
        assert "the transfer log: 30 rows used, 0 skipped" in result.stdout
        assert "| bagging |" in result.stdout and "at RTT 30 ms, 4 flows" in result.stdout
