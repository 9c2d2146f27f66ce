"""EOS benchmarks (not tests): model cost, replay against measured curves, sampling overhead.

    .venv/bin/python bench/bench_eos.py [--skip-transfer]

The replay reads ../shared/data/transfer-logs/parallelism-sweeps/{loni,didclab}.csv (rows with
Note == "chris-parallelism", pivoted per file) and answers each sample from the measured
curve instead of transferring. Those tables are not part of the repository.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.eos.models import estimate
from stork.eos.sampling import Measure, Sample, decide, doubling, guided

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "transfer-logs" / "parallelism-sweeps"
LEVELS = (1, 2, 4, 8, 16, 32, 64)
TOLERANCE = 0.03
# a strategy replayed on a measured curve: (streams chosen, samples taken)
Choose = Callable[[dict[int, float]], tuple[int, int]]


def load_curves(name: str) -> list[dict[int, float]]:
    curves: dict[tuple[str, ...], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(DATA / f"{name}.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["Note"] != "chris-parallelism":
                continue
            key = (row["FileSize"], row["FileNumbers"], row["Source"], row["Destination"])
            curves[key][int(row["P"])].append(float(row["Throughput"]))
    return [{p: statistics.mean(v) for p, v in c.items()} for c in curves.values()]


def model_cost() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for count in (3, 4, 6):
        times = []
        for _ in range(300):
            n = np.array([1, 4, 16, 32, 8, 2][:count], dtype=float)
            th = 100 * n / np.sqrt(1 + 0.01 * n * n) * (1 + rng.normal(0, 0.02, count))
            start = time.perf_counter()
            estimate(n, th, 64)
            times.append(time.perf_counter() - start)
        rows.append((count, statistics.median(times) * 1000, np.percentile(times, 95) * 1000))
    print("\n## Model fit plus optimum per call (both models, guards, choice over 1..64)\n")
    print("| samples | median | p95 | target |")
    print("| ---: | ---: | ---: | --- |")
    for count, median, p95 in rows:
        print(f"| {count} | {median:.2f} ms | {p95:.2f} ms | median < 2 ms |")


def replay(name: str, curves: list[dict[int, float]]) -> None:
    def judge(choose: Choose) -> tuple[float, float, int]:
        shares, counts, excess = [], [], 0
        for curve in curves:
            streams, samples = choose(curve)
            best = max(curve.values())
            needed = min(p for p in curve if curve[p] >= 0.97 * best)
            shares.append(curve[streams] / best)
            counts.append(samples)
            excess += streams > needed
        return statistics.mean(shares), statistics.mean(counts), excess

    def strategy(sample: Callable[[Measure], list[Sample]]) -> Choose:
        def choose(curve: dict[int, float]) -> tuple[int, int]:
            samples = sample(lambda n: Sample(n, curve[n]))
            return decide(samples, 64, TOLERANCE, LEVELS).streams, len(samples)
        return choose

    rows = [("guided (this project: 1, 4, 16, then the fitted optimum)",
             judge(strategy(lambda m: guided(m, 64, TOLERANCE, 4, LEVELS))))]
    for threshold in (0.02, 0.05, 0.1):
        rows.append((f"Algorithm 2 doubling, slope threshold {threshold}",
                     judge(strategy(lambda m, t=threshold: doubling(m, 64, t)))))
    for fixed in (1, 4, 8, 16):
        rows.append((f"fixed {fixed} stream{'s' if fixed > 1 else ''}",
                     judge(lambda c, f=fixed: (f, 0))))
    print(f"\n## Replay on {name}.csv ({len(curves)} measured curves)\n")
    print("| method | mean share of best | mean samples | curves with more streams than "
          "needed for 97% |")
    print("| --- | ---: | ---: | ---: |")
    for label, (share, samples, excess) in rows:
        print(f"| {label} | {share:.4f} | {samples:.2f} | {excess} |")


def sampling_overhead() -> None:
    from tests.support import GridFtpServer, StorkServer, make_file, wait_for

    with tempfile.TemporaryDirectory(prefix="stork-bench-eos-") as tmp:
        work = Path(tmp)
        src = make_file(work / "1G.dat", 1024 ** 3, seed=5)
        with GridFtpServer(work / "gridftp") as gridftp:
            server = StorkServer(work / "stork", {"EOS_SAMPLE_SIZE": "64M"}).start()
            try:
                ids = []
                for policy, extra in (("default (1 stream)", 'optimization = "NO"'),
                                      ("fixed 4 streams", 'arguments = "-p 4"'),
                                      ("optimized (sampling)", 'optimization = "YES"')):
                    dest = work / f"dest-{len(ids)}.dat"
                    [job_id] = server.submit(f"""[ dap_type = transfer; {extra};
                        src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")
                    wait_for(lambda j=job_id: server.job(j)["job"]["state"] in
                             ("COMPLETED", "FAILED"), 900, what=policy)
                    ids.append((policy, job_id))
                    dest.unlink()
                print("\n## Sampling overhead: 1 GiB over loopback GridFTP (one job at a time)\n")
                print("| policy | streams | sampling time | transfer time | total | achieved |")
                print("| --- | ---: | ---: | ---: | ---: | ---: |")
                base = None
                for policy, job_id in ids:
                    r = server.job(job_id)["job"]["result"]
                    sampling = r.get("eos_sampling_time_s", 0.0)
                    total = sampling + r["transfer_time_s"]
                    base = base or r["transfer_time_s"]
                    print(f"| {policy} | {r['streams_used']} | {sampling:.2f} s | "
                          f"{r['transfer_time_s']:.2f} s | {total:.2f} s | "
                          f"{r['achieved_throughput_mbps']:.0f} Mbit/s |")
                print("\nOn loopback every stream count moves data at memory speed, so sampling "
                      "cannot save time here; bench/bench_wan_eos.py and bench/bench_batch.py "
                      "measure the gain on emulated WAN links.")
            finally:
                server.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--skip-transfer", action="store_true", help="skip the 1 GiB GridFTP run")
    args = p.parse_args()
    model_cost()
    if DATA.exists():
        for name in ("loni", "didclab"):
            replay(name, load_curves(name))
    else:
        print(f"\n(replay skipped: {DATA} not found)")
    if not args.skip_transfer:
        sampling_overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
