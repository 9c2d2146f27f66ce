"""The task matrix inside the daemon: host limits for transfers, one sampling run for equal
estimation requests, wait reasons and stork_q -matrix, on GridFTP servers bound to distinct
loopback addresses (127.0.0.2, .3, .4 are distinct hosts)."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from stork.store import SqliteStore
from stork.urls import parse_url
from tests.support import GridFtpServer, StorkServer, make_file, missing_tools, wait_for

MB = 1024 * 1024


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GridFtpServer]]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"GridFTP tools not installed ({', '.join(missing)}); run `make setup`")
    root = tmp_path_factory.mktemp("sites")
    servers = [GridFtpServer(root / f"site{i}", host=f"127.0.0.{i}").start() for i in (2, 3, 4)]
    yield servers
    for server in servers:
        server.stop()


def peak_per_host(attempts: list[dict]) -> dict[str, int]:
    points: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for a in attempts:
        hosts = {parse_url(a["src_url"]).host, parse_url(a["dest_url"]).host}
        for host in hosts:
            points[host] += [(a["started_at"], 1), (a["ended_at"], -1)]
    peaks = {}
    for host, marks in points.items():
        level = peak = 0
        for _, step in sorted(marks, key=lambda m: (m[0], m[1])):
            level += step
            peak = max(peak, level)
        peaks[host] = peak
    return peaks


def test_burst_respects_host_limits_and_shares_sampling(sites: list[GridFtpServer],
                                                        tmp_path: Path) -> None:
    a, b, c = sites
    src = make_file(a.workdir / "burst-src.dat", 100 * MB, seed=21)
    server = StorkServer(tmp_path, {"EOS_ALPHA": "0.5", "EOS_PENALTY_LIMIT": "1",
                                    "STORK_MAX_NUM_JOBS": "10", "EOS_SAMPLE_SIZE": "4M",
                                    "EOS_MAX_STREAMS": "8"}).start()
    try:
        transfers = "".join(
            f'[ dap_type = transfer; src_url = "{a.url(src)}"; '
            f'dest_url = "{dest.url(dest.workdir / f"burst-{i}.dat")}"; arguments = "-p 2" ]\n'
            for i, dest in enumerate([b, c] * 6))
        # submitted through the API (no client start-up), so the burst is queued at once
        ids = server.api("POST", "/v1/jobs", json={"text": transfers, "filename": "burst.dap",
                                                   "iwd": str(tmp_path)}).json()["ids"]
        # freeze site a, the source of every transfer: the two running on it cannot end,
        # so the other ten must wait for host 127.0.0.2's penalty limit while we look
        assert a.proc is not None
        os.killpg(a.proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: len(in_state(server, "RUNNING")) == 2, 30,
                     what="two transfers running from the frozen site")
            listing = server.api("GET", "/v1/jobs").json()["jobs"]
            waiting = [j for j in listing if j["state"] == "IDLE"]
            assert len(waiting) >= 8, listing  # at most two ended before the freeze
            assert all(j["wait_reason"] for j in waiting), listing  # each says why
            limited = [j["id"] for j in waiting
                       if j["wait_reason"] == "host 127.0.0.2 at penalty limit"]
            assert limited, listing
            status = server.cli("stork_status", str(limited[-1]), check=True).stdout
            assert f"Job {limited[-1]}: IDLE" in status, status
            assert "Waiting: host 127.0.0.2 at penalty limit" in status, status
            matrix = server.cli("stork_q", "-matrix", check=True).stdout
            assert "penalty limit 1" in matrix and "127.0.0.2 1" in matrix, matrix
            assert "last selection:" in matrix and "confusion score" in matrix, matrix
        finally:
            os.killpg(a.proc.pid, signal.SIGCONT)
        estimations = "".join(
            f'[ dap_type = estimation; src_url = "{a.url(src)}"; '
            f'dest_url = "{b.url(b.workdir / "est.dat")}"; arguments = "{args}" ]\n'
            for args in ("-b 1M", "-b 1M", "-b 1M", "-b 2M"))
        est_ids = server.submit(estimations)
        jobs = [server.wait_state(i, timeout_s=180) for i in ids + est_ids]
        assert all(j["state"] == "COMPLETED" for j in jobs), [j["last_error"] for j in jobs]
        attempts = [x for i in ids for x in server.job(i)["attempts"]]
        peaks = peak_per_host(attempts)
        assert peaks["127.0.0.2"] == 2  # 0.5 per transfer, limit 1: two at a time, never more
        assert max(peaks.values()) <= 2
        results = [server.job(i)["job"]["result"] for i in est_ids]
        assert len({r["optimal_streams"] for r in results[:3]}) == 1
        assert sum(r["shared_run"] for r in results[:3]) == 2
        store = SqliteStore(str(server.state / "stork.db"))
        runs = store.history(f"{a.host}:{a.port}", f"{b.host}:{b.port}", symmetric=True,
                             kind="optimization")
        assert sorted(r.arguments for r in runs) == ["-b 1048576", "-b 2097152"]  # 2 runs, not 4
    finally:
        server.stop()


def in_state(server: StorkServer, state: str) -> list[int]:
    return [j["id"] for j in server.api("GET", "/v1/jobs").json()["jobs"] if j["state"] == state]
