"""Shared command-line options for the testbed tools: which links to build."""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.testbed.topology import PROFILES, Topology, load, pair


def add_link_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--profile", action="append", choices=sorted(PROFILES),
                       help="a named two-site link profile (repeatable)")
    group.add_argument("--topology", type=Path, help="a topology TOML file")
    group.add_argument("--link", metavar="RTT_MS,RATE_MBPS,LOSS",
                       help="one two-site link, e.g. 40,200,0.001")
    parser.add_argument("--cc", default="cubic", choices=("cubic", "bbr", "reno"),
                        help="TCP congestion control in the sites (default cubic)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/stork-testbed"),
                        help="files, logs and link counters (default /tmp/stork-testbed)")


def topologies(args: argparse.Namespace, default: tuple[str, ...]) -> list[tuple[str, Topology]]:
    """(name, topology) for each thing to build, from --profile / --topology / --link."""
    if args.topology:
        return [(args.topology.stem, load(args.topology))]
    if args.link:
        try:
            rtt, rate, loss = (float(x) for x in args.link.split(","))
        except ValueError:
            raise SystemExit(f"--link {args.link!r}: expected RTT_MS,RATE_MBPS,LOSS") from None
        return [("link", pair(rtt, rate, loss))]
    return [(name, pair(*PROFILES[name])) for name in (args.profile or default)]
