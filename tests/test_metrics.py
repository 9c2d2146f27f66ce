"""GET /metrics: the Prometheus text format of a real daemon that moved real files over
loopback GridFTP, the token rule on TCP, and STORK_METRICS_OPEN for loopback scrapers."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest

from stork.errors import FailureKind
from stork.server.api import is_loopback
from stork.server.metered_store import host_only
from stork.server.metrics import CONTENT_TYPE, Metrics, samples, value
from tests.support import GridFtpServer, StorkServer, free_port, make_file, wait_for

TOKEN = "metrics-test-token-0123456789abcdef"


def test_metrics_of_real_transfers_and_the_token_rule(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / f"metrics-{tmp_path.name}.bin", 4 << 20)
    token_file = tmp_path / "api.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = StorkServer(tmp_path / "daemon", {
        "STORK_API_ADDRESS": f"127.0.0.1:{port}", "STORK_API_TOKEN_FILE": str(token_file),
        # an unseen pair is sampled only when sampling fits a tenth of the predicted time:
        # a slow nominal link makes the 4 MiB file worth a few quick samples (two must fit)
        "STORK_LINK_MBPS": "1", "EOS_SAMPLE_TIME": "1"})
    with server:
        # first, before any transfer of the pair teaches the EOS its real (fast) rate
        [tuned] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
          src_url = "{gridftp.url(src)}"; dest_url = "file://{tmp_path}/c" ]""")
        server.wait_state(tuned)
        # samples ran (the budget, rebased on the fast rate they measure, may stop them early)
        assert server.job(tuned)["job"]["result"]["optimization_source"] in ("sampled", "budget")
        ok, missing = server.submit(f"""
          [ dap_type = transfer; src_url = "{gridftp.url(src)}"; dest_url = "file://{tmp_path}/a" ]
          [ dap_type = transfer; src_url = "{gridftp.url(gridftp_root / 'no-such-file')}";
            dest_url = "file://{tmp_path}/b" ]""")
        for job in (ok, missing):
            server.wait_state(job)
        assert server.job(missing)["job"]["failure_kind"] == FailureKind.PERMANENT.value

        assert httpx.get(f"{base}/metrics", timeout=10).status_code == 403
        answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=10)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == CONTENT_TYPE
        text = answer.text
        node = socket.gethostname()
        pair = {"src": "127.0.0.1", "dest": "localhost"}
        assert value(text, "stork_jobs", state="COMPLETED") == 2
        assert value(text, "stork_jobs", state="FAILED") == 1
        assert value(text, "stork_jobs", state="IDLE") == 0
        assert value(text, "stork_attempts_started_total") == 3
        assert value(text, "stork_attempts_ended_total", event="completed") == 2
        assert value(text, "stork_failures_total", kind="permanent", scope="attempt") == 1
        assert value(text, "stork_bytes_moved_total", **pair) == 2 * (4 << 20)
        assert value(text, "stork_files_moved_total", **pair) == 2
        assert value(text, "stork_throughput_achieved_mbps", **pair) > 0
        assert value(text, "stork_sampling_runs_total", **pair) == 1
        assert value(text, "stork_sampling_seconds_total", **pair) > 0
        predicted = server.job(tuned)["job"]["result"]["predicted_throughput_mbps"]
        assert value(text, "stork_throughput_predicted_mbps", **pair) == pytest.approx(
            predicted, rel=1e-3)
        assert value(text, "stork_queue_wait_seconds_count") == 3
        assert value(text, "stork_dispatch_tick_seconds_count") > 0
        assert value(text, "stork_store_seconds_count", operation="start_attempt") == 3
        assert value(text, "stork_store_seconds_count", operation="finish_attempt") == 3
        assert value(text, "stork_transfers_running") == 0
        labelled = [labels for family in ("stork_jobs", "stork_bytes_moved_total",
                                          "stork_store_seconds_count")
                    for labels, _ in samples(text, family)]
        assert labelled and all(labels["node"] == node for labels in labelled)

        # what the status page draws from the same transfers
        overview = httpx.get(f"{base}/v1/overview", headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=30).json()
        [optimization] = overview["optimizations"]
        result = server.job(tuned)["job"]["result"]
        assert optimization["streams"] == result["optimized_streams"]
        assert len(optimization["samples"]) >= 1
        assert all(len(c["throughput_mbps"]) == len(optimization["grid"])
                   for c in optimization["curves"])
        [link] = overview["links"]
        assert link["pair"] == "127.0.0.1 -> localhost" and len(link["points"]) == 2
        assert [(f["job_id"], f["kind"]) for f in overview["failures"]] == [
            (missing, "permanent")]
        assert overview["counts"]["COMPLETED"] == 2 and overview["node"] == node

        # the knob is live: SIGHUP opens /metrics alone to loopback clients
        server.write_config(STORK_METRICS_OPEN="true")
        server.signal(signal.SIGHUP)
        wait_for(lambda: httpx.get(f"{base}/metrics", timeout=10).status_code == 200, 20,
                 what="/metrics without the token after SIGHUP")
        assert httpx.get(f"{base}/v1/jobs", timeout=10).status_code == 403
        assert httpx.get(f"{base}/v1/overview", timeout=10).status_code == 403


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1")
    assert is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.1.2.3") and not is_loopback("192.0.2.7")
    assert not is_loopback("") and not is_loopback("localhost")


def test_host_pairs_are_named_as_the_transfer_log_names_them() -> None:
    assert host_only("127.0.0.1:2811") == "127.0.0.1"
    assert host_only("[::1]:2811") == "::1"
    assert host_only("localhost") == "localhost"
    assert host_only("::1") == "::1"


def test_recent_failures_newest_first_and_bounded() -> None:
    metrics = Metrics(node="n1")
    for i in range(60):
        metrics.attempt_ended("attempt_failed", "transient" if i % 2 else None, failed=True,
                              job_id=i, when=float(i), error="e", attempt=1)
    metrics.attempt_ended("completed", None, failed=False, job_id=99, when=100.0, error="",
                          attempt=1)
    failures = metrics.recent_failures()
    assert len(failures) == 50 and failures[0].job_id == 59 and failures[-1].job_id == 10
    text = metrics.exposition()
    assert value(text, "stork_failures_total", kind="transient", node="n1") == 30
    assert value(text, "stork_failures_total", kind="unknown", node="n1") == 30
    assert value(text, "stork_attempts_ended_total", event="completed") == 1


def test_metered_store_forwards_and_times_every_call(tmp_path: Path) -> None:
    from stork.job import JobState
    from stork.server.metered_store import MeteredStore, metered
    from stork.store import JobStore, open_store

    metrics = Metrics(node="n1")
    inner = open_store(str(tmp_path / "stork.db"))
    store = metered(inner, metrics)
    try:
        assert isinstance(store, JobStore) and not MeteredStore.__abstractmethods__
        assert all(name in MeteredStore.__dict__ for name in JobStore.__abstractmethods__)
        assert store.count_by_state() == dict.fromkeys((s.value for s in JobState), 0)
        assert store.list_jobs() == [] and store.transfers() == []
        heard: list[object] = []
        store.add_listener(heard.append)
        assert inner._listeners == (heard.append,)
        text = metrics.exposition()
        for operation in ("count_by_state", "list_jobs", "transfers"):
            assert value(text, "stork_store_seconds_count", operation=operation) == 1
    finally:
        store.close()
    assert value(metrics.exposition(), "stork_store_seconds_count", operation="close") == 1


def test_unknown_paths_without_the_token_are_refused_not_described(tmp_path: Path) -> None:
    token_file = tmp_path / "api.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    with StorkServer(tmp_path / "daemon", {"STORK_API_ADDRESS": f"127.0.0.1:{port}",
                                           "STORK_API_TOKEN_FILE": str(token_file)}):
        for path in ("/no-such-thing", "/metrics", "/v1/ping"):
            answer = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert answer.status_code == 403 and "STORK_API_TOKEN_FILE" in answer.json()["error"]
        assert httpx.post(f"http://127.0.0.1:{port}/", timeout=10).status_code == 403
