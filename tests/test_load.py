"""Load, short version (bench/bench_load.py runs 1,000 clients for 60 s and 100,000 jobs)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_load import clients, queued  # noqa: E402


def test_many_clients_no_failed_request(tmp_path: Path) -> None:
    figures = clients(tmp_path, 100, 5)
    assert figures["failed"] == 0 and figures["alive"]
    assert figures["requests"] > 0


def test_a_full_queue_still_answers(tmp_path: Path) -> None:
    figures = queued(tmp_path, 5000)
    assert figures["stork_q_exit"] == 0 and figures["lines"] == 5002  # header + jobs + total
    assert 0 < figures["rss_mb"] < 500
