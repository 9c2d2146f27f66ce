"""The daemon as a real process: crash recovery, signals, limits, detaching."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stork.job import JobState
from stork.store import SqliteStore
from tests.support import (
    BIN,
    GridFtpServer,
    StorkServer,
    install_slow_module,
    make_file,
    md5,
    wait_for,
)

KB = 1024


def slow_server(tmp_path: Path, delay_s: float = 0.05, **knobs: object) -> StorkServer:
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=delay_s, chunk=64 * KB)
    return StorkServer(tmp_path, {"STORK_MODULE_DIR": str(modules),
                                  **{k: str(v) for k, v in knobs.items()}})


def pids_running(fragment: str, program: str = "") -> list[int]:
    """Processes whose command line holds `fragment` (and `program`, when given)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if fragment.encode() in cmdline and program.encode() in cmdline:
                found.append(int(entry))
    return found


def transfer_ad(src: Path, dest: Path, extra: str = "") -> str:
    return f'[ dap_type = transfer; src_url = "file://{src}"; dest_url = "file://{dest}"; {extra} ]'


def running_with_bytes(server: StorkServer, job_id: int) -> bool:
    job = server.job(job_id)["job"]
    return job["state"] == "RUNNING" and job["bytes_done"] > 0


def test_kill_9_mid_transfer_requeues_and_completes_once(tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 2 * 1024 * KB)
    dest = tmp_path / "dest.dat"
    server = slow_server(tmp_path, delay_s=0.05).start()
    try:
        [job_id] = server.submit(transfer_ad(src, dest, f'log = "{tmp_path}/k.log"'))
        wait_for(lambda: running_with_bytes(server, job_id), 20, what="transfer to start")
        module = str(tmp_path / "modules")
        assert pids_running(module), "the module should be running"
        server.kill9()
        # the module dies with its daemon (PR_SET_PDEATHSIG) and cannot finish behind our back
        wait_for(lambda: not pids_running(module), 5, what="orphan module to die")
        store = SqliteStore(str(server.state / "stork.db"))
        assert store.get(job_id).state is JobState.RUNNING  # as the dead daemon left it
        store.close()
        server.start()
        job = server.wait_state(job_id, timeout_s=60)
        assert job["state"] == "COMPLETED"
        assert job["attempts"] == 2 and job["failures"] == 1
        info = server.job(job_id)
        assert [a["outcome"] for a in info["attempts"]] == ["interrupted", "completed"]
        kinds = [e["kind"] for e in info["events"]]
        assert kinds.count("completed") == 1 and "requeue" in kinds
        assert md5(dest) == md5(src)
    finally:
        server.stop()


def test_kill_9_kills_the_running_globus_url_copy(tmp_path: Path, gridftp: GridFtpServer,
                                                  gridftp_root: Path) -> None:
    fifo = tmp_path / "never-ending.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", (f"while :; do head -c 65536 /dev/zero; sleep 0.1; "
                                            f"done > {fifo}")])
    server = StorkServer(tmp_path).start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; src_url = "file://{fifo}";
            dest_url = "{gridftp.url(gridftp_root / 'kill9.out')}" ]""")
        wait_for(lambda: running_with_bytes(server, job_id), 20, what="transfer to start")
        pid = server.job(job_id)["job"]
        assert pids_running(str(fifo), "globus-url-copy")
        server.kill9()
        wait_for(lambda: not pids_running(str(fifo), "globus-url-copy"), 5,
                 what="globus-url-copy to die")
    finally:
        writer.kill()
        server.stop()
    store = SqliteStore(str(server.state / "stork.db"))
    assert store.get(job_id).state is JobState.RUNNING and pid


def test_first_sigterm_lets_running_transfers_finish(tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 1024 * KB)  # 16 chunks * 0.1 s
    server = slow_server(tmp_path, delay_s=0.1, STORK_SHUTDOWN_GRACE=30).start()
    [job_id] = server.submit(transfer_ad(src, tmp_path / "d.dat"))
    wait_for(lambda: running_with_bytes(server, job_id), 20, what="transfer to start")
    server.signal(signal.SIGTERM)
    assert server.proc is not None
    assert server.proc.wait(timeout=30) == 0
    store = SqliteStore(str(server.state / "stork.db"))
    assert store.get(job_id).state is JobState.COMPLETED
    assert md5(tmp_path / "d.dat") == md5(src)


def test_grace_expiry_requeues_without_counting_a_failure(tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 4096 * KB)  # 64 chunks * 0.1 s: far past the grace
    server = slow_server(tmp_path, delay_s=0.1, STORK_SHUTDOWN_GRACE=0.5).start()
    [job_id] = server.submit(transfer_ad(src, tmp_path / "d.dat"))
    wait_for(lambda: running_with_bytes(server, job_id), 20, what="transfer to start")
    started = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.proc is not None and server.proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 5.5
    store = SqliteStore(str(server.state / "stork.db"))
    job = store.get(job_id)
    assert (job.state, job.attempts, job.failures) == (JobState.IDLE, 1, 0)
    assert store.events(job_id)[-1].detail["reason"] == "shutdown"
    assert not (tmp_path / "d.dat").exists()  # the partial file is not left looking like data
    store.close()
    server.start()  # and it completes after a restart
    assert server.wait_state(job_id, timeout_s=60)["state"] == "COMPLETED"
    server.stop()


def test_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 4096 * KB)
    server = slow_server(tmp_path, delay_s=0.1, STORK_SHUTDOWN_GRACE=600).start()
    [job_id] = server.submit(transfer_ad(src, tmp_path / "d.dat"))
    wait_for(lambda: running_with_bytes(server, job_id), 20, what="transfer to start")
    server.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert server.proc is not None and server.proc.poll() is None  # still in its grace period
    server.signal(signal.SIGTERM)
    assert server.proc.wait(timeout=15) == 0
    store = SqliteStore(str(server.state / "stork.db"))
    assert store.get(job_id).state is JobState.IDLE


def test_sighup_rereads_the_config(stork: StorkServer) -> None:
    assert stork.api("GET", "/v1/ping").json()["max_num_jobs"] == 10
    stork.write_config(STORK_MAX_NUM_JOBS=3)
    stork.signal(signal.SIGHUP)
    wait_for(lambda: stork.api("GET", "/v1/ping").json()["max_num_jobs"] == 3, 10,
             what="new STORK_MAX_NUM_JOBS")
    # a live knob of the API layer takes effect; a restart-only one is logged and kept
    [job_id] = stork.submit('[ dap_type = transfer; src_url = "ftp://127.0.0.1:1/x"; '
                            'max_retries = 0; dest_url = "file:///tmp/stork-hup.dst" ]')
    assert stork.api("GET", f"/v1/jobs/{job_id}/wait", params={"timeout": 0}).status_code == 200
    stork.write_config(STORK_API_MAX_WAITERS=0, EOS_WORKERS=3)
    stork.signal(signal.SIGHUP)
    wait_for(lambda: stork.api("GET", f"/v1/jobs/{job_id}/wait",
                               params={"timeout": 0}).status_code == 503, 10,
             what="STORK_API_MAX_WAITERS = 0 to refuse long polls")
    log_text = (stork.state / "stork_server.log").read_text()
    assert "EOS_WORKERS changed; it takes effect at the next restart" in log_text
    assert "applying STORK_API_MAX_WAITERS" in log_text
    stork.write_config(STORK_MAX_NUM_JOBS="lots")  # a bad file on SIGHUP keeps the old settings
    stork.signal(signal.SIGHUP)
    time.sleep(1.5)
    assert stork.api("GET", "/v1/ping").json()["max_num_jobs"] == 3
    assert "keeping the old configuration" in (stork.state / "stork_server.log").read_text()


def test_bad_config_stops_the_daemon_at_start(tmp_path: Path) -> None:
    server = StorkServer(tmp_path, {"STORK_MAX_RETRY": "often"})
    result = subprocess.run([str(BIN / "stork_server"), "-f"], env=server.env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 3
    assert f"{server.config}:4: STORK_MAX_RETRY: expected an integer" in result.stderr


def test_detaches_with_a_pid_file(tmp_path: Path) -> None:
    server = StorkServer(tmp_path)
    result = subprocess.run([str(BIN / "stork_server")], env=server.env(), capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    pid_file = server.state / "stork_server.pid"
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10,
                       what="pid file"))
    wait_for(server.ready, 20, what="detached daemon")
    assert server.api("GET", "/v1/ping").json()["pid"] == pid
    log = server.state / "stork_server.log"
    os.kill(pid, signal.SIGUSR2)  # every thread's stack to the log, and it goes on
    wait_for(lambda: "most recent call first" in log.read_text(), 10, what="the stacks")
    assert server.api("GET", "/v1/ping").json()["pid"] == pid
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 20, what="daemon to exit")
    assert not pid_file.exists() and not Path(server.socket).exists()
    assert "stork_server stopped" in (server.state / "stork_server.log").read_text()


def test_a_wait_that_times_out_says_what_the_job_and_the_daemon_were_doing(
        tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 4096 * KB)
    server = slow_server(tmp_path, delay_s=0.5).start()
    try:
        [job_id] = server.submit(transfer_ad(src, tmp_path / "d.dat"))
        with pytest.raises(TimeoutError) as timed_out:
            server.wait_state(job_id, timeout_s=2)
        said = str(timed_out.value)
        assert "'state': 'RUNNING'" in said and "'execute'" in said  # the job, its events
        assert "most recent call first" in said  # the daemon's threads (SIGUSR2)
        assert server.api("GET", "/v1/ping").status_code == 200  # and it goes on
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        assert "stork_server exited with status -9" in server.diagnosis(job_id)
    finally:
        server.stop()


def test_second_server_on_the_same_socket_is_refused(stork: StorkServer) -> None:
    result = subprocess.run([str(BIN / "stork_server"), "-f"], env=stork.env(),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 3 and "already serving" in result.stderr


def test_hung_transfer_is_killed_and_counted(tmp_path: Path) -> None:
    src = make_file(tmp_path / "src.dat", 4096 * KB)
    server = slow_server(tmp_path, delay_s=0.2, STORK_MAXDELAY_INMINUTES=0.02,
                         STORK_HUNG_CHECK_INTERVAL=0.2).start()
    try:
        [job_id] = server.submit(transfer_ad(src, tmp_path / "d.dat", "max_retries = 1"))
        job = server.wait_state(job_id, timeout_s=30)
        assert job["state"] == "FAILED" and job["failure_kind"] == "timeout"
        assert job["attempts"] == 2
        assert "STORK_MAXDELAY_INMINUTES" in job["last_error"]
    finally:
        server.stop()


def test_at_most_max_num_jobs_run_at_once(tmp_path: Path) -> None:
    srcs = [make_file(tmp_path / f"s{i}.dat", 256 * KB, seed=i) for i in range(6)]
    server = slow_server(tmp_path, delay_s=0.1, STORK_MAX_NUM_JOBS=2).start()
    try:
        ids = server.submit("\n".join(transfer_ad(s, tmp_path / f"d{i}.dat")
                                      for i, s in enumerate(srcs)))
        for job_id in ids:
            assert server.wait_state(job_id)["state"] == "COMPLETED"
        spans = [(a["started_at"], a["ended_at"]) for j in ids for a in server.job(j)["attempts"]]
        points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                        key=lambda p: (p[0], p[1]))
        level = peak = 0
        for _, step in points:
            level += step
            peak = max(peak, level)
        assert peak == 2
    finally:
        server.stop()


@pytest.mark.parametrize("signum", [signal.SIGINT])
def test_ctrl_c_in_the_foreground_is_a_clean_stop(stork: StorkServer, signum: int) -> None:
    stork.signal(signum)
    assert stork.proc is not None and stork.proc.wait(timeout=30) == 0
