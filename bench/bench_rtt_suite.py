"""The RTT suite: sweeps of flows at RTTs 10, 40, 80, 160 and 366 ms (the paper's range) at a
fixed bottleneck, the analytics fitted on all but one RTT predicting the held-out one, and d-w
probing run live on each RTT against the sweep (needs root, /dev/net/tun and `ip netns`).

    .venv/bin/python bench/bench_rtt_suite.py [--rtts 10,40,80,160,366] [--rate 100]
        [--loss 0.0001] [--size 16M] [--repeat 2] [--depth 3] [--width 2] [--out DIR]

For each RTT: two sites joined by one emulated link (`tests.testbed`), a file of --size in
site a, third-party GridFTP transfers to site b at 1, 2, 4 ... 32 streams, --repeat rounds
(interleaved), each run a row of the transfer log (`DIR/rtt-suite.csv` in the transfer log's
CSV format: `stork_history import` loads it into a daemon's log). Then d-w probing
(`stork.eos.probing.window_search`, depth and width as given) on the same link, each
probe a real transfer; its choice is judged on the sweep's median curve. After the links:
`stork.analytics.models.fit_all` on every RTT but one, predicting the held-out RTT's rows
(the two ends are extrapolations, and flagged).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.analytics.models import fit_all
from stork.analytics.table import from_records
from stork.eos.probing import window_search
from stork.transfer.options import parse_size
from stork.translog import TransferRecord, write_grid_csv
from tests.support import make_file
from tests.testbed.measure import gridftp_mbps, medians
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import pair

STREAMS = (1, 2, 4, 8, 16, 32)


def run_rtt(rtt: float, args: argparse.Namespace, size: int, records: list[TransferRecord]
            ) -> dict[str, object]:
    topology = pair(rtt, args.rate, args.loss)
    link = topology.links[0]
    with Testbed(topology, args.out / f"rtt{rtt:g}") as bed:
        source = make_file(bed.site_dir(link.a) / "suite.dat", size)

        def transfer(n: int) -> float:
            began = time.time()
            mbps = gridftp_mbps(bed, link.a, link.b, source, n, size)
            records.append(TransferRecord(
                time=began, src_host=f"site-a-{rtt:g}ms", dest_host=f"site-b-{rtt:g}ms",
                rtt_s=rtt / 1000, bandwidth_bps=args.rate * 1e6, buffer_bytes=None,
                file_size_bytes=size, file_count=1, cc=1, p=n, pp=1, fast=False,
                bytes_moved=size, duration_s=size * 8 / 1e6 / mbps, throughput_mbps=mbps))
            return mbps

        runs: dict[int, list[float]] = {n: [] for n in STREAMS}
        for _ in range(args.repeat):
            for n in STREAMS:
                runs[n].append(transfer(n))
        sweep_rows = len(records)
        probing = window_search(transfer, STREAMS, args.depth, args.width)
        del records[sweep_rows:]  # the probes are not part of the sweep's ground truth
    curve = medians(runs)
    best = max(curve, key=lambda n: curve[n])
    return {"rtt_ms": rtt, "runs": runs, "median": curve, "best": best,
            "dw_chosen": probing.chosen, "dw_probes": probing.probes,
            "dw_measured": {str(k): list(v) for k, v in probing.measurements.items()},
            "dw_share": curve[probing.chosen] / curve[best]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rtts", default="10,40,80,160,366")
    p.add_argument("--rate", type=float, default=100.0, help="bottleneck, Mbit/s (100)")
    p.add_argument("--loss", type=float, default=0.0001, help="random loss (0.0001)")
    p.add_argument("--size", default="16M", help="file size per transfer (16M)")
    p.add_argument("--repeat", type=int, default=2, help="rounds of the sweep (2)")
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--width", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("/tmp/stork-rtt-suite"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = parse_size(args.size)
    rtts = [float(v) for v in args.rtts.split(",")]
    records: list[TransferRecord] = []
    results = []
    try:
        for rtt in rtts:
            results.append(run_rtt(rtt, args, size, records))
            r = results[-1]
            print(f"RTT {rtt:g} ms: median " + ", ".join(
                f"{n}: {v:.1f}" for n, v in r["median"].items())  # type: ignore[attr-defined]
                + f"; d-w chose {r['dw_chosen']} ({r['dw_probes']} probes)", flush=True)
    except TestbedUnavailable as exc:
        print(f"bench_rtt_suite: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    log = args.out / "rtt-suite.csv"
    write_grid_csv(records, log)
    (args.out / "rtt-suite.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\n## Sweeps ({args.rate:g} Mbit/s, loss {args.loss:g}, {args.size} file, median of "
          f"{args.repeat}; {len(records)} transfer log rows in {log})\n")
    print("| RTT ms | " + " | ".join(f"{n} streams" for n in STREAMS)
          + " | best | d-w chose | share of best | d-w probes | sweep runs |")
    print("| ---: |" + " ---: |" * (len(STREAMS) + 5))
    for r in results:
        median = r["median"]
        assert isinstance(median, dict)
        print(f"| {r['rtt_ms']:g} | " + " | ".join(f"{median[n]:.1f}" for n in STREAMS)
              + f" | {r['best']} | {r['dw_chosen']} | {r['dw_share']:.3f} | {r['dw_probes']} | "
              f"{len(STREAMS) * args.repeat} |")
    table = from_records(records, str(log))
    print("\n## Held-out RTT: fitted on the other RTTs, error on the held-out RTT's rows\n")
    print("| held-out RTT ms | model | chosen by CV | RMSE (Mbit/s) | mean relative error | "
          "note |")
    print("| ---: | --- | --- | ---: | ---: | --- |")
    rtt_column = table.column("rtt_ms")
    for rtt in rtts:
        mask = np.isclose(rtt_column, rtt)
        train = table.without(mask, f"without {rtt:g}")
        held = table.only(mask, f"{rtt:g}")
        low, high = train.ranges()["rtt_ms"]
        note = "" if low <= rtt <= high else f"EXTRAPOLATED (trained on {low:g}..{high:g} ms)"
        for fit in fit_all(train, k=5):
            predicted = fit.predict(held.x)
            rmse = float(np.sqrt(np.mean((predicted - held.y) ** 2)))
            relative = statistics.mean(np.abs(predicted - held.y) / held.y)
            print(f"| {rtt:g} | {fit.family} | {fit.setting} | {rmse:.1f} | {relative:.3f} | "
                  f"{note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
