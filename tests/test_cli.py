"""The stork_* commands as a user runs them, against a real daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import StorkServer, make_file

REPO = Path(__file__).resolve().parent.parent


def copy_ad(tmp: Path, name: str, extra: str = "") -> str:
    return (f'[ dap_type = transfer; src_url = "file://{tmp}/{name}.src"; '
            f'dest_url = "file://{tmp}/{name}.dst"; {extra} ]\n')


def test_submit_prints_one_id_line_per_ad_and_wait_reports(stork: StorkServer,
                                                          tmp_path: Path) -> None:
    make_file(tmp_path / "a.src", 100_000)
    make_file(tmp_path / "b.src", 100_000)
    (tmp_path / "ok.dap").write_text(copy_ad(tmp_path, "a") + copy_ad(tmp_path, "b"))
    result = stork.cli("stork_submit", "--wait", "ok.dap")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["Request assigned id: 1", "Request assigned id: 2"]
    assert sorted(lines[2:]) == ["job 1: COMPLETED", "job 2: COMPLETED"]
    (tmp_path / "bad.dap").write_text(copy_ad(tmp_path, "missing", "max_retries = 0"))
    result = stork.cli("stork_submit", "--wait", "bad.dap")
    assert result.returncode == 1
    assert "job 3: FAILED: error: cannot open source" in result.stdout


def test_invalid_file_exits_3_and_queues_nothing(stork: StorkServer, tmp_path: Path) -> None:
    (tmp_path / "bad.dap").write_text(copy_ad(tmp_path, "a") + "\n"
                                      + copy_ad(tmp_path, "b", 'arguments = "-p 4 -f /etc/passwd"'))
    result = stork.cli("stork_submit", "bad.dap")
    assert result.returncode == 3
    assert ("bad.dap:3: ad 2: attribute 'arguments': unknown option '-f'" in result.stderr)
    assert "nothing from bad.dap was submitted" in result.stderr
    assert "0 job(s)" in stork.cli("stork_q", check=True).stdout


def test_dry_run_needs_no_server(tmp_path: Path) -> None:
    server = StorkServer(tmp_path)  # configured but never started
    result = server.cli("stork_submit", "--dry-run",
                        str(REPO / "submit_examples" / "paper" / "paper_example.dap"))
    assert result.returncode == 0, result.stderr
    assert "1 ad(s) valid; nothing submitted (--dry-run)" in result.stdout
    unreachable = server.cli("stork_q")
    assert unreachable.returncode == 4 and "cannot reach stork_server" in unreachable.stderr


def test_stdin_lognotes_and_name(stork: StorkServer, tmp_path: Path) -> None:
    make_file(tmp_path / "a.src", 1000)
    result = stork.cli("stork_submit", "-name", stork.socket, "-lognotes", "DAG Node: A",
                       "-stdin", stdin=copy_ad(tmp_path, "a", f'log = "{tmp_path}/a.log"'))
    assert result.returncode == 0 and result.stdout.strip() == "Request assigned id: 1"
    stork.wait_state(1)
    assert "DAG Node: A" in (tmp_path / "a.log").read_text()


def test_q_long_constraint_status_and_rm(stork: StorkServer, tmp_path: Path) -> None:
    retrying = ('[ dap_type = transfer; src_url = "ftp://127.0.0.1:1/x"; max_retries = 99; '
                f'dest_url = "file://{tmp_path}/never.dst"; tag = "keep" ]\n')
    make_file(tmp_path / "a.src", 1000)
    (tmp_path / "j.dap").write_text(copy_ad(tmp_path, "a", 'tag = "done"') + retrying)
    stork.cli("stork_submit", "j.dap", check=True)
    stork.wait_state(1)
    table = stork.cli("stork_q", check=True).stdout
    assert "COMPLETED" in table and "2 job(s)" in table
    long = stork.cli("stork_q", "-l", check=True).stdout
    assert 'tag = "done"' in long and "stork_id = 2" in long
    only = stork.cli("stork_q", "-constraint", 'tag == "keep"', check=True).stdout
    assert "ftp://127.0.0.1:1/x" in only and "1 job(s)" in only
    bad = stork.cli("stork_q", "-constraint", "tag ==")
    assert bad.returncode == 3 and "not a valid ClassAd expression" in bad.stderr
    status = stork.cli("stork_status", "1", check=True).stdout
    assert "Job 1: COMPLETED" in status and "Attempts:" in status and "completed" in status
    assert stork.cli("stork_rm", "2", check=True).stdout.strip() == "Job 2 marked for removal"
    again = stork.cli("stork_rm", "2", "77")
    assert again.returncode == 1
    assert "job 2: job 2 is already REMOVED" in again.stderr and "no job with id 77" in again.stderr


@pytest.mark.parametrize("command", ["stork_submit", "stork_q", "stork_status", "stork_rm",
                                     "stork_server"])
def test_help_documents_exit_codes(stork: StorkServer, command: str) -> None:
    result = stork.cli(command, "--help", check=True)
    assert "exit codes: 0 success" in result.stdout and "4 server unreachable" in result.stdout
