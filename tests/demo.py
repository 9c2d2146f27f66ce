"""`make demo`: a personal stork_server, a GridFTP server on loopback, the examples, a report.

Runs the real daemon detached (python-daemon, pid file), submits every example in
submit_examples/ (the @...@ placeholders filled with this run's scratch paths), waits,
prints stork_q and each job's outcome, and shuts everything down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stork.transfer.base import summarize_error
from tests.support import BIN, REPO, GridFtpServer, StorkServer, make_file, missing_tools, wait_for

MB = 1024 * 1024


def banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def run(server: StorkServer, *args: str, quiet: bool = False
        ) -> subprocess.CompletedProcess[str]:
    """Run a command and show it (with its output unless `quiet`)."""
    print(f"$ {' '.join(args)}", flush=True)
    result = server.cli(*args)
    if not quiet:
        sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result


def main() -> int:
    missing = missing_tools()
    if missing:
        print(f"demo: missing {', '.join(missing)}; run `make setup` as root", file=sys.stderr)
        return 1
    demo = Path(tempfile.mkdtemp(prefix="stork-demo-"))
    os.chmod(demo, 0o755)
    for sub in ("site", "local", "logs", "submit"):
        (demo / sub).mkdir()
    make_file(demo / "site" / "input.dat", 64 * MB, seed=1)
    make_file(demo / "local" / "results.dat", 16 * MB, seed=2)
    for i in range(60):  # a dataset: a run directory of small files and a few larger ones
        (demo / "site" / "run" / f"part{i % 3}").mkdir(parents=True, exist_ok=True)
        make_file(demo / "site" / "run" / f"part{i % 3}" / f"event{i:03d}.dat",
                  (4 * MB) if i % 20 == 0 else 64 * 1024, seed=100 + i)
    gridftp = GridFtpServer(demo / "logs")
    server = StorkServer(demo, {"STORK_MAX_NUM_JOBS": "4", "STORK_RETRY_DELAY": "1"})
    pid = 0
    try:
        gridftp.start()
        banner(f"GridFTP server on {gridftp.host}:{gridftp.port}, scratch in {demo}")
        banner("starting stork_server (detached; pid file, log file)")
        started = subprocess.run([str(BIN / "stork_server")], env=server.env(),
                                 capture_output=True, text=True, timeout=60, check=False)
        if started.returncode != 0:
            print(started.stderr, file=sys.stderr)
            return 1
        wait_for(server.ready, 30, what="stork_server")
        pid = int((server.state / "stork_server.pid").read_text())
        print(f"stork_server pid {pid}, socket {server.socket}")

        fill = {"@GRIDFTP@": f"ftp://{gridftp.host}:{gridftp.port}",
                "@GSIFTP@": f"gsiftp://{gridftp.host}:{gridftp.port}", "@DEMO@": str(demo)}
        ids: list[int] = []
        banner("validating the paper's example (section 3.2) with --dry-run")
        run(server, "stork_submit", "--dry-run",
            str(REPO / "submit_examples" / "paper" / "paper_example.dap"))
        for example in sorted((REPO / "submit_examples").glob("*.dap")):
            text = example.read_text()
            for key, value in fill.items():
                text = text.replace(key, value)
            path = demo / "submit" / example.name
            path.write_text(text)
            banner(f"submit_examples/{example.name}")
            if "dap_type = estimation" in text:
                result = run(server, "stork_submit", "--plot", str(demo / "logs" / "estimate.png"),
                             str(path))
                if result.returncode != 0:
                    print("demo: the estimation failed", file=sys.stderr)
                    return 1
                continue
            result = run(server, "stork_submit", "-lognotes", f"demo {example.stem}", str(path))
            if result.returncode != 0:
                print(f"demo: submit_examples/{example.name} was rejected", file=sys.stderr)
                return 1
            ids += [int(line.rsplit(":", 1)[1]) for line in result.stdout.splitlines()
                    if line.startswith("Request assigned id:")]

        banner("waiting for the jobs")
        for job_id in ids:
            server.wait_state(job_id, timeout_s=300)
        banner("stork_q")
        run(server, "stork_q")
        banner("outcome of each job")
        for job_id in ids:
            info = server.job(job_id)
            job = info["job"]
            tries = ", ".join(f"{a['src_url'].split(':')[0]}->{a['dest_url'].split(':')[0]} "
                              f"{a['outcome']}" for a in info["attempts"])
            line = f"job {job_id}: {job['state']:<9} after {job['attempts']} attempt(s) [{tries}]"
            if job["state"] != "COMPLETED" and job["last_error"]:
                line += (f"\n    error ({job['failure_kind']}): "
                         f"{summarize_error(job['last_error'])}")
            print(line)
        banner("stork_status of the first job")
        run(server, "stork_status", str(ids[0]))
        dataset = [i for i in ids if server.job(i)["job"]["files_total"]]
        if dataset:
            banner(f"the dataset job's files (stork_status {dataset[0]} -files, first lines)")
            listing = run(server, "stork_status", str(dataset[0]), "-files", quiet=True)
            print("\n".join(listing.stdout.splitlines()[:8]))
        banner(f"HTCondor user log {demo / 'logs' / 'demo.log'} (first events)")
        print("\n".join((demo / "logs" / "demo.log").read_text().splitlines()[:12]))
        return 0
    finally:
        banner("shutting down")
        if pid:
            os.kill(pid, signal.SIGTERM)
            try:
                wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, what="stork_server exit")
                print("stork_server stopped")
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
        gridftp.stop()
        print(f"GridFTP server stopped; scratch files left in {demo}")


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"demo finished in {time.monotonic() - start:.1f} s")
    sys.exit(code)
