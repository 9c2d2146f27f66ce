"""Crash safety, measured: SIGKILL the daemon at random moments during real GridFTP
transfers (a short run here; bench/bench_crash.py runs 200 transfers and 20 kills)."""

from __future__ import annotations

from pathlib import Path

from tests.crash import run_crash


def test_random_kill_9s_lose_and_double_nothing(tmp_path: Path,
                                                gridftp: object) -> None:  # tools present
    report = run_crash(tmp_path, jobs=24, kills=5, seed=7, max_mb=16)
    assert report.ok, report.problems
    assert report.kills_mid_transfer >= 1 and report.interrupted_attempts >= 1, report
