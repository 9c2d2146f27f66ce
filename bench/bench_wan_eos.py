"""EOS accuracy on emulated wide-area paths (needs root, /dev/net/tun and `ip netns`).

    .venv/bin/python bench/bench_wan_eos.py [--profile wan40 ...] [--size 100M] [--repeat 3]

For each link profile: build two sites, measure the ground-truth curve (third-party GridFTP,
1..32 streams, median of --repeat), then submit an estimation job to a real stork_server
running inside site a and judge its answer against the curve: the chosen stream count's
throughput as a share of the best, predicted versus measured throughput, samples and
sampling time. Targets: share >= 0.9 on every profile, prediction within 15% of measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import classad2

from stork.transfer.options import parse_size
from tests.support import StorkServer, make_file
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
    args = parser.parse_args()
    knobs = {"EOS_SAMPLING": args.sampling}
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
          f"{args.sampling} sampling, {args.sample_size or 'default'} samples, {args.cc})\n")
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
