"""Load, short version: a few dozen clients for a few seconds, and a few thousand queued jobs.

bench/bench_load.py measures (1,000 waiters, 1,000 clients, 100,000 jobs, old vs new); these
tests only check that under the same kinds of load every request is answered.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_load import Build, mixed, queued, status_only

NEW = Build("new")


def test_waiters_held_while_clients_submit_and_ask(tmp_path: Path) -> None:
    run = mixed(tmp_path, NEW, waiters=20, active=5, seconds=2, processes=2)
    assert run.alive and run.failed == 0, run.errors()
    assert run.tallies["submit"].latencies_s and run.tallies["status"].latencies_s
    assert run.held == 20 and run.ended == 0  # every long poll still waiting, none answered


def test_status_clients_all_answered(tmp_path: Path) -> None:
    run = status_only(tmp_path, NEW, clients=30, seconds=2, processes=2)
    assert run.alive and run.failed == 0, run.errors()
    assert run.tallies["status"].latencies_s


def test_a_full_queue_still_answers(tmp_path: Path) -> None:
    queue = queued(tmp_path, NEW, 3000, extra=1000)
    assert queue.q_exit == 0 and queue.q_lines == 3002  # header + jobs + total
    assert queue.busy_q_exit == 0  # stork_q while 1,000 more were being submitted
    assert queue.rss_mb > 0
