"""ASM in a real stork_server: the scheduled offline analysis reads the transfer log (rows
imported with stork_history import), and a dataset job with optimization = "asm" probes
with its own files on loopback GridFTP and records its samples and decision; a transfer the
daemon runs meanwhile on the same host is the job's known load."""

from __future__ import annotations

import json
from pathlib import Path

from stork.dataset.chunks import Params
from stork.store import SqliteStore
from stork.translog import write_grid_csv
from tests.support import GridFtpServer, StorkServer, install_slow_module, make_file, wait_for
from tests.test_asm import rows
from tests.test_dataset_jobs import assert_same, files_of, make_tree


def test_scheduled_analysis_then_an_asm_dataset_job(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    stork = StorkServer(tmp_path / "s", {"ASM_ANALYSIS_INTERVAL": "1"})
    stork.start()
    try:
        history = tmp_path / "history.csv"
        # a loopback path's history: 50 kB files, two load levels
        records = (rows("localhost", "localhost", 0.0002, 50_000, 120, (16, 1, 4), repeats=2)
                   + rows("localhost", "localhost", 0.0002, 50_000, 120, (16, 1, 4),
                          scale=0.6))
        write_grid_csv(records, history)
        stork.cli("stork_history", "import", str(history), check=True)
        model_file = stork.state / "asm" / "model.json"
        state_file = stork.state / "asm" / "state.json"

        def analysed() -> bool:
            try:
                return json.loads(state_file.read_text())["rows"] == len(records)
            except (OSError, ValueError, KeyError):
                return False

        wait_for(analysed, 60, what="the scheduled ASM analysis of the imported rows")
        model = json.loads(model_file.read_text())
        assert len(model["clusters"]) == 1 and len(model["clusters"][0]["surfaces"]) == 2

        src = gridftp_root / "ds-asm"
        made = make_tree(src, 120, 50_000)
        out = tmp_path / "out"
        [job_id] = stork.submit(f"""[ dap_type = transfer; optimization = "asm";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
        job = stork.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert_same(made, out)
        [info] = [v for k, v in job["result"].items() if k.startswith("optimizer_")]
        assert info["optimizer"] == "asm" and "failure" not in info, info
        assert 1 <= len(info["probes"]) <= 3 and "params" in info
        assert info["reason"].startswith("cluster 0")  # the sampling, or a switch on drift
        assert "param_changes" in info and info["achieved_mbps"] > 0
        files = files_of(stork, job_id)
        assert all(f["attempts"] == 1 for f in files)  # probed files were not sent again
        assert any("probe" in f["chunk"] for f in files)

        # on demand (the daemon stopped, so that its own runs do not race this one): the
        # rows added since the scheduled analysis's last run, the job's batches or none
        total = len(stork.api("GET", "/v1/transfers").json()["transfers"])
        assert total > len(records)
        stork.stop()
        seen = json.loads(state_file.read_text())["last_row_id"]
        result = stork.cli("stork_history", "analyze", "--report", str(tmp_path / "r"),
                           check=True)
        assert result.stdout.startswith(f"{total - seen} new transfer log row(s) read")
        assert json.loads(state_file.read_text())["last_row_id"] == total
        assert "\ncluster 0: " in result.stdout
        assert (tmp_path / "r" / "asm-cluster-0.png").exists()
    finally:
        stork.stop()


def test_a_transfer_the_daemon_runs_on_the_link_is_known_load(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.2, chunk=1024)
    stork = StorkServer(tmp_path / "s", {"ASM_ANALYSIS_INTERVAL": "1",
                                         "STORK_MODULE_DIR": str(modules),
                                         "STORK_SHUTDOWN_GRACE": "0"})
    # a log the daemon wrote before: no load known, and one other transfer known (tables
    # imported from CSV carry no `sharing`), each load with its own best cell
    stork.state.mkdir(parents=True)
    store = SqliteStore(str(stork.state / "stork.db"))
    store.add_transfers(
        rows("localhost", "localhost", 0.0002, 50_000, 60, (16, 1, 4), repeats=2)
        + rows("localhost", "localhost", 0.0002, 50_000, 60, (1, 16, 1), scale=0.6,
               sharing=1))
    store.close()
    stork.start()
    try:
        model_file = stork.state / "asm" / "model.json"
        wait_for(model_file.exists, 60, what="the first scheduled ASM analysis")
        [c] = json.loads(model_file.read_text())["clusters"]
        assert [round(s["intensity"], 1) for s in c["surfaces"]] == [0.0, 0.5]
        light, heavy = (Params(*s) for s in c["samples"])
        assert light != heavy

        make_file(tmp_path / "slow.src", 512 * 1024)  # about 100 s through the slow module
        [slow] = stork.submit(f"""[ dap_type = transfer; src_url = "file://{tmp_path}/slow.src";
          dest_url = "file://{tmp_path}/slow.dst" ]""")
        wait_for(lambda: stork.job(slow)["job"]["bytes_done"] > 0, 30, what="the slow transfer")

        src = gridftp_root / "ds-asm-load"
        made = make_tree(src, 60, 50_000)
        [job_id] = stork.submit(f"""[ dap_type = transfer; optimization = "asm";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{tmp_path}/out/" ]""")
        job = stork.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert_same(made, tmp_path / "out")
        assert stork.job(slow)["job"]["state"] == "RUNNING"  # it was there all along
        [info] = [v for k, v in job["result"].items() if k.startswith("optimizer_")]
        assert info["known_load"] == 1, info
        # fair share 1/2: the first sample is the heavy surface's, not the median's (of two
        # surfaces, the lighter)
        assert info["probes"][0].startswith(heavy.label()), info["probes"]
    finally:
        stork.stop()
