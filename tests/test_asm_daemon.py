"""ASM in a real stork_server: the scheduled offline analysis reads the transfer log (rows
imported with stork_history import), and a dataset job with optimization = "asm" probes
with its own files on loopback GridFTP and records its samples and decision."""

from __future__ import annotations

import json
from pathlib import Path

from stork.translog import write_grid_csv
from tests.support import GridFtpServer, StorkServer, wait_for
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
