"""EOS accuracy on emulated wide-area paths (needs root, /dev/net/tun and `ip netns`).

    .venv/bin/python bench/bench_wan_eos.py [--profile wan40 ...] [--size 100M] [--repeat 3]
    .venv/bin/python bench/bench_wan_eos.py --e2e [--sizes 16M,64M,256M,1G] [--e2e-repeat 1]

For each link profile: build two sites, measure the ground-truth curve (third-party GridFTP,
1..32 streams, median of --repeat), then submit an estimation job to a real stork_server
running inside site a and judge its answer against the curve: the chosen stream count's
throughput as a share of the best, predicted versus measured throughput, samples and
sampling time. Targets: share >= 0.9 on every profile, prediction within 15% of measured.

With --e2e (issue 13, point 6): real transfer jobs, timed from submission
to completion with their sampling, optimized against the default stream count and the best
fixed P of a stream sweep, for each file size; targets: optimized never more than 5% slower
than the default, and within 10% of the best fixed P from 256 MiB up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import classad2

from stork.transfer.options import parse_size
from tests.support import StorkServer, make_file, wait_for
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.measure import gridftp_mbps, medians, sweep
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import PROFILES, Link

STREAMS = (1, 2, 4, 8, 16, 32)


@dataclass
class Outcome:
    link: Link
    curve: dict[int, float]
    chosen: int
    measured: float
    predicted: float
    samples: list[tuple[int, float]]
    sampling_s: float
    model: str

    @property
    def share(self) -> float:
        return self.measured / max(self.curve.values())

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


def estimate(bed: Testbed, source: Path, knobs: dict[str, str]) -> classad2.ClassAd:
    work = bed.workdir / "stork"
    with StorkServer(work, knobs, prefix=bed.argv("a", [])) as server:
        job = work / "estimate.dap"
        job.write_text(f'[ dap_type = estimation; src_url = "{bed.url("a", source)}"; '
                       f'dest_url = "{bed.url("b", bed.site_dir("b") / "estimate.dat")}"; '
                       f'size = {source.stat().st_size}; ]')
        out = server.cli("stork_submit", str(job), check=True, timeout=1800).stdout
    return classad2.ClassAd(out[out.index("["):out.rindex("]") + 1])


def ground_truth(name: str, bed: Testbed, source: Path, repeat: int,
                 cache: Path | None) -> dict[int, float]:
    """The sweep's median curve, from the cache file when it holds this profile."""
    key = f"{name} {bed.topology.links[0].label} {source.stat().st_size} x{repeat}"
    saved = json.loads(cache.read_text()) if cache is not None and cache.exists() else {}
    if key in saved:
        return {int(n): float(v) for n, v in saved[key].items()}
    curve = medians(sweep(bed, "a", "b", source, STREAMS, repeat))
    if cache is not None:
        cache.write_text(json.dumps({**saved, key: curve}, indent=1))
    return curve


def run_profile(name: str, bed: Testbed, size: int, repeat: int,
                knobs: dict[str, str], sweeps: Path | None) -> Outcome:
    link = bed.topology.links[0]
    source = make_file(bed.site_dir("a") / "data.dat", size)
    curve = ground_truth(name, bed, source, repeat, sweeps)
    ad = estimate(bed, source, knobs)
    chosen = int(ad["optimal_streams"])
    if chosen in curve:
        measured = curve[chosen]
    else:
        measured = statistics.median(gridftp_mbps(bed, "a", "b", source, chosen, size)
                                     for _ in range(repeat))
    samples = [(int(s["streams"]), float(s["mbps"])) for s in ad["samples"]]
    outcome = Outcome(link, curve, chosen, measured, float(ad["estimated_throughput_mbps"]),
                      samples, float(ad["sampling_time_s"]), str(ad["model"]))
    cells = ", ".join(f"{n}: {v:.1f}" for n, v in curve.items())
    shown = ", ".join(f"{n}: {v:.1f}" for n, v in samples)
    print(f"<!-- {name}: sweep {{{cells}}}; samples {{{shown}}} -->", flush=True)
    return outcome


# --- issue 13, point 6: whole transfer jobs, from submission to completion ----------------

E2E_SIZES = "16M,64M,256M,1G"
E2E_CASES = ("default", "best", "optimized")
GIB = 1 << 30


@dataclass
class JobTime:
    """One case at one size on one profile: a time per repeat (None: still running at the
    cap, so slower than `cap_s`), and what the job ran with."""

    case: str
    runs: list[float | None] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    cap_s: float = 0.0
    skipped: bool = False

    @property
    def seconds(self) -> float | None:
        """The median time; None when a run was stopped or nothing was measured."""
        if self.skipped or not self.runs or any(r is None for r in self.runs):
            return None
        return statistics.median(r for r in self.runs if r is not None)

    @property
    def at_least(self) -> float | None:
        """For a stopped case, the cap it was slower than."""
        return self.cap_s if self.runs and any(r is None for r in self.runs) else None

    def text(self) -> str:
        if self.skipped or not self.runs:
            return "not measured"
        shown = ", ".join(f"> {self.cap_s:.0f}" if r is None else f"{r:.1f}" for r in self.runs)
        middle = f"{self.seconds:.1f} s" if self.seconds is not None else f"> {self.cap_s:.0f} s"
        many = f" [{shown}]" if len(self.runs) > 1 else ""
        return f"{middle}{many} ({'; '.join(dict.fromkeys(self.used))})"


def add_e2e_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--e2e: whole transfer jobs (issue 13, point 6)")
    group.add_argument("--e2e", action="store_true",
                       help="time real transfer jobs: optimized, default and best fixed P")
    group.add_argument("--sizes", default=E2E_SIZES, help=f"file sizes ({E2E_SIZES})")
    group.add_argument("--e2e-repeat", type=int, default=1, help="jobs per case and size (1)")
    group.add_argument("--sweep-size", default="256M",
                       help="file of the stream sweep that picks the best fixed P (256M)")
    group.add_argument("--sweep-streams", default="4,8,16,32",
                       help="stream counts of that sweep, one run each (4,8,16,32)")
    group.add_argument("--budget", default="0.1",
                       help="EOS_SAMPLING_BUDGET, also for the estimation jobs (0.1; 0: sample "
                            "whatever the size)")
    group.add_argument("--cap", type=float, default=0.0,
                       help="seconds after which a job is removed and recorded as slower "
                            "(0: no cap)")
    group.add_argument("--skip", action="append", default=[], metavar="CASE:SIZE",
                       help="a case not measured at a size, e.g. default:1G (repeatable)")
    group.add_argument("--out", type=Path, help="JSON lines: every job's record")


def transfer_job(bed: Testbed, source: Path, knobs: dict[str, str], extra: str,
                 cap_s: float) -> tuple[float | None, dict[str, Any]]:
    """One transfer job from site a to site b, submitted to a fresh daemon in site a (no
    history); (seconds from submission to completion or None when stopped at the cap, the
    job's summary)."""
    dest = bed.site_dir("b") / "e2e.dat"
    dest.unlink(missing_ok=True)
    work = bed.workdir / f"stork-{time.monotonic_ns()}"
    with StorkServer(work, knobs, prefix=bed.argv("a", [])) as server:
        [job_id] = server.submit(f'[ dap_type = transfer; src_url = "{bed.url("a", source)}"; '
                                 f'dest_url = "{bed.url("b", dest)}"; {extra}]\n')

        def ended() -> dict[str, Any] | None:
            job: dict[str, Any] = server.job(job_id)["job"]
            return job if job["state"] in ("COMPLETED", "FAILED", "REMOVED") else None

        try:
            job = wait_for(ended, cap_s or 4 * 3600, 0.2, what="the transfer job")
        except TimeoutError:
            server.cli("stork_rm", str(job_id))
            job = wait_for(ended, 120, 0.2, what="the removed job to stop")
            dest.unlink(missing_ok=True)
            return None, job
    seconds = float(job["finished_at"]) - float(job["submitted_at"])
    whole = dest.exists() and dest.stat().st_size == source.stat().st_size
    dest.unlink(missing_ok=True)
    if job["state"] != "COMPLETED" or not whole:
        raise RuntimeError(f"transfer job {job['state']} (destination whole: {whole}): "
                           f"{job.get('last_error')}")
    return seconds, job


def best_fixed(bed: Testbed, size: int, streams: tuple[int, ...]) -> tuple[int, dict[int, float]]:
    """The stream count of the sweep's fastest run of a `size` file (one run each)."""
    source = make_file(bed.site_dir("a") / "sweep.dat", size)
    curve = medians(sweep(bed, "a", "b", source, streams, 1))
    source.unlink()
    return max(curve, key=lambda n: curve[n]), curve


def used_text(case: str, job: dict[str, Any], fixed: int) -> str:
    if case == "default":
        return "1 stream (STORK_DEFAULT_STREAMS)"
    if case == "best":
        return f"-p {fixed}"
    result = job.get("result") or {}
    return (f"P {result.get('optimized_streams', '?')}, {result.get('optimization_source', '?')}"
            f", sampled {float(result.get('eos_sampling_time_s') or 0):.1f} s")


def e2e_profile(name: str, bed: Testbed, sizes: list[tuple[str, int]],
                args: argparse.Namespace) -> tuple[dict[tuple[str, str], JobTime], int, str]:
    link = bed.topology.links[0]
    knobs = {"EOS_SAMPLING_BUDGET": args.budget, "STORK_LINK_MBPS": f"{link.rate_mbps:g}",
             "EOS_SAMPLING": args.sampling}
    streams = tuple(int(n) for n in args.sweep_streams.split(","))
    fixed, curve = best_fixed(bed, parse_size(args.sweep_size), streams)
    swept = ", ".join(f"{n}: {v:.1f}" for n, v in curve.items())
    print(f"<!-- {name}: sweep of {args.sweep_size} (Mbit/s) {{{swept}}}: best fixed P {fixed} "
          f"-->", flush=True)
    extra = {"default": "", "best": f'arguments = "-p {fixed}"; ',
             "optimized": 'optimization = "eos"; '}
    times = {(label, case): JobTime(case, cap_s=args.cap, skipped=f"{case}:{label}" in args.skip)
             for label, _ in sizes for case in E2E_CASES}
    for label, size in sizes:
        source = make_file(bed.site_dir("a") / f"e2e-{label}.dat", size)
        for _ in range(args.e2e_repeat):
            for case in E2E_CASES:
                cell = times[(label, case)]
                if cell.skipped:
                    continue
                seconds, job = transfer_job(bed, source, knobs, extra[case], args.cap)
                cell.runs.append(seconds)
                cell.used.append(used_text(case, job, fixed))
                shown = "stopped at the cap" if seconds is None else f"{seconds:.1f} s"
                print(f"<!-- {name} {label} {case}: {shown}; {cell.used[-1]} "
                      f"({time.strftime('%H:%M:%S')}) -->", flush=True)
                if args.out:
                    with open(args.out, "a") as out:
                        out.write(json.dumps({"profile": name, "size": label, "case": case,
                                              "seconds": seconds, "fixed": fixed,
                                              "result": job.get("result")}) + "\n")
        source.unlink()
    return times, fixed, swept


def ratio(a: JobTime, b: JobTime) -> tuple[str, float | None, str]:
    """a / b as text, its value when both were measured, and which way a bound points."""
    if a.seconds is not None and b.seconds is not None:
        r = a.seconds / b.seconds
        return f"{r:.2f}", r, ""
    if a.at_least is not None and b.seconds is not None:
        r = a.at_least / b.seconds
        return f">= {r:.2f}", r, ">="
    if a.seconds is not None and b.at_least is not None:
        r = a.seconds / b.at_least
        return f"<= {r:.2f}", r, "<="
    if a.at_least is not None and b.at_least is not None:
        return "-", 0.0, "both stopped"
    return "-", None, ""


def verdict(value: float | None, way: str, limit: float) -> str:
    if value is None:
        return "not measured"
    if way == "both stopped":
        return "undecided (both stopped)"
    if way == ">=":
        return "MISS" if value > limit else "undecided"
    if way == "<=":
        return "PASS" if value <= limit else "undecided"
    return "PASS" if value <= limit else "MISS"


def print_e2e(results: list[tuple[str, Link, dict[tuple[str, str], JobTime], int, str]],
              sizes: list[tuple[str, int]], args: argparse.Namespace, wall_s: float) -> None:
    cap = f"a job still running after {args.cap:g} s was removed" if args.cap else "no cap"
    print(f"\n## Transfer jobs from submission to completion ({args.cc}; EOS_SAMPLING_BUDGET "
          f"{args.budget}, STORK_LINK_MBPS = the link's rate, {args.sampling} sampling; a "
          f"fresh daemon per job; {args.e2e_repeat} job(s) per cell, median; {cap})\n")
    print("| link | size | default | best fixed P | optimized | opt/default | opt/best | "
          "<= 1.05 x default | <= 1.10 x best (256 MiB up) |")
    print("| --- | --- | --- | --- | --- | ---: | ---: | --- | --- |")
    verdicts: list[str] = []
    for name, link, times, _, _ in results:
        for label, size in sizes:
            default, best, opt = (times[(label, c)] for c in E2E_CASES)
            to_default, value_d, way_d = ratio(opt, default)
            to_best, value_b, way_b = ratio(opt, best)
            first = verdict(value_d, way_d, 1.05)
            second = verdict(value_b, way_b, 1.10) if size >= 256 << 20 else "-"
            verdicts += [first] + ([second] if second != "-" else [])
            print(f"| {name} ({link.rtt_ms:g} ms, {link.loss * 100:g}%, {link.rate_mbps:g} "
                  f"Mbit/s) | {label} | {default.text()} | {best.text()} | {opt.text()} | "
                  f"{to_default} | {to_best} | {first} | {second} |")
    print("\nBest fixed P from the sweep:")
    for name, _, _, fixed, swept in results:
        print(f"- {name}: P {fixed} ({args.sweep_size} file, one run each, Mbit/s: {swept})")
    counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
    print(f"\nTargets: {', '.join(f'{n} {v}' for v, n in counts.items())}; "
          f"wall time {wall_s:.0f} s", flush=True)


def run_e2e(args: argparse.Namespace) -> int:
    """Each profile's table is printed when it ends (with the ones before it)."""
    sizes = [(s.strip(), parse_size(s.strip())) for s in args.sizes.split(",")]
    started = time.monotonic()
    results: list[tuple[str, Link, dict[tuple[str, str], JobTime], int, str]] = []
    try:
        for name, topology in topologies(args, ("wan40", "wan80", "lossy20")):
            with Testbed(topology, args.workdir / f"e2e-{name}", congestion=args.cc) as bed:
                results.append((name, topology.links[0], *e2e_profile(name, bed, sizes, args)))
            print_e2e(results, sizes, args, time.monotonic() - started)
    except TestbedUnavailable as exc:
        print(f"bench_wan_eos: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    return 0

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--size", default="64M", help="file size for sweep and estimate")
    parser.add_argument("--repeat", type=int, default=3, help="runs per stream count")
    parser.add_argument("--sample-size", default=None,
                        help="EOS_SAMPLE_SIZE (default: the daemon's)")
    parser.add_argument("--sweeps", type=Path, default=None,
                        help="JSON file of sweep curves: reused when it holds the profile "
                             "(same size and repeat), else measured and added")
    parser.add_argument("--sampling", default="guided", choices=("guided", "doubling"))
    add_e2e_options(parser)
    args = parser.parse_args()
    if args.e2e:
        return run_e2e(args)
    knobs = {"EOS_SAMPLING": args.sampling, "EOS_SAMPLING_BUDGET": args.budget}
    if args.sample_size:
        knobs["EOS_SAMPLE_SIZE"] = args.sample_size
    size = parse_size(args.size)
    outcomes = []
    try:
        for name, topology in topologies(args, tuple(PROFILES)):
            with Testbed(topology, args.workdir / name, congestion=args.cc) as bed:
                outcomes.append(run_profile(name, bed, size, args.repeat, knobs, args.sweeps))
    except TestbedUnavailable as exc:
        print(f"bench_wan_eos: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    print(f"\n## EOS on emulated paths ({args.size} file, sweep median of {args.repeat}, "
          f"{args.sampling} sampling, {args.sample_size or 'default'} samples, "
          f"EOS_SAMPLING_BUDGET {args.budget}, {args.cc})\n")
    print("| link | best (streams: Mbit/s) | chosen | its Mbit/s | share of best | "
          "predicted | error | samples | sampling time | model |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for o in outcomes:
        best = max(o.curve, key=lambda n: o.curve[n])
        print(f"| {o.link.label} | {best}: {o.curve[best]:.1f} | {o.chosen} | "
              f"{o.measured:.1f} | {o.share:.3f} | {o.predicted:.1f} | {o.error:+.1%} | "
              f"{len(o.samples)} | {o.sampling_s:.1f} s | {o.model} |")
    ok = all(o.share >= 0.9 and abs(o.error) <= 0.15 for o in outcomes)
    print(f"\nTargets (share >= 0.9 and |error| <= 15% on every profile): "
          f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
