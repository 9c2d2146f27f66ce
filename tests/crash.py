"""The crash harness: SIGKILL the daemon at random moments while real GridFTP transfers are
queued and running, restart it each time, and check that nothing was lost or doubled.

Used by tests/test_crash.py (a short run in `make test`) and bench/bench_crash.py (200
transfers, 20 kills). Checks at the end:
* every job COMPLETED, with exactly one `completed` event;
* every destination file has its source's MD5;
* no transfer log row (per job) and no attempt or event row is duplicated;
* each job's user log has at most one termination event (005);
* no globus-url-copy process of the run is left.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import GridFtpServer, StorkServer, make_file, md5, wait_for


@dataclass
class CrashReport:
    jobs: int
    kills: int
    kills_mid_transfer: int = 0  # kills while at least one transfer was running
    interrupted_attempts: int = 0  # attempts the restarts found RUNNING and requeued
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _leftover_tools(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "globus-url-copy"], capture_output=True,
                         text=True, check=False).stdout
    return [line for line in out.splitlines() if marker in line]


def run_crash(workdir: Path, jobs: int = 200, kills: int = 20, seed: int = 1,
              max_mb: int = 24) -> CrashReport:
    rng = random.Random(seed)
    src_dir, dest_dir = workdir / "src", workdir / "dest"
    src_dir.mkdir(parents=True, exist_ok=True)
    dest_dir.mkdir(parents=True, exist_ok=True)
    files = [make_file(src_dir / f"f{i:04d}.dat", rng.randint(1, max_mb) << 20, seed=i)
             for i in range(jobs)]
    report = CrashReport(jobs, kills)
    start = time.monotonic()
    with GridFtpServer(workdir / "gridftp") as gridftp:
        server = StorkServer(workdir / "stork", {"STORK_MAX_NUM_JOBS": "4",
                                                 "STORK_RETRY_DELAY": "0.2",
                                                 "STORK_MAX_RETRY": "100"})
        server.start()
        try:
            ads = "".join(
                f'[ dap_type = transfer; src_url = "{gridftp.url(f)}"; '
                f'dest_url = "file://{dest_dir / f.name}"; arguments = "-p 2 -bs 4K"; '
                f'max_retries = 100; log = "{dest_dir / f.name}.log" ]\n' for f in files)
            ids = server.submit(ads)
            for _ in range(kills):
                time.sleep(rng.uniform(0.2, 1.2))
                running = server.api("GET", "/v1/jobs", params={"state": "RUNNING"}).json()
                report.kills_mid_transfer += bool(running["jobs"])
                server.kill9()
                time.sleep(0.3)
                left = _leftover_tools(str(dest_dir))
                if left:
                    report.problems.append(f"after a kill, globus-url-copy still runs: {left}")
                server.start()

            def all_done() -> bool:
                listing = server.api("GET", "/v1/jobs").json()["jobs"]
                return all(j["state"] in ("COMPLETED", "FAILED", "REMOVED") for j in listing)

            wait_for(all_done, 1800, 0.5, what="every job to end")
            for job_id in ids:
                body = server.job(job_id)
                job = body["job"]
                if job["state"] != "COMPLETED":
                    report.problems.append(f"job {job_id} ended {job['state']}: "
                                           f"{job['last_error']}")
                completed = [e for e in body["events"] if e["kind"] == "completed"]
                if len(completed) != 1:
                    report.problems.append(f"job {job_id} has {len(completed)} completed events")
                report.interrupted_attempts += sum(
                    1 for e in body["events"] if e["kind"] == "requeue" and
                    "stopped during the attempt" in json.dumps(e["detail"]))
        finally:
            server.stop()
    for f in files:
        dest = dest_dir / f.name
        if not dest.exists() or md5(dest) != md5(f):
            report.problems.append(f"{dest} is missing or differs from its source")
        log = Path(f"{dest}.log")
        terminations = log.read_text().count("\n005 (") if log.exists() else 0
        if terminations > 1:
            report.problems.append(f"{log} has {terminations} termination events")
    db = sqlite3.connect(f"file:{server.state / 'stork.db'}?mode=ro", uri=True)
    for what, sql in (
            ("transfer log rows per job", ("SELECT job_id, COUNT(*) FROM transfers WHERE "
                                           "job_id IS NOT NULL GROUP BY job_id "
                                           "HAVING COUNT(*) > 1")),
            ("completed events per job", ("SELECT job_id, COUNT(*) FROM events WHERE kind = "
                                          "'completed' GROUP BY job_id HAVING COUNT(*) > 1")),
            ("attempt rows", ("SELECT job_id, number, COUNT(*) FROM attempts "
                              "GROUP BY job_id, number HAVING COUNT(*) > 1"))):
        rows = db.execute(sql).fetchall()
        if rows:
            report.problems.append(f"duplicated {what}: {rows[:5]}")
    db.close()
    left = _leftover_tools(str(dest_dir))
    if left:
        report.problems.append(f"globus-url-copy left running: {left}")
    report.seconds = time.monotonic() - start
    return report
