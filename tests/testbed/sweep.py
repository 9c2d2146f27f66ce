"""Ground truth: GridFTP third-party throughput for 1, 2, 4, ..., 32 streams between two sites.

    python -m tests.testbed.sweep --profile wan40 --size 100M --repeat 3 --out wan40.json

Each stream count is run `--repeat` times (rounds interleaved) and the median is kept; the
JSON file holds the link, the file size, every run and the medians.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stork.transfer.options import parse_size
from tests.support import make_file
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.measure import medians, sweep
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import Link

STREAMS = (1, 2, 4, 8, 16, 32)


def record(link: Link, size: int, runs: dict[int, list[float]]) -> dict[str, object]:
    return {"link": {"rtt_ms": link.rtt_ms, "rate_mbps": link.rate_mbps, "loss": link.loss,
                     "queue_bytes": link.queue},
            "size_bytes": size, "runs": runs, "median_mbps": medians(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--size", default="100M", help="file size (default 100M)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the curve here (JSON)")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    curves = {}
    try:
        for name, topology in topologies(args, ("wan40",)):
            link = topology.links[0]
            with Testbed(topology, args.workdir / name, congestion=args.cc) as bed:
                source = make_file(bed.site_dir(link.a) / "sweep.dat", size)
                runs = sweep(bed, link.a, link.b, source, STREAMS, args.repeat)
            curves[name] = record(link, size, runs)
            median = medians(runs)
            best = max(median.values())
            print(f"## {link.label}, {args.size} file, median of {args.repeat}\n")
            print("| streams | Mbit/s (median) | share of best | runs |")
            print("| ---: | ---: | ---: | --- |")
            for n, value in median.items():
                cells = ", ".join(f"{v:.1f}" for v in runs[n])
                print(f"| {n} | {value:.1f} | {value / best:.3f} | {cells} |")
            print(flush=True)
    except TestbedUnavailable as exc:
        print(f"sweep: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(curves, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
