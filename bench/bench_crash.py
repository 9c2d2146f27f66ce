"""Crash safety at scale: 200 real GridFTP transfers, the daemon SIGKILLed 20 times.

    .venv/bin/python bench/bench_crash.py [--jobs 200] [--kills 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.crash import run_crash


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stork-crash-") as tmp:
        report = run_crash(Path(tmp), args.jobs, args.kills, args.seed)
    print("| transfers | SIGKILLs | kills with transfers running | attempts interrupted and "
          "requeued | time | problems |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    print(f"| {report.jobs} | {report.kills} | {report.kills_mid_transfer} | "
          f"{report.interrupted_attempts} | {report.seconds:.0f} s | "
          f"{'; '.join(report.problems[:5]) or 'none'} |")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
