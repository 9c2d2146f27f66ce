"""Several real stork_server processes on one PostgreSQL queue (the session's private
cluster) moving files through a real GridFTP server: a node killed with SIGKILL, a node cut
off from the database for longer than its lease, the cluster-wide host limit, any node
serving users."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.pgcluster import PostgresCluster
from tests.support import GridFtpServer, StorkServer, install_slow_module, make_file, md5, wait_for

LEASE_S = 3
PER_HOST = 4  # EOS_PENALTY_LIMIT 2 / EOS_ALPHA 0.5: transfers per host, cluster-wide
N_JOBS = 300


def node(workdir: Path, name: str, database: str, **knobs: Any) -> StorkServer:
    return StorkServer(workdir / name, {"STORK_DATABASE": database, "STORK_NODE_NAME": name,
                                        "STORK_LEASE_TIME": LEASE_S, "STORK_MAX_NUM_JOBS": 3,
                                        "EOS_PENALTY_LIMIT": 2, "EOS_ALPHA": 0.5,
                                        "STORK_MAX_RETRY": 10, **knobs})


@contextlib.contextmanager
def running(*servers: StorkServer) -> Iterator[None]:
    try:
        for server in servers:
            server.start()
        yield
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop(timeout_s=20)


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql, params).fetchall()  # type: ignore[arg-type]


class HostSampler(threading.Thread):
    """Reads, every few milliseconds, how many transfers run per host across the cluster
    (from the database) and which nodes run them."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.most: dict[str, int] = {}
        self.busy_nodes: set[str] = set()
        self.samples = 0

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self.stop.wait(0.01):
                rows = db.execute("SELECT src_host, dest_host, claimed_by FROM jobs "
                                  "WHERE state = 'RUNNING'").fetchall()
                load: dict[str, int] = {}
                for src, dest, claimed in rows:
                    for host in {src, dest}:
                        load[host] = load.get(host, 0) + 1
                    self.busy_nodes.add(claimed)
                for host, count in load.items():
                    self.most[host] = max(self.most.get(host, 0), count)
                self.samples += 1


def test_three_nodes_300_transfers_one_killed_every_job_completes_once(
        postgres: PostgresCluster, gridftp: GridFtpServer, gridftp_root: Path,
        tmp_path: Path) -> None:
    url = postgres.new_database()
    sources = tmp_path / "src"
    sources.mkdir()
    up = gridftp_root / f"cluster-{tmp_path.name}"
    up.mkdir()
    files = [make_file(sources / f"f{i:03d}", 256 * 1024 + i, seed=i) for i in range(N_JOBS)]
    nodes = [node(tmp_path, f"node{k}", url) for k in range(1, 4)]
    sampler = HostSampler(url)
    with running(*nodes):
        sampler.start()
        ads = "\n".join(f'[ dap_type = transfer; src_url = "file://{f}"; '
                        f'dest_url = "{gridftp.url(up / f.name)}" ]' for f in files)
        ids: list[int] = []
        for k, server in enumerate(nodes):  # submissions spread over the three nodes
            ids += server.submit("\n".join(ads.splitlines()[k::3]))
        assert len(ids) == N_JOBS

        def victim_busy() -> bool:
            done = query(url, "SELECT count(*) FROM jobs WHERE state = 'COMPLETED'")[0][0]
            mine = query(url, "SELECT count(*) FROM jobs WHERE state = 'RUNNING' AND "
                              "claimed_by = 'node2'")[0][0]
            # one running transfer is enough to kill into: two of the cluster's PER_HOST slots
            # at once may never come to node2 (a node the host limit refused tries again
            # after HOST_BUSY_RETRY_S, while the others take a freed slot at once)
            return done >= N_JOBS // 4 and mine >= 1

        wait_for(victim_busy, 120, 0.005, what="node2 running transfers a quarter in")
        nodes[1].kill9()
        killed = {r[0] for r in query(url, "SELECT id FROM jobs WHERE state = 'RUNNING' AND "
                                            "claimed_by = 'node2'")}
        # any live node answers for every job
        for job_id in ids:
            nodes[2 if job_id % 2 else 0].wait_state(job_id, ("COMPLETED",), timeout_s=300)
        sampler.stop.set()
        sampler.join(5)
        listed = nodes[0].cli("stork_q", "-nodes", check=True).stdout
        table = nodes[2].api("GET", "/v1/jobs").json()["jobs"]
        ads = [nodes[0].job(job_id)["job"]["ad"] for job_id in sorted(killed)]
    assert killed, "node2 ran nothing when it was killed"
    # every job completed exactly once, with the source's bytes
    assert sorted(j["id"] for j in table) == sorted(ids)
    assert {j["state"] for j in table} == {"COMPLETED"}
    for f in files:
        assert md5(up / f.name) == md5(f), f.name
    completions = query(url, "SELECT job_id, count(*) FROM events WHERE kind = 'completed' "
                             "GROUP BY job_id")
    assert sorted(completions) == [(i, 1) for i in sorted(ids)]
    # nothing ran twice at once: each job's attempts follow one another
    attempts = query(url, "SELECT job_id, number, started_at, ended_at, node, outcome "
                          "FROM attempts ORDER BY job_id, number")
    by_job: dict[int, list[tuple[Any, ...]]] = {}
    for row in attempts:
        by_job.setdefault(row[0], []).append(row)
    for rows in by_job.values():
        assert [r[5] for r in rows].count("completed") == 1, rows
        for before, after in itertools.pairwise(rows):
            assert before[3] is not None and before[3] <= after[2], rows
    # the dead node's jobs were taken over and finished elsewhere
    for job_id in killed:
        rows = by_job[job_id]
        assert ("node2", "interrupted") in [(r[4], r[5]) for r in rows], rows
        assert rows[-1][4] in ("node1", "node3") and rows[-1][5] == "completed", rows
    # the host limit held for the whole cluster while the nodes were busy
    assert sampler.samples > 10 and len(sampler.busy_nodes) >= 2
    assert max(sampler.most.values()) <= PER_HOST, sampler.most
    assert "node1" in listed and "node2" in listed and "node3" in listed
    for ad in ads:  # the ad names the node of each attempt
        assert "attempt_nodes" in ad and '"node2"' in ad, ad


class Cuttable:
    """A TCP proxy to the cluster's Unix socket whose connections can be cut: a node that
    reaches the database through it loses the database while the others keep it."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.socket_path)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def sever(self) -> None:
        self.cut.set()
        with self._lock:
            conns, self._open = self._open, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def mend(self) -> None:
        self.cut.clear()

    def close(self) -> None:
        self.sever()
        self.listener.close()


def test_a_node_cut_off_from_the_database_stops_and_its_late_result_is_refused(
        postgres: PostgresCluster, tmp_path: Path) -> None:
    url = postgres.new_database()
    proxy = Cuttable(str(postgres.dir / ".s.PGSQL.5432"))
    dbname = url.split("/")[3].split("?")[0]
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.25, chunk=16384)  # 40 chunks: ~10 s
    a = node(tmp_path, "nodeA", f"postgresql://stork@127.0.0.1:{proxy.port}/{dbname}",
             STORK_MODULE_DIR=modules)
    b = node(tmp_path, "nodeB", url, STORK_MODULE_DIR=modules)
    source = make_file(tmp_path / "slow.src", 40 * 16384, seed=7)
    dest = tmp_path / "slow.dst"
    try:
        with running(a):
            [job_id] = a.submit(f'[ dap_type = transfer; src_url = "file://{source}"; '
                                f'dest_url = "file://{dest}" ]')
            a.wait_state(job_id, ("RUNNING",), timeout_s=30)
            with running(b):
                proxy.sever()  # node A can no longer reach the database; B can
                job = b.wait_state(job_id, ("COMPLETED",), timeout_s=120)
                assert md5(dest) == md5(source)
                proxy.mend()  # A's connection comes back: its late end must change nothing
                wait_for(lambda: "lost its lease" in a.stderr_path.read_text()
                         or "not recorded" in a.stderr_path.read_text(), 30,
                         what="node A to say its attempt lost its lease")
                a_rows = a.cli("stork_q", "-nodes", check=True).stdout  # A serves users again
                after = a.job(job_id)["job"]
    finally:
        proxy.close()
    assert job["state"] == after["state"] == "COMPLETED"
    attempts = query(url, "SELECT number, node, outcome FROM attempts WHERE job_id = %s "
                          "ORDER BY number", (job_id,))
    assert attempts[0][1:] == ("nodeA", "interrupted")
    assert attempts[-1][1:] == ("nodeB", "completed")
    assert query(url, "SELECT count(*) FROM events WHERE job_id = %s AND kind = 'completed'",
                 (job_id,)) == [(1,)]
    assert "nodeA" in a_rows and "nodeB" in a_rows
    assert "stopped 1 transfer(s)" in a.stderr_path.read_text()


def test_a_postgresql_database_that_cannot_be_reached_stops_the_start_with_its_name(
        tmp_path: Path) -> None:
    server = node(tmp_path, "lonely", "postgresql://stork@/nodb?host=/nonexistent-socket-dir")
    with pytest.raises(RuntimeError, match=r"STORK_DATABASE postgresql://stork@/nodb.*"
                                           r"cannot connect"):
        server.start()


@pytest.mark.parametrize("bad", ["mysql://h/db", "relative/stork.db"])
def test_a_bad_database_setting_names_the_knob(tmp_path: Path, bad: str) -> None:
    server = node(tmp_path, "bad", bad)
    with pytest.raises(RuntimeError, match="STORK_DATABASE"):
        server.start()


def test_a_dataset_of_a_killed_node_resumes_on_another_without_resending_done_files(
        postgres: PostgresCluster, gridftp: GridFtpServer, gridftp_root: Path,
        tmp_path: Path) -> None:
    from tests.test_dataset_jobs import assert_same, make_tree
    from tests.test_eos_partial import recording_guc

    url = postgres.new_database()
    src = gridftp_root / f"ds-{tmp_path.name}"
    made = make_tree(src, 160, 2 << 20)  # 160 x 2 MiB, a call each at cc=1
    out = tmp_path / "out"
    # node A's calls each wait 0.1 s first: on loopback the 160 calls took 3.5 s in all, and
    # in a CI run the kill below came after the last (node B sends at full speed)
    slowed = recording_guc(tmp_path, tmp_path / "calls.log", delay_s=0.1)
    a = node(tmp_path, "nodeA", url, STORK_GLOBUS_URL_COPY=str(slowed))
    b = node(tmp_path, "nodeB", url)
    with running(a):
        [job_id] = a.submit(f"""[ dap_type = transfer; arguments = "-cc 1 -p 1";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
        wait_for(lambda: a.job(job_id)["job"]["files_done"] >= 32, 60,
                 what="a first batch of files done")
        a.kill9()
    done = [r[0] for r in query(url, "SELECT rel_path FROM files WHERE job_id = %s AND "
                                     "state = 'DONE'", (job_id,))]
    assert 32 <= len(done) < 160, "kill -9 came too late to test a resume"
    stamps = {rel: (out / rel).stat().st_mtime_ns for rel in done}
    with running(b):  # node A stays dead: B takes the job over when A's lease ends
        job = b.wait_state(job_id, timeout_s=120)
    assert job["state"] == "COMPLETED" and job["files_done"] == 160, job
    resent = [rel for rel, ns in stamps.items() if (out / rel).stat().st_mtime_ns != ns]
    assert resent == []
    assert_same(made, out)
    passes = query(url, "SELECT node, outcome FROM attempts WHERE job_id = %s ORDER BY number",
                   (job_id,))
    assert passes[0] == ("nodeA", "interrupted") and passes[-1] == ("nodeB", "completed")


@pytest.mark.parametrize("dataset", [True, False], ids=["dataset", "single-file"])
def test_ranges_of_a_killed_node_are_not_sent_again_by_the_node_taking_over(
        postgres: PostgresCluster, gridftp: GridFtpServer, gridftp_root: Path,
        tmp_path: Path, dataset: bool) -> None:
    """Node A sends a 26 MiB file (a dataset's, or a single-file job's) as 4 MiB ranges and
    dies (kill -9) with two landed and two in flight; node B, taking the job over when A's
    lease ends, sends the ranges that were in flight and the rest, never the two that had
    landed."""
    from stork.server.kept_ranges import KEY
    from tests.test_eos_partial import invocations
    from tests.test_file_ranges import MB, holding_guc, offsets

    url = postgres.new_database()
    src = gridftp_root / f"ds-ranges-{tmp_path.name}"
    src.mkdir()
    make_file(src / "big.dat", 26 * MB, seed=44)
    out, calls, hold = tmp_path / "out", tmp_path / "calls.log", tmp_path / "hold"
    hold.touch()
    knobs = {"STORK_RANGE_MIN_MB": "4", "STORK_LINK_MBPS": "10",
             "STORK_GLOBUS_URL_COPY": str(holding_guc(tmp_path, calls, hold))}
    a, b = node(tmp_path, "nodeA", url, **knobs), node(tmp_path, "nodeB", url, **knobs)

    def landed() -> list[list[int]]:
        result = a.job(job_id)["job"]["result"]
        if not dataset:
            return result.get("ranges_landed") or []
        files = result.get(KEY, {}).get("files", {})
        return next(iter(files.values()))["landed"] if files else []

    out.mkdir()
    with running(a):
        [job_id] = a.submit(f"""[ dap_type = transfer; arguments = "-cc 2 -p 1";
          src_url = "{gridftp.url(src)}/{'' if dataset else 'big.dat'}";
          dest_url = "file://{out}/{'' if dataset else 'big.dat'}" ]""")
        wait_for(lambda: calls.exists() and len(invocations(calls)) == 4
                 and landed() == [[0, 8 * MB]], 60,
                 what="two ranges landed and two held in flight")
        a.kill9()
    hold.unlink()
    first = len(invocations(calls))
    with running(b):  # node A stays dead: B takes the job over when A's lease ends
        job = b.wait_state(job_id, timeout_s=120)
    assert job["state"] == "COMPLETED" and job["bytes_done"] == 26 * MB, job
    assert offsets(invocations(calls)[first:]) == list(range(8 * MB, 26 * MB, 4 * MB))
    assert md5(out / "big.dat") == md5(src / "big.dat")
    passes = query(url, "SELECT node, outcome FROM attempts WHERE job_id = %s ORDER BY number",
                   (job_id,))
    assert passes[0] == ("nodeA", "interrupted") and passes[-1] == ("nodeB", "completed")


def test_stork_rm_on_one_node_stops_the_attempt_running_on_another(
        postgres: PostgresCluster, tmp_path: Path) -> None:
    url = postgres.new_database()
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.25, chunk=16384)
    a = node(tmp_path, "nodeA", url, STORK_MODULE_DIR=modules)
    b = node(tmp_path, "nodeB", url, STORK_MODULE_DIR=modules)
    source = make_file(tmp_path / "slow.src", 200 * 16384, seed=3)  # ~50 s if not stopped
    dest = tmp_path / "slow.dst"
    with running(a):
        [job_id] = a.submit(f'[ dap_type = transfer; src_url = "file://{source}"; '
                            f'dest_url = "file://{dest}" ]')
        a.wait_state(job_id, ("RUNNING",), timeout_s=30)
        wait_for(dest.exists, 30, what="the partial destination")
        with running(b):
            b.cli("stork_rm", str(job_id), check=True)
            assert a.job(job_id)["job"]["state"] == "REMOVED"  # node A sees it at once
            wait_for(lambda: not dest.exists(), 30,
                     what="node A to stop the attempt and remove the partial destination")
            wait_for(lambda: "job 1" in a.stderr_path.read_text() and a.api(
                "GET", "/v1/nodes").json()["nodes"][0]["running"] == 0, 30,
                what="node A to hold no lease")
    [(outcome,)] = query(url, "SELECT outcome FROM attempts WHERE job_id = %s", (job_id,))
    assert outcome == "removed"


def test_stork_submit_wait_on_one_node_ends_when_another_node_completes_the_job(
        postgres: PostgresCluster, tmp_path: Path) -> None:
    url = postgres.new_database()
    a = node(tmp_path, "nodeA", url)
    # B takes submissions and starts nothing; its long polls would sleep past the test's
    # timeout unless node A's completion wakes them (NOTIFY)
    b = node(tmp_path, "nodeB", url, EOS_PENALTY_LIMIT=0, STORK_API_WAIT_TIMEOUT=600)
    source = make_file(tmp_path / "w.src", 100_000, seed=5)
    path = tmp_path / "w.dap"
    path.write_text(f'[ dap_type = transfer; src_url = "file://{source}"; '
                    f'dest_url = "file://{tmp_path}/w.dst" ]')
    with running(a, b):
        done = b.cli("stork_submit", "--wait", str(path), timeout=90)
        [job_id] = [int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines()
                    if line.startswith("Request assigned id:")]
    assert done.returncode == 0, done.stdout + done.stderr
    assert query(url, "SELECT node, outcome FROM attempts WHERE job_id = %s", (job_id,)) == [
        ("nodeA", "completed")]
    assert md5(tmp_path / "w.dst") == md5(source)
