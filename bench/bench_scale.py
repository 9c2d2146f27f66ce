"""Several stork_servers on one PostgreSQL queue: dispatch throughput, submission rate and
takeover time with 1, 2 and 3 nodes, and SQLite with one, side by side.

    .venv/bin/python bench/bench_scale.py [--jobs 400] [--ads 4000] [--batch 200]

Real processes: a private PostgreSQL cluster (tests/pgcluster.py) and stork_server nodes
on this machine. Dispatch: jobs started per second (from the attempts' start times in the
database) with a fast external module (sh + cp of a 1-byte file). Submission: batched
submissions (--batch ads per request) from two clients per node at once, the jobs held
IDLE by a module that never finishes and STORK_MAX_NUM_JOBS = 1. Takeover: three nodes
with slow jobs, one killed with SIGKILL; the time from the kill to the last of its jobs
starting on another node (lease time STORK_LEASE_TIME = 5).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.pgcluster import PostgresCluster
from tests.support import StorkServer, wait_for

FAST = '#!/bin/sh\nexec cp "${1#fast://localhost}" "${2#file://}"\n'
HOLD = "#!/bin/sh\nexec sleep 3600\n"
SLOW = "#!/bin/sh\nsleep 30\nexec cp \"${1#slow://localhost}\" \"${2#file://}\"\n"
LEASE_S = 5


def modules(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("fast", FAST), ("hold", HOLD), ("slow", SLOW)):
        path = root / f"stork.transfer.{name}-file"
        path.write_text(text)
        path.chmod(0o755)
    return root


@contextlib.contextmanager
def nodes(tmp: Path, count: int, database: str | None, **knobs: Any) -> Iterator[list[StorkServer]]:
    servers = []
    for k in range(count):
        extra = {"STORK_DATABASE": database, "STORK_NODE_NAME": f"node{k + 1}",
                 "STORK_LEASE_TIME": LEASE_S} if database else {}
        servers.append(StorkServer(tmp / f"node{k + 1}", {
            "STORK_MODULE_DIR": modules(tmp / "modules"), "STORK_DISPATCH_INTERVAL": 0.05,
            "EOS_PENALTY_LIMIT": 1000, "STORK_LOG_LEVEL": "WARNING", **extra, **knobs}))
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop(timeout_s=20)


def rows(database: str | None, server: StorkServer, sql: str) -> list[tuple[Any, ...]]:
    if database:
        with psycopg.connect(database) as db:
            return db.execute(sql).fetchall()  # type: ignore[arg-type]
    db = sqlite3.connect(server.state / "stork.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def submit_all(servers: list[StorkServer], ads: list[str], batch: int) -> float:
    """Seconds for two clients per node to submit `ads` in batches of `batch`."""
    batches = ["\n".join(ads[i:i + batch]) for i in range(0, len(ads), batch)]
    clients = [servers[k % len(servers)] for k in range(2 * len(servers))]
    errors: list[str] = []

    def client(k: int) -> None:
        for text in batches[k::len(clients)]:
            answer = clients[k].api("POST", "/v1/jobs", json={"text": text, "iwd": "/"})
            if answer.status_code not in (200, 201):
                errors.append(answer.text)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(clients))]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return time.monotonic() - start


def dispatch(tmp: Path, count: int, database: str | None, jobs: int) -> float:
    tmp.mkdir(parents=True)
    source = tmp / "one-byte"
    source.write_bytes(b"x")
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    ads = [f'[ dap_type = transfer; src_url = "fast://localhost{source}"; '
           f'dest_url = "file://{out}/d{i}" ]' for i in range(jobs)]
    with nodes(tmp, count, database, STORK_MAX_NUM_JOBS=16) as servers:
        submit_all(servers, ads, 100)
        wait_for(lambda: rows(database, servers[0], "SELECT count(*) FROM jobs WHERE state "
                                                    "= 'COMPLETED'")[0][0] >= jobs,
                 600, 0.2, what="every job to complete")
        starts = sorted(r[0] for r in rows(database, servers[0],
                                           "SELECT started_at FROM attempts"))
    # the middle 80 %: no ramp-up, no tail
    lo, hi = starts[len(starts) // 10], starts[len(starts) * 9 // 10]
    return (len(starts) * 8 // 10) / (hi - lo)


def submission(tmp: Path, count: int, database: str | None, ads_n: int, batch: int) -> float:
    tmp.mkdir(parents=True)
    ads = [f'[ dap_type = transfer; src_url = "hold://localhost/x{i}"; '
           f'dest_url = "file://{tmp}/h{i}" ]' for i in range(ads_n)]
    with nodes(tmp, count, database, STORK_MAX_NUM_JOBS=1) as servers:
        seconds = submit_all(servers, ads, batch)
    return ads_n / seconds


def takeover(tmp: Path, database: str) -> tuple[float, float, int]:
    tmp.mkdir(parents=True)
    source = tmp / "slow-src"
    source.write_bytes(b"y" * 10)
    ads = [f'[ dap_type = transfer; src_url = "slow://localhost{source}"; '
           f'dest_url = "file://{tmp}/s{i}" ]' for i in range(9)]  # room on every node
    with nodes(tmp, 3, database, STORK_MAX_NUM_JOBS=6, STORK_SHUTDOWN_GRACE=0) as servers:
        submit_all(servers, ads, 3)

        def held() -> list[int]:
            return [r[0] for r in rows(database, servers[0], "SELECT id FROM jobs WHERE state "
                                       "= 'RUNNING' AND claimed_by = 'node2'")]

        wait_for(lambda: len(held()) >= 2, 60, 0.05, what="node2 running jobs")
        victims = held()
        servers[1].kill9()
        killed = time.time()

        def restarted() -> list[float]:
            ids = ",".join(str(int(i)) for i in victims)
            got = rows(database, servers[0], "SELECT job_id, max(started_at) FROM attempts "  # noqa: S608 - ids are integers
                       f"WHERE node <> 'node2' AND job_id IN ({ids}) GROUP BY job_id")
            return [r[1] for r in got] if len(got) == len(victims) else []

        starts = wait_for(restarted, 120, 0.05, what="node2's jobs to start elsewhere")
    return min(starts) - killed, max(starts) - killed, len(victims)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="jobs per dispatch run")
    parser.add_argument("--ads", type=int, default=4000, help="ads per submission run")
    parser.add_argument("--batch", type=int, default=200, help="ads per submission request")
    parser.add_argument("--takeover-only", action="store_true", help="only the takeover run")
    args = parser.parse_args()
    if args.takeover_only:
        with PostgresCluster() as pg, tempfile.TemporaryDirectory(prefix="stork-scale-") as tmp:
            print(takeover_text(*takeover(Path(tmp) / "t", pg.new_database())))
        return 0
    print("| store | nodes | dispatch (jobs started/s) | submission (jobs/s, batches of "
          f"{args.batch}) |")
    print("| --- | ---: | ---: | ---: |")
    with PostgresCluster() as pg, tempfile.TemporaryDirectory(prefix="stork-scale-") as tmp:
        root = Path(tmp)
        configs: list[tuple[str, int]] = [("sqlite", 1), ("postgresql", 1), ("postgresql", 2),
                                          ("postgresql", 3)]
        for n, (store, count) in enumerate(configs):
            d1 = pg.new_database() if store == "postgresql" else None
            rate = dispatch(root / f"d{n}", count, d1, args.jobs)
            d2 = pg.new_database() if store == "postgresql" else None
            subs = submission(root / f"s{n}", count, d2, args.ads, args.batch)
            print(f"| {store} | {count} | {rate:.1f} | {subs:.0f} |", flush=True)
        print()
        print(takeover_text(*takeover(root / "t", pg.new_database())))
    return 0


def takeover_text(first: float, last: float, victims: int) -> str:
    return (f"Takeover (3 nodes, STORK_LEASE_TIME = {LEASE_S} s): node2 killed with {victims} "
            f"running job(s); they started on other nodes {first:.1f} to {last:.1f} s after "
            f"the kill (target: lease + 5 s = {LEASE_S + 5} s).")


if __name__ == "__main__":
    sys.exit(main())
