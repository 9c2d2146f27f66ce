"""The task matrix: the paper's worked example, relations, validation and invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stork.errors import SchedError
from stork.sched import Task, TaskMatrix, conf, cor, penal

A, B = 0.5, 0.8

PAPER_T = [
    [(1, 2, 1), (1, 2, 2), (1, 2, 1), (1, 2, 1)],
    [(3, 4, 1), (3, 4, 1), (3, 4, 1), (3, 4, 1)],
    [(1, 3, 1), (1, 3, 2), (1, 3, 2), (1, 3, 1)],
    [(5, 6, 1), (5, 6, 2), (5, 6, 1), (5, 6, 2)],
]


def paper_matrix() -> TaskMatrix:
    m = TaskMatrix(A, B)
    # column by column, as tasks would arrive: the rows come out as printed
    for j in range(4):
        for row in PAPER_T:
            m.add(Task(*row[j]))
    assert [[t.triple for t in r] for r in m.rows()] == PAPER_T
    return m


def triples(m: TaskMatrix) -> list[list[tuple]]:
    return [[t.triple for t in row] for row in m.rows()]


def run_round(m: TaskMatrix, chosen: list[Task]) -> dict[tuple, int]:
    return {t.triple: len(m.complete(t)) for t in chosen}


def test_worked_example_algorithm_4() -> None:
    m = paper_matrix()
    chosen = m.select(3, 2 * A, algorithm=4)
    assert [t.triple for t in chosen] == [(1, 2, 1), (3, 4, 1), (1, 3, 1)]
    assert m.gain() == 3.0  # (3 + (2 + 3 + 1)) / 3
    served = run_round(m, chosen)
    assert served == {(1, 2, 1): 2, (3, 4, 1): 3, (1, 3, 1): 1}
    assert triples(m) == [
        [(1, 2, 2)],
        [(1, 3, 2), (1, 3, 2)],
        [(5, 6, 1), (5, 6, 2), (5, 6, 1), (5, 6, 2)],
    ]


def test_worked_example_algorithm_5() -> None:
    m = paper_matrix()
    chosen = m.select(3, 2 * A, algorithm=5)
    assert [t.triple for t in chosen] == [(1, 2, 1), (3, 4, 1), (5, 6, 1)]
    assert conf(chosen, A, B) == 0.0
    assert m.gain() == 3.0
    run_round(m, chosen)
    assert triples(m) == [
        [(1, 2, 2)],
        [(1, 3, 1), (1, 3, 2), (1, 3, 2), (1, 3, 1)],
        [(5, 6, 2), (5, 6, 2)],
    ]


def test_relations_and_scores() -> None:
    t = Task(1, 2, "x")
    assert cor(t, Task(1, 2, "x"), A, B) == 1.0
    assert cor(t, Task(2, 1, "x"), A, B) == 1.0  # swapped pair, same arguments: equal
    assert cor(t, Task(2, 1, "y"), A, B) == B  # approximate
    assert cor(t, Task(1, 3, "x"), A, B) == A  # similar: one host in common
    assert cor(t, Task(3, 1, "y"), A, B) == A
    assert cor(t, Task(3, 4, "x"), A, B) == 0.0  # same args, other hosts: unrelated
    tasks = [Task("h1", "h2", 1), Task("h1", "h3", 2), Task("h2", "h4", 3)]
    assert penal("h1", tasks, A) == penal("h2", tasks, A) == 2 * A
    assert penal("h3", tasks, A) == penal("h4", tasks, A) == A
    assert conf(tasks, A, B) == 2 * A  # (h1,h2)~(h1,h3) and (h1,h2)~(h2,h4)


@pytest.mark.parametrize("alpha, beta, limit, message", [
    (-0.1, 0.5, 1, "0 <= alpha <= beta <= 1"),
    (0.6, 0.5, 1, "0 <= alpha <= beta <= 1"),
    (0.2, 1.5, 1, "0 <= alpha <= beta <= 1"),
    (0.2, 0.5, -1, "penalty limit"),
    (float("nan"), 0.5, 1, "alpha must be a number"),
])
def test_parameters_are_validated(alpha: float, beta: float, limit: float, message: str) -> None:
    with pytest.raises(SchedError, match=message):
        TaskMatrix(alpha, beta).select(3, limit)


def test_misuse_is_refused() -> None:
    m = TaskMatrix(A, B)
    t = Task(1, 2)
    m.add(t)
    with pytest.raises(SchedError, match="not running"):
        m.complete(t)
    with pytest.raises(SchedError, match="algorithm must be 4 or 5"):
        m.select(1, 1, algorithm=6)


def test_running_tasks_count_toward_n_and_penalties() -> None:
    m = TaskMatrix(0.5, 0.5)
    for i in range(6):
        m.add(Task("hub", f"site{i}"))
    first = m.select(10, 2.0)  # alpha 0.5, limit 2: "hub" may carry 4 tasks at once
    assert len(first) == 4 and m.penalties()["hub"] == 2.0
    assert m.select(10, 2.0) == []  # hub is at the limit
    m.complete(first[0])
    second = m.select(10, 2.0)
    assert len(second) == 1 and m.penalties()["hub"] == 2.0
    assert m.select(4, 10.0) == []  # n = 4 tasks already run
    approx = TaskMatrix(A, B)
    a1, a2 = Task(1, 2, "-b 1M"), Task(1, 2, "-b 2M")
    approx.add(a1)
    approx.add(a2)
    assert approx.select(5, 10) == [a1]  # the approximate task waits for the first one
    assert approx.select(5, 10) == []
    assert approx.complete(a1) == []
    assert approx.select(5, 10) == [a2]


def test_add_is_indexed_by_the_unordered_pair() -> None:
    m = TaskMatrix(A, B)
    m.add(Task("a", "b", 1))
    m.add(Task("b", "a", 2))
    m.add(Task("a", "c", 1))
    assert triples(m) == [[("a", "b", 1), ("b", "a", 2)], [("a", "c", 1)]]


hosts = st.integers(0, 7)
task_triples = st.lists(st.tuples(hosts, hosts, st.integers(0, 2)).filter(lambda t: t[0] != t[1]),
                        max_size=40)


@settings(max_examples=300, deadline=None)
@given(task_triples, st.integers(1, 8), st.sampled_from([0.0, 0.25, 0.5, 1.0]),
       st.integers(0, 4), st.sampled_from([4, 5]), st.integers(0, 3))
def test_invariants(items: list[tuple[int, int, int]], n: int, alpha: float, limit_steps: int,
                    algorithm: int, rounds: int) -> None:
    beta = max(alpha, 0.75)
    limit = limit_steps * 0.5
    m = TaskMatrix(alpha, beta)
    for s, d, a in items:
        m.add(Task(s, d, a))
    for _ in range(rounds + 1):
        heads = [row[0] for row in m.rows()]
        for i, h1 in enumerate(heads):
            for h2 in heads[i + 1:]:
                assert h1.pair != h2.pair  # one row per host pair
                # so heads are at most similar (a shared host), never approximate or equal
                assert cor(h1, h2, alpha, beta) == (alpha if h1.pair & h2.pair else 0.0)
        for row in m.rows():
            for i, t1 in enumerate(row):
                for t2 in row[i + 1:]:
                    assert cor(t1, t2, alpha, beta) in (1.0, beta)
        before = m.running()
        chosen = m.select(n, limit, algorithm)
        running = m.running()
        assert len(running) <= max(n, len(before))
        for host in {h for t in running for h in t.pair}:
            if any(host in t.pair for t in chosen):
                assert penal(host, running, alpha) <= limit + 1e-9
        if algorithm == 5 and not before:
            # the selection starts with a mutually orthogonal set, maximal unless cut short
            prefix: list[Task] = []
            for t in chosen:
                if all(cor(t, p, alpha, beta) == 0.0 for p in prefix):
                    prefix.append(t)
                else:
                    break
            assert conf(prefix, alpha, beta) == 0.0
            if len(prefix) < len(chosen) or len(chosen) < n:
                for head in heads:
                    if head not in prefix and all(not (head.pair & p.pair) for p in prefix):
                        # left out only when one of its hosts would pass the limit
                        assert any(penal(h, prefix, alpha) + alpha > limit + 1e-9
                                   for h in head.pair) or len(chosen) >= n
        assert m.gain() >= 1.0
        for t in running[: len(running) // 2 + 1]:
            served = m.complete(t)
            assert all(s.triple in (t.triple, (t.dest_host, t.src_host, t.args))
                       for s in served)


def test_transfer_matrix_runs_same_pair_tasks_together_within_host_limits() -> None:
    m = TaskMatrix(0.5, 0.8, exclusive_pairs=False)
    jobs = [Task("a", "b", f"job {i}", i) for i in range(6)] + [Task("a", "c", "job 6", 6)]
    for t in jobs:
        m.add(t)
    chosen = m.select(10, 2.0, algorithm=5)
    # same-pair transfers run together, but host a carries at most 4 (4 x 0.5 = 2)
    assert [t.id for t in chosen] == [0, 1, 2, 3]
    assert m.penalties() == {"a": 2.0, "b": 2.0}
    assert m.wait_reason(jobs[6], 10, 2.0) == "host a at penalty limit"
    assert m.complete(jobs[0]) == []  # transfers never share results
    assert [t.id for t in m.select(10, 2.0)] == [4]
