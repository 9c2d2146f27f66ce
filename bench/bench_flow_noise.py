"""How steady the engine's flow reads against the link itself, at fixed settings.

    .venv/bin/python bench/bench_flow_noise.py [--profile lan10] [--file-mb 1024]
        [--cells 4/4/1,8/4/1]

The online optimizers judge a setting on the spread of the flow's windows at that setting
(`stork.tuning.online`): a window that reads 10% off while the link carried the same bytes
makes every gain under about 20% look like noise. This bench tells the two apart. Per link
profile two sites are built, and for each cell one file of --file-mb MiB moves third party
from site a to site b by a real stork_server inside site b (``arguments = "-cc C -p P -pp
PP"``: the engine sends it as byte ranges, nothing tunes). Meanwhile the destination's
network device counters are read every 0.25 s inside site b (`/proc/net/dev`: what the
emulated link delivered), and at the end the job's flow series (`GET /v1/jobs/ID/flow`,
1-s windows, the engine's reports) is set beside them, window by window.

Printed per cell, over the middle 80% of the job's windows (no slow start, no tail): the
mean rate and the relative spread (stdev over mean) of the engine's windows and of the
link's in the same seconds, in windows of 1, 2 (what the optimizers judge) and 6 s. Where
the link's spread is near zero (a link the flow fills) the engine's spread is all
measurement: the tools' reports spread over the wrong seconds. The link counts IP packets,
so its mean is a few percent above the engine's payload.
Needs root, /dev/net/tun and `ip netns`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import StorkServer, make_file
from tests.testbed.cli import add_link_options, topologies
from tests.testbed.jobs import finish, site_daemon
from tests.testbed.netns import Testbed, TestbedUnavailable

SAMPLE_S = 0.25
MIDDLE = 0.8  # the share of the job's windows judged (the middle ones)
BLOCKS = (1, 2, 6)
# runs inside the destination site: the time and the received bytes of each device but lo
SAMPLER = f"""
import sys, time
out = open(sys.argv[1], "w", buffering=1)
while True:
    t = time.time()
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, rest = line.split(":", 1)
            if name.strip() != "lo":
                out.write(f"{{t:.3f}} {{name.strip()}} {{rest.split()[0]}}\\n")
    time.sleep({SAMPLE_S} - (time.time() - t) % {SAMPLE_S})
"""


def spread(rates: list[float]) -> float:
    """The relative spread of `rates` (nan for fewer than two)."""
    if len(rates) < 2 or statistics.fmean(rates) <= 0:
        return float("nan")
    return statistics.stdev(rates) / statistics.fmean(rates)


def blocks(rates: list[float], n: int) -> list[float]:
    """`rates` of 1-s windows as whole windows of `n` s."""
    return [statistics.fmean(rates[i:i + n]) for i in range(0, len(rates) - n + 1, n)]


def link_rates(counters: list[tuple[float, int]], starts: list[float]) -> list[float | None]:
    """The link's Mbit/s in the 1-s window from each of `starts` (wall time), from the
    device's cumulative byte counts (interpolated; None outside what was read)."""
    times, counts = np.array([c[0] for c in counters]), np.array([c[1] for c in counters])
    begin = np.array(starts)
    moved = (np.interp(begin + 1.0, times, counts, right=np.nan)
             - np.interp(begin, times, counts, left=np.nan))
    return [None if math.isnan(m) else float(m) * 8 / 1e6 for m in moved]


def read_counters(path: Path) -> list[tuple[float, int]]:
    """The sampler's file: the first device's (time, received bytes)."""
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise RuntimeError(f"{path}: the device counters were never read")
    device = rows[0][1]
    return [(float(t), int(b)) for t, d, b in rows if d == device]


def columns(rates: list[float]) -> str:
    """The mean of 1-s `rates` and their relative spread in windows of each of BLOCKS."""
    parts = [f"{statistics.fmean(rates):.1f}" if rates else "-"]
    parts += [f"{spread(blocks(rates, n)):.3f}" for n in BLOCKS]
    return " | ".join(parts)


def one_cell(bed: Testbed, server: StorkServer, src: Path, cell: tuple[int, ...], n: int,
             timeout_s: float) -> str:
    """One job at `cell` with the link's counters read meanwhile: its table row."""
    cc, p, pp = cell
    counters = bed.workdir / f"counters-{n}.txt"
    sampler = subprocess.Popen(bed.argv("b", [sys.executable, "-c", SAMPLER, str(counters)]))
    dest = bed.site_dir("b") / f"out-{n}.dat"
    try:
        time.sleep(2 * SAMPLE_S)
        [job_id] = server.submit(
            f'[ dap_type = transfer; src_url = "{bed.url("a", src)}"; '
            f'dest_url = "{bed.url("b", dest)}"; arguments = "-cc {cc} -p {p} -pp {pp}"; ]\n')
        [summary] = finish(server, [job_id], timeout_s)
        time.sleep(2 * SAMPLE_S)
    finally:
        sampler.terminate()
        sampler.wait()
        dest.unlink(missing_ok=True)
    flow = server.api("GET", f"/v1/jobs/{job_id}/flow").json()
    starts = [flow["start_time"] + t for t in flow["t"]]
    link = link_rates(read_counters(counters), starts)
    k = len(starts)
    middle = range(int(k * (1 - MIDDLE) / 2), int(k * (1 + MIDDLE) / 2))
    pairs = [(flow["mbps"][i], link[i]) for i in middle if link[i] is not None]
    engine = [e for e, _ in pairs]
    wire = [x for _, x in pairs if x is not None]
    return (f"| {cc}/{p}/{pp} | {summary['state']} | {k} | {len(pairs)} | {columns(engine)} "
            f"| {columns(wire)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_link_options(parser)
    parser.add_argument("--file-mb", type=int, default=1024)
    parser.add_argument("--cells", default="4/4/1,8/4/1",
                        help="fixed settings cc/p/pp, comma-separated")
    parser.add_argument("--timeout", type=float, default=900, help="per job, seconds")
    args = parser.parse_args()
    try:
        cells = [tuple(int(x) for x in c.split("/")) for c in args.cells.split(",") if c]
    except ValueError:
        parser.error(f"--cells {args.cells!r}: expected cc/p/pp,cc/p/pp")
    if not cells or any(len(c) != 3 or min(c) < 1 for c in cells):
        parser.error(f"--cells {args.cells!r}: each cell is cc/p/pp, each >= 1")
    if args.file_mb < 1:
        parser.error("--file-mb must be 1 or more")
    header = ("| cell | state | windows | judged | engine Mbit/s | spread 1 s | 2 s | 6 s | "
              "link Mbit/s | spread 1 s | 2 s | 6 s |")
    try:
        for name, topology in topologies(args, ("lan10",)):
            print(f"\n#### {name}: {args.file_mb} MiB, the middle {MIDDLE:.0%} of the job's "
                  f"1-s windows\n\n{header}\n|{' --- |' * 12}", flush=True)
            with Testbed(topology, args.workdir / f"noise-{name}", congestion=args.cc) as bed:
                src = bed.site_dir("a") / f"file-{args.file_mb}M.dat"
                if not src.exists():
                    make_file(src, args.file_mb << 20, seed=5)
                server = site_daemon(bed, "b").start()
                try:
                    for n, cell in enumerate(cells):
                        print(one_cell(bed, server, src, cell, n, args.timeout), flush=True)
                finally:
                    server.stop()
    except TestbedUnavailable as exc:
        print(f"bench_flow_noise: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
