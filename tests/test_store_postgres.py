"""The shared store's own behaviour: several nodes on one PostgreSQL database (leases,
fencing, takeover, the cluster-wide host limit, heartbeats, pair locks, notifications),
schema versions and a clear error for a database that cannot be reached. What every store
does is in test_store_contract.py."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from stork.dataset.expand import DatasetFile
from stork.errors import HostLimitReached, SchemaError, StoreError
from stork.job import DapType, FileState, JobSpec, JobState
from stork.store import open_store
from stork.store.base import FileResult, HostLimit, Transition
from stork.store.postgres import PostgresStore
from stork.translog import TransferRecord
from tests.pgcluster import PostgresCluster
from tests.support import wait_for

SPEC = JobSpec(DapType.TRANSFER, "ftp://src/a", "ftp://dst/b", ad_text="[ ]")
DONE = Transition(JobState.COMPLETED, "completed", "completed", exit_code=0, bytes_done=7)
LEASE_S = 2.0


@pytest.fixture
def url(postgres: PostgresCluster) -> str:
    return postgres.new_database()


@pytest.fixture
def nodes(url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    a = PostgresStore(url, node="a", lease_s=LEASE_S)
    b = PostgresStore(url, node="b", lease_s=LEASE_S)
    yield a, b
    a.close()
    b.close()


def expire(store: PostgresStore, job_id: int) -> None:
    """Wait (on the database's clock) until the job's lease is over."""
    def over() -> bool:
        with psycopg.connect(store.url) as db:
            row = db.execute("SELECT claimed_until < extract(epoch from clock_timestamp()) "
                             "FROM jobs WHERE id = %s", (job_id,)).fetchone()
            return bool(row and row[0])

    wait_for(over, LEASE_S * 5, 0.1, what=f"the lease of job {job_id} to expire")


def test_open_store_picks_postgresql_by_url_and_names_the_node(url: str) -> None:
    store = open_store(url, node="n1", lease_s=5)
    try:
        assert isinstance(store, PostgresStore) and store.shared and store.node == "n1"
        [job_id] = store.submit([SPEC], 0, "root", now=1.0)
        store.start_attempt(job_id, 2.0, "a", "b", "m")
        assert store.attempts(job_id)[0].node == "n1"
    finally:
        store.close()


def test_an_unreachable_database_is_a_clear_error_at_start(postgres: PostgresCluster) -> None:
    with pytest.raises(StoreError, match=r"STORK_DATABASE postgresql://stork@/nosuchdb.*"
                                         r"cannot connect.*nosuchdb"):
        PostgresStore(postgres.url("nosuchdb"))
    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("postgresql://stork@/x?host=/nonexistent-dir")


def test_an_unknown_schema_version_is_refused_and_a_restart_keeps_the_jobs(url: str) -> None:
    first = PostgresStore(url, node="a")
    [job_id] = first.submit([SPEC], 0, "root", now=1.0)
    first.close()
    again = PostgresStore(url, node="a")  # the same schema: opened as it is
    assert again.get(job_id).state is JobState.IDLE
    again.close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(SchemaError, match="schema version 99"):
        PostgresStore(url, node="a")


def test_a_version_1_database_gains_the_spread_and_the_job_and_keeps_its_rows(url: str) -> None:
    first = PostgresStore(url, node="a")
    old = TransferRecord(time=1.0, src_host="a", dest_host="b", rtt_s=None, bandwidth_bps=None,
                         buffer_bytes=None, file_size_bytes=1e6, file_count=1, cc=1, p=1, pp=1,
                         fast=False, bytes_moved=1_000_000, duration_s=1.0, throughput_mbps=8.0)
    first.add_transfers([old])
    first.close()
    with psycopg.connect(url, autocommit=True) as db:  # back to version 1
        db.execute("ALTER TABLE transfers DROP COLUMN spread_mbps")
        db.execute("ALTER TABLE transfers DROP COLUMN job_id")
        db.execute("UPDATE schema_version SET version = 1")
    again = PostgresStore(url, node="a")
    try:
        assert again.transfers() == [old]
        again.add_transfers([dataclasses.replace(old, time=2.0, spread_mbps=1.5, job_id=4)])
        assert [(r.spread_mbps, r.job_id) for r in again.transfers()] == [(1.5, 4), (None, None)]
    finally:
        again.close()
    with psycopg.connect(url, autocommit=True) as db:
        assert db.execute("SELECT version FROM schema_version").fetchone() == (3,)


def test_of_racing_nodes_exactly_one_claims_a_job(nodes: tuple[PostgresStore, PostgresStore]
                                                   ) -> None:
    a, b = nodes
    ids = a.submit([SPEC] * 20, 0, "root", now=1.0)
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda args: args[0].start_attempt(args[1], 2.0, "x", "y", "m"),
                            [(store, i) for i in ids for store in (a, b, a, b)]))
    started = [job for job in won if job is not None]
    assert sorted(j.id for j in started) == ids  # each job once, by one node
    for job_id in ids:
        [attempt] = a.attempts(job_id)
        assert attempt.node in ("a", "b")


def test_a_node_that_lost_its_lease_can_change_nothing(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    [job_id] = a.submit([SPEC], 0, "root", now=1.0)
    a.start_attempt(job_id, 2.0, "x", "y", "m")
    assert b.finish_attempt(job_id, 1, 3.0, DONE) is None  # not b's attempt
    assert a.renew_leases([job_id]) == {job_id} and b.renew_leases([job_id]) == set()
    expire(a, job_id)
    # expired but not yet taken over: a's writes are refused already
    assert a.renew_leases([job_id]) == set()
    assert a.finish_attempt(job_id, 1, 3.0, DONE) is None
    a.set_pid(job_id, 1, 4242)
    a.record_progress(job_id, 1, 99, 1.0)
    job = a.get(job_id)
    assert (job.state, job.pid, job.bytes_done) == (JobState.RUNNING, None, 0)
    # b takes it over, runs it and completes it
    [requeued] = b.requeue_expired(5.0, "node a stopped renewing")
    assert (requeued.id, b.get(job_id).state) == (job_id, JobState.IDLE)
    assert a.requeue_expired(5.0, "twice") == []  # once only
    again = b.start_attempt(job_id, 6.0, "x", "y", "m")
    assert again is not None and again.attempts == 2
    assert a.finish_attempt(job_id, 1, 7.0, DONE) is None  # a's late result: refused
    assert a.finish_attempt(job_id, 2, 7.0, DONE) is None  # nor b's attempt, from a
    done = b.finish_attempt(job_id, 2, 7.0, DONE)
    assert done is not None and done.state is JobState.COMPLETED
    attempts = b.attempts(job_id)
    assert [(x.number, x.node, x.outcome) for x in attempts] == [
        (1, "a", "interrupted"), (2, "b", "completed")]
    assert attempts[0].ended_at is not None and attempts[0].ended_at <= attempts[1].started_at
    kinds = [e.kind for e in b.events(job_id)]
    assert kinds == ["submit", "execute", "requeue", "execute", "completed"]


def test_a_taken_over_dataset_keeps_its_done_files_and_checks_those_in_doubt(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    files = [DatasetFile(f"ftp://src/d/f{i}", f"ftp://dst/d/f{i}", f"f{i}", 10) for i in range(4)]
    [job_id] = a.submit([SPEC], 0, "root", now=1.0, files={0: files})
    a.start_attempt(job_id, 2.0, "x", "y", "m")
    a.start_files(job_id, 1, [0, 1, 2], "c1")
    assert a.finish_files(job_id, 1, [FileResult(0, FileState.DONE, 10),
                                      FileResult(1, FileState.DONE, 10)])
    expire(a, job_id)
    assert not a.finish_files(job_id, 1, [FileResult(2, FileState.DONE, 10)])  # fenced
    b.requeue_expired(5.0, "node a stopped renewing")
    rows = {f.index: f for f in b.files(job_id)}
    assert [(rows[i].state, rows[i].in_doubt) for i in range(4)] == [
        (FileState.DONE, False), (FileState.DONE, False), (FileState.PENDING, True),
        (FileState.PENDING, False)]
    assert b.get(job_id).files_done == 2  # resumed: two files left to send, one to check


def test_a_removal_on_another_node_ends_the_lease(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    [job_id] = a.submit([SPEC], 0, "root", now=1.0)
    a.start_attempt(job_id, 2.0, "x", "y", "m")
    b.remove(job_id, 3.0, "root")
    assert a.renew_leases([job_id]) == set()
    assert a.finish_attempt(job_id, 1, 4.0, DONE) is None
    assert a.get(job_id).state is JobState.REMOVED


def test_the_host_limit_holds_across_nodes(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    ids = a.submit([SPEC] * 12, 0, "root", now=1.0)
    limit = HostLimit("src", "dst", 3)

    def claim(args: tuple[PostgresStore, int]) -> str:
        store, job_id = args
        try:
            return "started" if store.start_attempt(job_id, 2.0, "x", "y", "m", limit) else "gone"
        except HostLimitReached:
            return "busy"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(claim, [((a, b)[i % 2], job_id) for i, job_id in enumerate(ids)]))
    assert outcomes.count("started") == 3 and outcomes.count("busy") == 9
    assert len(a.list_jobs([JobState.RUNNING])) == 3
    running = a.list_jobs([JobState.RUNNING])
    other = {"a": b, "b": a}
    for job in running:
        owner = a.attempts(job.id)[0].node
        assert owner is not None
        assert other[owner].host_load() != {}  # the other node sees its transfers
    a.finish_attempt(running[0].id, 1, 3.0, DONE) or b.finish_attempt(running[0].id, 1, 3.0, DONE)
    idle = a.list_jobs([JobState.IDLE])[0]
    assert b.start_attempt(idle.id, 4.0, "x", "y", "m", limit) is not None  # a place is free
    with pytest.raises(HostLimitReached, match="host dst runs 3 transfer"):
        b.start_attempt(a.list_jobs([JobState.IDLE])[0].id, 4.0, "x", "y", "m",
                        HostLimit("elsewhere", "dst", 3))


def test_nodes_heartbeat_and_count_their_running_attempts(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    a.heartbeat()
    b.heartbeat()
    [job_id] = a.submit([SPEC], 0, "root", now=1.0)
    b.start_attempt(job_id, 2.0, "x", "y", "m")
    listed = {n.name: n for n in a.nodes()}
    assert sorted(listed) == ["a", "b"]
    assert (listed["a"].running, listed["b"].running) == (0, 1)
    assert all(0 <= n.heartbeat_age_s < 60 for n in listed.values())


def test_other_nodes_hear_of_changes(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    heard: list[tuple[int, ...]] = []
    elsewhere: list[tuple[int, ...]] = []
    got = threading.Event()
    b.add_listener(lambda ids: heard.append(tuple(ids)))
    b.add_elsewhere_listener(lambda ids: (elsewhere.append(tuple(ids)), got.set()))
    ids = a.submit([SPEC] * 3, 0, "root", now=1.0)
    assert got.wait(10), "node b never heard of node a's submission"
    assert elsewhere == heard == [tuple(ids)]
    own = b.submit([SPEC], 0, "root", now=1.0)  # its own: heard once, not as elsewhere
    assert heard[-1] == tuple(own) and elsewhere == [tuple(ids)]


def test_one_node_at_a_time_samples_a_host_pair(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    inside: list[str] = []
    overlap: list[bool] = []

    def sample(store: PostgresStore, src: str, dest: str) -> None:
        with store.pair_lock(src, dest):
            inside.append(store.node)
            overlap.append(len(inside) > 1)
            time.sleep(0.3)  # a sample's worth of holding the pair
            inside.remove(store.node)

    threads = [threading.Thread(target=sample, args=(a, "h1", "h2")),
               threading.Thread(target=sample, args=(b, "h2", "h1"))]  # either direction
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert overlap == [False, False]
    with a.pair_lock("h1", "h2"), b.pair_lock("h1", "h3"):  # another pair: not held up
        pass
