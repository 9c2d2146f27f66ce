"""Admission (stork.server.admission) in memory: the transfer matrix, due times, resync and
wait reasons, without a store or a daemon."""

from __future__ import annotations

import dataclasses
import threading
import time

from stork import config
from stork.sched import Task
from stork.server.admission import RESYNC_S, SLOTS_FULL, WAITING, Admission, View, reason_for


def admission(**changes: object) -> Admission:
    base = config.load(None, env={"HOME": "/nonexistent"})
    return Admission(dataclasses.replace(base, **changes))


def url(host: str, name: str = "f") -> str:
    return f"ftp://{host}:2811/{name}"


def test_selects_within_slots_and_host_penalties() -> None:
    # alpha 0.5, limit 1: two transfers per host at most
    a = admission(max_num_jobs=10, eos_penalty_limit=1.0)
    a.admit_new([(i, url("a"), url(f"d{i}")) for i in range(1, 5)])
    assert a.select() == [1, 2]
    assert a.wait_reason(3) == a.wait_reason(4) == "host a at penalty limit"
    assert a.wait_reason(1) is None  # selected: starting
    a.release(1)
    assert a.select() == [3]
    assert len(a) == 3


def test_slots_full() -> None:
    a = admission(max_num_jobs=1)
    a.admit_new([(1, url("a"), url("b")), (2, url("c"), url("d"))])
    assert a.select() == [1]
    assert a.wait_reason(2) == SLOTS_FULL
    assert a.select() == []  # still full
    a.release(1)
    assert a.wait_reason(2) == WAITING
    assert a.select() == [2]


def test_due_times_and_resync() -> None:
    a = admission()
    a.enqueue([5], due=100.0)
    a.enqueue([6], due=0.0)
    assert a.wait_reason(5) == WAITING  # known, not yet in the matrix
    assert a.pop_due(50.0) == [6]
    assert a.pop_due(50.0) == []
    assert a.pop_due(100.0) == [5]
    # the store's view: already known jobs are not taken twice
    a.add(6, url("a"), url("b"))
    assert a.resync_due(1000.0) and not a.resync_due(1000.0 + RESYNC_S / 2)
    a.note_waiting([(6, 0.0), (7, 3.0)])
    assert a.pop_due(10.0) == [7]
    assert a.resync_due(1000.0 + RESYNC_S)


def test_enqueue_ignores_jobs_in_the_matrix_and_release_forgets_due() -> None:
    a = admission()
    a.admit_new([(1, url("a"), url("b"))])
    a.enqueue([1], due=0.0)
    assert a.pop_due(1.0) == []
    a.enqueue([2], due=5.0)
    a.release(2)  # a removed job that was only waiting for its time
    assert a.pop_due(10.0) == []


def test_release_of_a_waiting_task_discards_it() -> None:
    a = admission(max_num_jobs=1)
    a.admit_new([(1, url("a"), url("b")), (2, url("a"), url("c"))])
    assert a.select() == [1]
    a.release(2)  # removed while waiting
    a.release(1)
    assert len(a) == 0 and a.select() == []
    a.release(1)  # twice is harmless


def test_snapshot_names_the_limits() -> None:
    a = admission(max_num_jobs=3, eos_penalty_limit=1.5)
    a.admit_new([(1, url("a"), url("b"))])
    a.select()
    snap = a.snapshot()
    assert snap["n"] == 3 and snap["penalty_limit"] == 1.5 and snap["selection"] == 5
    assert snap["penalties"] == {"a": 0.5, "b": 0.5}


def test_reason_for_is_pure() -> None:
    task = Task("a", "b", "job 9", 9)
    view = View({"a": 2.0}, frozenset({1, 2}))
    assert reason_for(None, 9, view, 0.5, 10, 2.0) == WAITING
    assert reason_for(task, 9, view, 0.5, 10, 2.0) == "host a at penalty limit"
    assert reason_for(task, 9, View({}, frozenset({1, 2})), 0.5, 2, 2.0) == SLOTS_FULL
    assert reason_for(task, 9, View({}, frozenset({9})), 0.5, 1, 2.0) is None


def test_wait_reasons_do_not_wait_for_the_lock() -> None:
    """A listing asks for every job's reason; a long hold of the admission lock (a tick)
    must not stall it."""
    a = admission(max_num_jobs=1)
    a.admit_new([(i, url("a"), url(f"d{i}")) for i in range(1, 1001)])
    a.select()
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with a._lock:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        start = time.monotonic()
        reasons = [a.wait_reason(i) for i in range(1, 1001)]
        assert time.monotonic() - start < 1.0
        assert reasons[0] is None and set(reasons[1:]) == {SLOTS_FULL}
    finally:
        release.set()
        holder.join()
