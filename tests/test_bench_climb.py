"""bench_climb's summary: each case as the mean of its runs, the best fixed setting by its
mean (not by its luckiest run), the fewest streams near it by their means; and a --dataset
it cannot read refused by name. Pure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_climb import Run, best_fixed, case_of, cases, main, print_table

MB = 1_000_000


def run(case: str, mbps: float, streams: float | None, state: str = "COMPLETED") -> Run:
    seconds = 20.0
    return Run("wan40", "dataset", case, seconds, round(mbps * MB / 8 * seconds), state,
               200.0, None, streams)


def test_an_optimizers_runs_are_one_case_and_a_fixed_settings_label_stays_whole() -> None:
    assert case_of(run("yes 3", 1, None)) == "yes"
    assert case_of(run("climb 12", 1, None)) == "climb"
    assert case_of(run("cc=16 p=1 pp=4", 1, 16)) == "cc=16 p=1 pp=4"
    assert case_of(run("preset", 1, 16)) == "preset"


def test_the_best_fixed_setting_is_the_best_mean_not_the_luckiest_run() -> None:
    runs = [run("cc=32 p=1 pp=4", 150, 32), run("cc=64 p=1 pp=4", 190, 64),
            run("yes 1", 160, 40),
            run("cc=32 p=1 pp=4", 170, 32), run("cc=64 p=1 pp=4", 140, 64),
            run("yes 2", 170, 30),
            run("cc=32 p=1 pp=4", 160, 32), run("cc=64 p=1 pp=4", 150, 64),
            run("cc=16 p=1 pp=4", 100, 16, state="FAILED")]
    summary = {c.name: c for c in cases(runs)}
    assert summary["cc=32 p=1 pp=4"].mbps == 160.0 and summary["cc=32 p=1 pp=4"].count == 3
    assert round(summary["cc=64 p=1 pp=4"].mbps, 6) == 160.0
    assert summary["yes"].count == 2 and summary["yes"].mbps == 165.0
    assert summary["yes"].streams == 35.0
    assert "cc=16 p=1 pp=4" not in summary  # no run of it completed
    best, fewest = best_fixed(list(summary.values()))
    assert best is not None and best.name in ("cc=32 p=1 pp=4", "cc=64 p=1 pp=4")
    assert fewest == 32  # both within 5% of the best mean: the fewer streams


def test_the_table_judges_each_run_against_the_best_mean(capsys) -> None:  # type: ignore[no-untyped-def]
    runs = [run("preset", 100, 16), run("cc=32 p=1 pp=4", 200, 32), run("yes 1", 180, 32),
            run("preset", 120, 16), run("cc=32 p=1 pp=4", 160, 32), run("yes 2", 198, 32)]
    print_table(runs)
    out = capsys.readouterr().out
    rows = {line.split("|")[3].strip(): line for line in out.splitlines()
            if line.startswith("| wan40")}
    # the best fixed mean is 180 (not the 200 of its luckier run); the preset's is 110
    assert "| 1.64 | 1.000 |" in rows["yes 1"]
    assert "| 1.80 | 1.100 |" in rows["yes 2"]
    assert "yes: mean of 2" in rows and "| 1.72 | 1.050 |" in rows["yes: mean of 2"]
    assert "cc=32 p=1 pp=4, 180.0 Mbit/s over 2 runs" in out


def test_a_dataset_spec_that_cannot_be_read_is_refused_by_name_before_any_testbed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_climb.py", "--dataset", "2000x256K,10xZ"])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    assert "--dataset '2000x256K,10xZ': dataset part '10xZ': expected COUNTxSIZE" \
        in capsys.readouterr().err


def test_a_workdir_holding_an_earlier_runs_store_is_refused_before_any_testbed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """A daemon started on a store it finds resumes that store's jobs: a run reusing the
    work directory of one that was stopped had its preset cell share the link with the
    stopped run's job (docs/BENCHMARKS.md 15.27, run J1)."""
    store = tmp_path / "climb-wan40" / "stork-dataset-baselines" / "state"
    store.mkdir(parents=True)
    monkeypatch.setattr(sys, "argv", ["bench_climb.py", "--workdir", str(tmp_path)])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    assert f"{store} holds the store of an earlier run" in capsys.readouterr().err


def test_a_knob_is_read_as_name_equals_value_and_a_wrong_one_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from bench_climb import knobs_of

    assert knobs_of(["STORK_RANGE_MIN_MB=16", " EOS_LINK_IS_TRUE = false"]) == {
        "STORK_RANGE_MIN_MB": "16", "EOS_LINK_IS_TRUE": "false"}
    for bad, why in (("STORK_RANGE_MIN_MB", "expected NAME=VALUE"),
                     ("STORK_RANGE_MB=16", "STORK_RANGE_MB is not a configuration knob")):
        monkeypatch.setattr(sys, "argv", ["bench_climb.py", "--knob", bad])
        with pytest.raises(SystemExit) as caught:
            main()
        assert caught.value.code == 2
        assert f"--knob {bad!r}: {why}" in capsys.readouterr().err


def test_a_mixs_chunks_each_show_their_changes_and_a_held_start_counts_its_streams(
        capsys) -> None:  # type: ignore[no-untyped-def]
    from bench_climb import run_streams

    small = {"prior": "cc=32 p=1 pp=4", "start": "cc=32 p=1 pp=4", "change_count": 0,
             "setting": "cc=32 p=1 pp=4", "changes": []}
    large = {"prior": "cc=4 p=2 pp=1", "start": "cc=8 p=4 pp=1", "change_count": 1,
             "setting": "cc=4 p=2 pp=1",
             "changes": [{"t_s": 15.0, "setting": "cc=4 p=2 pp=1", "reason": "alone"}]}
    summary = {"started_at": 100.0, "finished_at": 120.0}
    # 15 s at the held 32 streams, then 5 s at the prior's 8 (not 20 s at the prior's 8)
    assert run_streams("yes 1", summary, large) == (15 * 32 + 5 * 8) / 20
    mix = Run("wan40", "dataset", "yes 1", 20.0, 10 * MB, "COMPLETED", 200.0, small, 32.0,
              {"small": small, "large": large})
    print_table([mix])
    row = next(line for line in capsys.readouterr().out.splitlines() if "yes 1" in line)
    assert "| small 0, large 1 | small cc=32 p=1 pp=4; large cc=4 p=2 pp=1 |" in row


def test_a_presets_streams_weigh_each_planned_chunk_by_its_bytes() -> None:
    from bench_climb import run_streams

    # the dataset's files (20 x 64 MiB at 8 streams) and its manifest file (1 KB at 32)
    chunks = ["medium cc=4 p=2 pp=1 (off): 20 files, 1342177280 bytes",
              "small cc=32 p=1 pp=4 (on): 1 files, 1000 bytes"]
    streams = run_streams("preset", {"result": {"dataset_chunks": chunks}}, None)
    assert streams == pytest.approx(8, abs=1e-3)
    assert run_streams("preset", {"result": {"dataset_chunks": ["small: 3 files"]}},
                       None) is None
