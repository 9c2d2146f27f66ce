"""Does the testbed measure true? Per link: RTT, iperf3 throughput by stream count.

    python -m tests.testbed.selfcheck [--profile wan40 ...] [--seconds 5]

Checks: ping RTT within 10% of the configured RTT, and no throughput above the configured
rate. Prints a Markdown table; exits 1 if a check fails, 2 if the machine cannot host it.
"""

from __future__ import annotations

import argparse
import sys

from tests.testbed.cli import add_link_options, topologies
from tests.testbed.measure import check_link, table_header
from tests.testbed.netns import Testbed, TestbedUnavailable, leftovers
from tests.testbed.topology import PROFILES

STREAMS = (1, 2, 4, 8, 16, 32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_link_options(parser)
    parser.add_argument("--seconds", type=float, default=5, help="iperf3 run length")
    args = parser.parse_args(argv)
    failed = False
    print(table_header(STREAMS))
    try:
        for name, topology in topologies(args, tuple(PROFILES)):
            with Testbed(topology, args.workdir / name, congestion=args.cc) as bed:
                for link in topology.links:
                    check = check_link(bed, link, STREAMS, args.seconds)
                    failed |= not (check.rtt_ok and check.rate_ok)
                    print(check.row(), flush=True)
            for link_name, counters in bed.link_stats().items():
                print(f"<!-- {name} {link_name} emulator counters: {counters} -->")
    except TestbedUnavailable as exc:
        print(f"selfcheck: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    left = leftovers()
    if left:
        print(f"selfcheck: left behind: {left}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
