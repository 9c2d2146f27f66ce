"""The DAGMan example: submit descriptions parse with htcondor2, data nodes are valid Stork jobs."""

from __future__ import annotations

import re
from pathlib import Path

import htcondor2

from tests.support import StorkServer

DAG_DIR = Path(__file__).resolve().parent.parent / "submit_examples" / "dagman"


def nodes() -> dict[str, str]:
    text = (DAG_DIR / "workflow.dag").read_text()
    return dict(re.findall(r"^JOB\s+(\S+)\s+(\S+)", text, re.M))


def test_dag_nodes_and_order() -> None:
    assert nodes() == {"stage_in": "stage_in.sub", "compute": "compute.sub",
                       "stage_out": "stage_out.sub"}
    text = (DAG_DIR / "workflow.dag").read_text()
    assert "PARENT stage_in CHILD compute" in text and "PARENT compute  CHILD stage_out" in text


def test_submit_descriptions_parse_with_htcondor(tmp_path: Path) -> None:
    for name, sub in nodes().items():
        submit = htcondor2.Submit((DAG_DIR / sub).read_text())
        executable = DAG_DIR / submit["executable"]
        assert executable.exists() and executable.stat().st_mode & 0o111, executable
        assert submit["log"] == "workflow.log"
        if name.startswith("stage_"):
            assert submit["universe"] == "local"
            assert executable.resolve().name == "stork_submit"
            arguments = submit["arguments"]
            assert "--wait" in arguments and f"{name}.dap" in arguments


def test_data_nodes_are_valid_stork_jobs(tmp_path: Path) -> None:
    server = StorkServer(tmp_path)  # validation only: no daemon needed for --dry-run
    for name in ("stage_in", "stage_out"):
        result = server.cli("stork_submit", "--dry-run", f"{name}.dap", cwd=DAG_DIR)
        assert result.returncode == 0, result.stderr
        assert "1 ad(s) valid" in result.stdout
