"""Task matrix benchmarks (not tests): add rate, select time, gain on synthetic workloads.

    .venv/bin/python bench/bench_sched.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.sched import Task, TaskMatrix

ALPHA, BETA = 0.5, 0.8


def workload(count: int, hosts: int, pairs: int, default_share: float,
             rng: random.Random) -> list[Task]:
    """`count` tasks over `pairs` host pairs among `hosts` hosts; `default_share` of them keep
    the default arguments, the others pick one of 8 custom argument sets."""
    pool = []
    while len(pool) < pairs:
        a, b = rng.randrange(hosts), rng.randrange(hosts)
        if a != b:
            pool.append((f"h{a}", f"h{b}"))
    tasks = []
    for i in range(count):
        src, dest = rng.choice(pool)
        args = "" if rng.random() < default_share else f"-b {rng.randrange(8) + 1}M"
        tasks.append(Task(src, dest, args, i))
    return tasks


def main() -> int:
    rng = random.Random(42)
    tasks = workload(100_000, 1_000, 20_000, 0.9, rng)
    m = TaskMatrix(ALPHA, BETA)
    start = time.perf_counter()
    for t in tasks:
        m.add(t)
    add_rate = len(tasks) / (time.perf_counter() - start)

    select_ms: dict[int, float] = {}
    for algorithm in (5, 4):
        times = []
        for _ in range(20):
            m = TaskMatrix(ALPHA, BETA)
            for t in workload(10_000, 1_000, 10_000, 0.9, rng):
                m.add(t)
            start = time.perf_counter()
            m.select(100, 2 * ALPHA, algorithm=algorithm)
            times.append(time.perf_counter() - start)
        select_ms[algorithm] = statistics.median(times) * 1000

    print("\n## Task matrix speed\n")
    print("| measurement | figure | target |")
    print("| --- | ---: | --- |")
    print(f"| add, 100,000 tasks over 1,000 hosts | {add_rate:,.0f} tasks/s | >= 100,000/s |")
    print(f"| select n = 100 (Algorithm 5), 10,000 queued tasks, 1,000 hosts, median of 20 | "
          f"{select_ms[5]:.2f} ms | < 10 ms |")
    print(f"| select n = 100 (Algorithm 4), same | {select_ms[4]:.2f} ms | - |")

    print("\n## Gain (equation 24) of one selection round, n = 20, limit 2 alpha\n")
    print("| workload | tasks | rows | gain | confusion of the selection (Alg. 4 / 5) |")
    print("| --- | ---: | ---: | ---: | --- |")
    from stork.sched import conf

    for label, share in (("case 1: 90% keep the default arguments", 0.9),
                         ("case 2: 10% keep the default arguments", 0.1)):
        tasks = workload(2_000, 50, 100, share, random.Random(7))
        gains, confs = [], []
        for algorithm in (4, 5):
            m = TaskMatrix(ALPHA, BETA)
            for t in tasks:
                m.add(t)
            chosen = m.select(20, 2 * ALPHA, algorithm)
            gains.append(m.gain())
            confs.append(conf(chosen, ALPHA, BETA))
        rows = len(m.rows())
        print(f"| {label} | {len(tasks)} | {rows} | {gains[1]:.2f} | "
              f"{confs[0]:.1f} / {confs[1]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
