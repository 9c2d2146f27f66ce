"""The RTT suite (issue 16 point 4): sweeps of flows at RTTs 10, 40, 80, 160 and 366 ms (the
paper's range) at a fixed bottleneck, run as Stork transfer jobs and recorded by the daemon in
its transfer log; the analytics fitted from that log on all but one RTT predicting the
held-out one; d-w probing run live by the daemon's EOS on each RTT, judged against the sweep
(needs root, /dev/net/tun and `ip netns`).

    .venv/bin/python bench/bench_rtt_suite.py [--rtts 10,40,80,160,366] [--rate 100]
        [--loss 0.001] [--size 32M] [--repeat 2] [--depth 3] [--width 2]
        [--sampler iperf3] [--sample-time 3] [--sample-size 8M] [--rtt-tolerance 0.25]
        [--out DIR]

For each RTT, two sites joined by one emulated link (`tests.testbed`) and a file of --size in
site a; then, with a stork_server running inside site a:

1. The sweep: transfer jobs from site a to site b (third-party GridFTP) with `arguments =
   "-p N"`, N = 1, 2, 4 ... 32, --repeat rounds (interleaved), one job at a time. The daemon
   records each finished transfer in its transfer log itself, with what it knows of the
   path: STORK_LINK_MBPS (set to the link's rate) and the RTT of its TCP connects to the two
   servers (`stork/transfer/rtt.py`). One daemon state (DIR/sweep-daemon) serves every RTT:
   the daemon is started again in each RTT's site a on the same store, so its log ends with
   every sweep. The ground truth is the median per N of the rows the log holds for the RTT.
2. d-w, as an operator runs it: a fresh daemon in site a (its own store: it learns nothing
   from the sweep) with EOS_SAMPLING = dw, DW_DEPTH, DW_WIDTH, EOS_MAX_STREAMS = 32,
   EOS_SAMPLER (iperf3 by default, to the iperf3 server of site b), EOS_SAMPLE_TIME (and
   EOS_SAMPLE_SIZE for gridftp) as given and EOS_SAMPLING_BUDGET = 0 (the default budget,
   10% of the transfer's predicted time, would stop the search after a sample or two on
   these files), and one transfer job of the same file with `optimization = "eos"`. Its
   choice is judged on the sweep's medians. Why iperf3: at 366 ms a GridFTP sample spends
   6.5 s in set-up before its first byte, and its steady rate, read from SIZE polls one
   round trip apart, was not usable in a minute-long sample either (docs/BENCHMARKS.md 9.2).

After the links the sweep daemon is started once more (outside the testbed) and
`stork_history analytics --hold-out-rtt R --rtt-tolerance T` runs against it for each RTT,
the command an operator runs on the daemon's log: every model fitted on the other RTTs,
its error on R's rows. The tables are printed, with the commands; DIR keeps the daemons'
states, their transfer log as CSV (`stork_history export`), each analytics output and a JSON
of everything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stork.transfer.options import parse_size
from tests.support import StorkServer, make_file, wait_for
from tests.testbed.jobs import finish, site_daemon
from tests.testbed.netns import Testbed, TestbedUnavailable
from tests.testbed.topology import pair

STREAMS = (1, 2, 4, 8, 16, 32)
SWEEP_STATE = "sweep-daemon"


def transfer_ad(bed: Testbed, source: Path, dest: Path, extra: str) -> str:
    return (f'[ dap_type = transfer; src_url = "{bed.url("a", source)}"; '
            f'dest_url = "{bed.url("b", dest)}"; {extra}]\n')


def run_job(server: StorkServer, bed: Testbed, source: Path, extra: str,
            timeout_s: float) -> dict[str, Any]:
    """One transfer job from site a to site b, waited for; its summary (checked whole)."""
    dest = bed.site_dir("b") / "suite-in.dat"
    dest.unlink(missing_ok=True)
    [job_id] = server.submit(transfer_ad(bed, source, dest, extra))
    [job] = finish(server, [job_id], timeout_s)
    whole = dest.exists() and dest.stat().st_size == source.stat().st_size
    dest.unlink(missing_ok=True)
    if job["state"] != "COMPLETED" or not whole:
        raise RuntimeError(f"job {job_id} ({extra.strip()}) {job['state']}, destination whole: "
                           f"{whole}: {job.get('last_error')}")
    return job


def sweep(bed: Testbed, args: argparse.Namespace, source: Path, rtt: float) -> dict[str, Any]:
    """The sweep's jobs on the daemon whose store every RTT shares; the rows it logged."""
    server = site_daemon(bed, "a", {"STORK_MAX_NUM_JOBS": "1"},
                         workdir=args.out / SWEEP_STATE).start()
    began = time.time()
    try:
        for round_no in range(args.repeat):
            for n in STREAMS:
                job = run_job(server, bed, source, f'arguments = "-p {n}"; ', args.job_timeout)
                mbps = (job.get("result") or {}).get("achieved_throughput_mbps")
                print(f"<!-- {rtt:g} ms round {round_no + 1} -p {n}: job {job['id']} "
                      f"{mbps} Mbit/s ({time.strftime('%H:%M:%S')}) -->", flush=True)
        jobs = args.repeat * len(STREAMS)

        def logged() -> list[dict[str, Any]]:
            answer = server.api("GET", "/v1/transfers", params={"since": began}).json()
            rows: list[dict[str, Any]] = answer["transfers"]
            return rows if len(rows) >= jobs else []

        # a row is added right after its job is COMPLETED (the RTT measured first)
        rows = wait_for(logged, 60, 0.5, what=f"the daemon to log {jobs} transfers")
    finally:
        server.stop()
    runs: dict[int, list[float]] = {n: [] for n in STREAMS}
    for r in reversed(rows):  # oldest first
        runs[int(r["p"])].append(float(r["throughput_mbps"]))
    rtts = [r["rtt_s"] * 1000 for r in rows if r["rtt_s"] is not None]
    curve = {n: statistics.median(v) for n, v in runs.items()}
    return {"runs": runs, "median": curve, "best": max(curve, key=lambda n: curve[n]),
            "logged_rows": len(rows), "rtt_unknown": len(rows) - len(rtts),
            "logged_rtt_ms": (min(rtts), max(rtts)) if rtts else None,
            "logged_bandwidth_mbps": sorted({r["bandwidth_bps"] / 1e6 for r in rows
                                             if r["bandwidth_bps"] is not None})}


def dw_live(bed: Testbed, args: argparse.Namespace, source: Path, rtt: float
            ) -> dict[str, Any]:
    """One optimized transfer job on a fresh daemon whose EOS samples by d-w probing."""
    knobs = {"EOS_SAMPLING": "dw", "DW_DEPTH": str(args.depth), "DW_WIDTH": str(args.width),
             "EOS_MAX_STREAMS": str(max(STREAMS)), "EOS_SAMPLING_BUDGET": "0",
             "EOS_SAMPLER": args.sampler, "EOS_SAMPLE_SIZE": args.sample_size,
             "EOS_SAMPLE_TIME": f"{args.sample_time:g}"}
    server = site_daemon(bed, "a", knobs, workdir=args.out / f"dw-daemon-{rtt:g}").start()
    try:
        job = run_job(server, bed, source, 'optimization = "eos"; ', args.job_timeout)
        dest = bed.site_dir("b") / "suite-in.dat"
        history = server.api("GET", "/v1/history", params={
            "src": bed.url("a", source), "dest": bed.url("b", dest), "limit": 5}).json()
    finally:
        server.stop()
    result = job.get("result") or {}
    optimizations = [h for h in history["history"] if h["kind"] == "optimization"]
    samples = [(int(s[0]), float(s[1])) for s in optimizations[0]["samples"]] \
        if optimizations else []
    chosen = result.get("optimized_streams")  # none when the EOS failed (eos_error)
    return {"job": job["id"], "chosen": int(chosen) if chosen is not None else None,
            "eos_error": result.get("eos_error"),
            "model": result.get("eos_model"), "reason": result.get("optimization_reason"),
            "source": result.get("optimization_source"),
            "sampling_s": float(result.get("eos_sampling_time_s") or 0.0),
            "samples": samples, "in_destination": result.get("samples_in_destination"),
            "job_s": float(job["finished_at"]) - float(job["submitted_at"]),
            "rest_mbps": result.get("achieved_throughput_mbps")}


def run_rtt(rtt: float, args: argparse.Namespace, size: int) -> dict[str, Any]:
    started = time.monotonic()
    with Testbed(pair(rtt, args.rate, args.loss), args.out / f"rtt{rtt:g}") as bed:
        source = make_file(bed.site_dir("a") / "suite.dat", size)
        truth = sweep(bed, args, source, rtt)
        swept_s = time.monotonic() - started
        dw = dw_live(bed, args, source, rtt)
    curve = truth["median"]
    share = curve[dw["chosen"]] / curve[truth["best"]] if dw["chosen"] in curve else None
    return {"rtt_ms": rtt, **truth, "dw": dw, "dw_share": share,
            "sweep_s": swept_s, "dw_s": time.monotonic() - started - swept_s}


def held_out(args: argparse.Namespace, rtts: list[float]) -> list[dict[str, Any]]:
    """`stork_history analytics --hold-out-rtt` against the sweep daemon, per RTT."""
    out: list[dict[str, Any]] = []
    with StorkServer(args.out / SWEEP_STATE) as server:  # outside the testbed: its store only
        server.cli("stork_history", "export", "-o", str(args.out / "rtt-suite.csv"), check=True)
        for rtt in rtts:
            argv = ["analytics", "--hold-out-rtt", f"{rtt:g}", "--rtt-tolerance",
                    f"{args.rtt_tolerance:g}"]
            began = time.monotonic()
            answer = server.cli("stork_history", *argv, timeout=1800)
            text = answer.stdout + answer.stderr
            (args.out / f"analytics-{rtt:g}.txt").write_text(text)
            lines = text.splitlines()
            if answer.returncode != 0:
                out.append({"rtt_ms": rtt, "command": "stork_history " + " ".join(argv),
                            "held_out": f"exited {answer.returncode}: "
                                        + text.strip()[-300:].replace(chr(10), "; "),
                            "seconds": time.monotonic() - began, "models": []})
                continue
            note = next(line for line in lines if line.startswith("held out RTT"))
            models = [[c.strip() for c in line.strip("|").split("|")] for line in lines
                      if line.startswith(("| polynomial |", "| bagging |", "| boosting |"))]
            out.append({"rtt_ms": rtt, "command": "stork_history " + " ".join(argv),
                        "held_out": note, "seconds": time.monotonic() - began,
                        "models": [{"family": m[0], "setting": m[1], "rmse": float(m[2]),
                                    "relative": float(m[3]), "r2": float(m[4])}
                                   for m in models[:3]]})
    return out


def print_tables(results: list[dict[str, Any]], fits: list[dict[str, Any]],
                 args: argparse.Namespace, wall_s: float) -> None:
    print(f"\n## Sweeps as transfer jobs ({args.rate:g} Mbit/s, loss {args.loss:g}, "
          f"{args.size} file, median of {args.repeat} rows of the daemon's transfer log per "
          "cell, Mbit/s)\n")
    print("| RTT ms | RTT the daemon logged, ms | " + " | ".join(f"{n} streams" for n in STREAMS)
          + " | best | d-w chose | share of best | d-w samples | d-w sampling s | "
            "d-w job s | sweep jobs |")
    print("| ---: | --- |" + " ---: |" * (len(STREAMS) + 7))
    for r in results:
        low, high = r["logged_rtt_ms"] or (float("nan"), float("nan"))
        dw = r["dw"]
        print(f"| {r['rtt_ms']:g} | {low:.1f}..{high:.1f} | "
              + " | ".join(f"{r['median'][n]:.1f}" for n in STREAMS)
              + f" | {r['best']} | {dw['chosen'] or 'EOS failed'} | "
                f"{'-' if r['dw_share'] is None else format(r['dw_share'], '.3f')} | "
                f"{len(dw['samples'])} | "
                f"{dw['sampling_s']:.1f} | {dw['job_s']:.1f} | {r['logged_rows']} |")
    logged = sorted({b for r in results for b in r["logged_bandwidth_mbps"]})
    unknown = sum(r["rtt_unknown"] for r in results)
    print(f"\nThe daemon's rows: bottleneck {', '.join(f'{b:g}' for b in logged)} Mbit/s "
          f"(STORK_LINK_MBPS), RTT unknown on {unknown} of "
          f"{sum(r['logged_rows'] for r in results)}.")
    print("\nd-w's samples (streams: Mbit/s, in the order taken) and the daemon's reason:\n")
    for r in results:
        dw = r["dw"]
        shown = ", ".join(f"{n}: {v:.1f}" for n, v in dw["samples"])
        print(f"- {r['rtt_ms']:g} ms: {shown}; model {dw['model']}, {dw['source']}: "
              f"{dw['reason']}" + (f"; EOS error: {dw['eos_error']}" if dw["eos_error"] else ""))
    print("\n## Held-out RTT: `stork_history analytics` on the sweep daemon's transfer log\n")
    print("| held-out RTT ms | model | chosen by CV | RMSE (Mbit/s) | mean relative error | "
          "R^2 there | rows held out / fitted on |")
    print("| ---: | --- | --- | ---: | ---: | ---: | --- |")
    for f in fits:
        note = f["held_out"].split(": ", 1)[1] if f["models"] else ""
        for i, m in enumerate(f["models"]):
            print(f"| {f['rtt_ms']:g} | {m['family']} | {m['setting']} | {m['rmse']:.1f} | "
                  f"{m['relative']:.3f} | {m['r2']:.3f} | {note if i == 0 else ''} |")
        if not f["models"]:
            print(f"| {f['rtt_ms']:g} | - | - | - | - | - | {f['held_out']} |")
    print("\ncommands (against DIR/sweep-daemon):")
    for f in fits:
        print(f"    {f['command']}     ({f['seconds']:.0f} s)")
    phases = ", ".join(f"{r['rtt_ms']:g} ms {r['sweep_s']:.0f} + {r['dw_s']:.0f} s"
                       for r in results)
    print(f"\nwall time {wall_s:.0f} s (per RTT, sweep + d-w: {phases})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rtts", default="10,40,80,160,366")
    p.add_argument("--rate", type=float, default=100.0, help="bottleneck, Mbit/s (100)")
    p.add_argument("--loss", type=float, default=0.001, help="random loss (0.001)")
    p.add_argument("--size", default="32M", help="file size per transfer (32M)")
    p.add_argument("--repeat", type=int, default=2, help="rounds of the sweep (2)")
    p.add_argument("--depth", type=int, default=3, help="DW_DEPTH (3)")
    p.add_argument("--width", type=int, default=2, help="DW_WIDTH (2)")
    p.add_argument("--sampler", default="iperf3", choices=("iperf3", "gridftp"),
                   help="EOS_SAMPLER of the d-w daemon (iperf3)")
    p.add_argument("--sample-time", type=float, default=3.0,
                   help="EOS_SAMPLE_TIME of the d-w daemon, seconds (3)")
    p.add_argument("--sample-size", default="8M",
                   help="EOS_SAMPLE_SIZE of the d-w daemon, for --sampler gridftp (8M)")
    p.add_argument("--rtt-tolerance", type=float, default=0.25,
                   help="stork_history analytics --rtt-tolerance (0.25: the suite's RTTs are "
                        "at least twice apart)")
    p.add_argument("--job-timeout", type=float, default=900.0,
                   help="seconds a job may take before it is removed (900)")
    p.add_argument("--out", type=Path, default=Path("/tmp/stork-rtt-suite"))
    args = p.parse_args()
    if (args.out / SWEEP_STATE).exists():
        p.error(f"{args.out / SWEEP_STATE} exists: its transfer log would mix with this run's; "
                "give a new --out")
    args.out.mkdir(parents=True, exist_ok=True)
    size = parse_size(args.size)
    rtts = [float(v) for v in args.rtts.split(",")]
    started = time.monotonic()
    results = []
    try:
        for rtt in rtts:
            results.append(run_rtt(rtt, args, size))
            r = results[-1]
            print(f"RTT {rtt:g} ms: median " + ", ".join(
                f"{n}: {v:.1f}" for n, v in r["median"].items())
                + f"; d-w chose {r['dw']['chosen']} ({len(r['dw']['samples'])} samples); "
                  f"{time.monotonic() - started:.0f} s so far", flush=True)
    except TestbedUnavailable as exc:
        print(f"bench_rtt_suite: cannot build the testbed here: {exc}", file=sys.stderr)
        return 2
    fits = held_out(args, rtts)
    (args.out / "rtt-suite.json").write_text(json.dumps({"results": results, "fits": fits},
                                                        indent=1, default=str))
    print_tables(results, fits, args, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
