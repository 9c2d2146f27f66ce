"""The batch experiment of the paper's section 5.2 on an emulated wide-area link.

    .venv/bin/python bench/bench_batch.py [--profile wan40] [--jobs 40] [--max-num-jobs 1,10]

N transfer jobs (file sizes drawn from 10, 25, 50, 100, 250 MB with a fixed seed) go from
site a to site b, submitted together to a real stork_server running inside site a, under four
policies run one after another on the same testbed: non-optimized (1 stream), fixed 4
streams, optimized (use_history = "NO": the EOS samples; jobs already queued when an equal
run ends take its answer, EOS_SHARE_WINDOW) and optimized with history (the optimized pass
filled the history). Per policy: makespan (first submission to last completion), total
throughput, mean job throughput (transfer only), mean queue wait, sampling time, and total
throughput as a share of the bottleneck rate. Prints Markdown tables and writes a PNG in the
style of the paper's Figure 5. Needs root, /dev/net/tun and `ip netns`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import StorkServer, make_file, wait_for
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.netns import Testbed, TestbedUnavailable

SIZES_MB = (10, 25, 50, 100, 250)
POLICIES = {
    "non-optimized": 'optimization = "NO";',
    "fixed 4 streams": 'arguments = "-p 4";',
    "optimized": 'optimization = "eos"; use_history = "NO";',
    "optimized + history": 'optimization = "eos"; use_history = "YES";',
}


@dataclass
class Outcome:
    policy: str
    max_num_jobs: int
    jobs: int
    failed: int
    bytes: int
    makespan_s: float
    mean_job_mbps: float
    mean_wait_s: float
    sampling_s: float
    sampling_runs: int
    rate_mbps: float

    @property
    def total_mbps(self) -> float:
        return self.bytes * 8 / 1e6 / self.makespan_s

    @property
    def share(self) -> float:
        return self.total_mbps / self.rate_mbps

    def row(self) -> str:
        return (f"| {self.policy} | {self.max_num_jobs} | {self.jobs - self.failed}/{self.jobs} | "
                f"{self.makespan_s:.1f} s | {self.total_mbps:.1f} | {self.mean_job_mbps:.1f} | "
                f"{self.mean_wait_s:.1f} s | {self.sampling_s:.1f} s ({self.sampling_runs}) | "
                f"{self.share:.2f} |")


HEADER = ("| policy | STORK_MAX_NUM_JOBS | completed | makespan | total Mbit/s | mean job Mbit/s "
          "| mean queue wait | sampling time (sampling runs) | share of link rate |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def run_policy(server: StorkServer, bed: Testbed, files: list[Path], policy: str,
               max_num_jobs: int) -> Outcome:
    dest = bed.site_dir("b")
    for old in dest.glob("job-*"):
        old.unlink()
    ads = "".join(f'[ dap_type = transfer; src_url = "{bed.url("a", f)}"; '
                  f'dest_url = "{bed.url("b", dest / f.name)}"; {POLICIES[policy]} ]\n'
                  for f in files)
    ids = server.submit(ads)

    def finished() -> bool:
        listing = server.api("GET", "/v1/jobs").json()["jobs"]
        states = {j["id"]: j["state"] for j in listing}
        return all(states.get(i) in ("COMPLETED", "FAILED", "REMOVED") for i in ids)

    wait_for(finished, 6 * 3600, 1.0, what=f"{policy} jobs to finish")
    jobs = [server.job(i)["job"] for i in ids]
    done = [j for j in jobs if j["state"] == "COMPLETED"]
    sampled = [j["result"].get("eos_sampling_time_s", 0.0) for j in done  # own runs only
               if not (j["result"].get("eos_from_history", True)
                       or j["result"].get("eos_shared_run", False))]
    return Outcome(
        policy, max_num_jobs, len(jobs), len(jobs) - len(done),
        sum(j["bytes_done"] for j in done),
        max(j["finished_at"] for j in jobs) - min(j["submitted_at"] for j in jobs),
        statistics.mean(j["result"]["achieved_throughput_mbps"] for j in done) if done else 0,
        statistics.mean(j["started_at"] - j["submitted_at"] for j in jobs),
        sum(sampled), sum(1 for s in sampled if s > 0), bed.topology.links[0].rate_mbps)


def plot(outcomes: list[Outcome], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limits = sorted({o.max_num_jobs for o in outcomes})
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    fig, (ax_t, ax_th) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        xs = [i + k * width for i in range(len(limits))]
        by = {o.max_num_jobs: o for o in outcomes if o.policy == policy}
        ax_t.bar(xs, [by[m].makespan_s if m in by else 0 for m in limits], width, label=policy)
        ax_th.bar(xs, [by[m].total_mbps if m in by else 0 for m in limits], width, label=policy)
    rate = outcomes[0].rate_mbps
    ax_th.axhline(rate, color="black", linestyle="--", linewidth=1, label="link rate")
    for ax, label in ((ax_t, "total transfer time (s)"), (ax_th, "total throughput (Mbit/s)")):
        ax.set_xticks([i + width * (len(policies) - 1) / 2 for i in range(len(limits))])
        ax.set_xticklabels([f"STORK_MAX_NUM_JOBS = {m}" for m in limits])
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    ax_th.legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-num-jobs", default="1,10", help="comma-separated runs")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated, from: " + ", ".join(POLICIES))
    parser.add_argument("--sample-size", default="64M", help="EOS_SAMPLE_SIZE")
    parser.add_argument("--share-window", default=None,
                        help="EOS_SHARE_WINDOW (0: every optimized job samples)")
    parser.add_argument("--png", type=Path, default=Path("batch.png"))
    args = parser.parse_args()
    policies = [p.strip() for p in args.policies.split(",")]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; choose from {list(POLICIES)}")
    rng = random.Random(args.seed)
    sizes = [rng.choice(SIZES_MB) for _ in range(args.jobs)]
    [(name, topology)] = topologies(args, ("wan40",))[:1]
    link = topology.links[0]
    outcomes: list[Outcome] = []
    try:
        with Testbed(topology, args.workdir / f"batch-{name}", congestion=args.cc) as bed:
            files = [make_file(bed.site_dir("a") / f"job-{i:03d}-{mb}MB.dat", mb * 10**6, i)
                     for i, mb in enumerate(sizes)]
            print(f"## Batch of {args.jobs} jobs ({sum(sizes)} MB) over {link.label}, "
                  f"{args.cc}, seed {args.seed}\n", flush=True)
            print(HEADER, flush=True)
            for limit in (int(x) for x in args.max_num_jobs.split(",")):
                work = bed.workdir / f"stork-{limit}-{time.monotonic_ns()}"
                knobs = {"STORK_MAX_NUM_JOBS": str(limit), "EOS_SAMPLE_SIZE": args.sample_size}
                if args.share_window is not None:
                    knobs["EOS_SHARE_WINDOW"] = args.share_window
                with StorkServer(work, knobs, prefix=bed.argv("a", [])) as server:
                    for policy in policies:
                        outcome = run_policy(server, bed, files, policy, limit)
                        outcomes.append(outcome)
                        print(outcome.row(), flush=True)
    except TestbedUnavailable as exc:
        print(f"bench_batch: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    print()
    for limit in sorted({o.max_num_jobs for o in outcomes}):
        by = {o.policy: o for o in outcomes if o.max_num_jobs == limit}
        if "non-optimized" in by and "optimized" in by:
            base = by["non-optimized"].total_mbps
            ratios = ", ".join(f"{p} {o.total_mbps / base:.2f}x" for p, o in by.items())
            print(f"STORK_MAX_NUM_JOBS = {limit}: total throughput versus non-optimized: {ratios}")
    plot(outcomes, args.png, f"{args.jobs} jobs over {link.label}")
    print(f"\nfigure: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
