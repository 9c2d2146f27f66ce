"""stork_history: what Stork remembers about past transfers.

    stork_history SRC DEST            the EOS history for a host pair (optimizations and
                                      finished transfers)
    stork_history import FILE.csv...  add tables in the HARP grid format to the transfer log
                                      (root or the daemon's user); says which rows were
                                      skipped and why
    stork_history export [-o FILE] [-src HOST] [-dest HOST] [-since UNIX_TIME]
                                      write the transfer log in the same format (stdout
                                      without -o)
    stork_history analyze [--report [DIR]] [-csv FILE...]
                                      ASM's offline analysis now (stork.asm): the rows added
                                      since its last run, into its state in the daemon's
                                      state directory (root or the daemon's user); with
                                      -csv, of those tables alone (no state); --report
                                      prints clusters, surfaces, maxima and bands and draws
                                      one PNG per cluster into DIR (default: .)
    stork_history analytics [FILE.csv...] [--predict RTT_MS,FLOWS] [--plot DIR] ...
                                      regression models of the rate (stork/cli/analytics.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stork.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    add_name,
    error,
    human_bytes,
    load_settings,
    parser,
    run,
    when,
)
from stork.client import Client
from stork.config import is_database_url
from stork.store import open_store
from stork.translog import TransferRecord, read_grid_csv, write_grid_csv

SHOWN_SKIPPED = 20  # skipped rows listed one by one; the rest are counted


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    words = [a for a in args_in if not a.startswith("-")]
    if words and words[0] == "import":
        return _import(args_in)
    if words and words[0] == "export":
        return _export(args_in)
    if words and words[0] == "analyze":
        return _analyze(args_in)
    if words and words[0] == "analytics":
        from stork.cli.analytics import main as analytics

        return analytics(args_in)
    return _pair(args_in)


def _pair(argv: list[str]) -> int:
    p = parser("stork_history", "Show what the EOS remembers for a source and destination "
                                "(hosts as HOST or HOST:PORT, or URLs). Also: stork_history "
                                "import FILE.csv..., stork_history export [-o FILE].")
    add_name(p)
    p.add_argument("-limit", type=int, default=50, help="most rows to show (default 50)")
    p.add_argument("src")
    p.add_argument("dest")
    args = p.parse_args(argv)

    def body() -> int:
        client = Client.from_settings(load_settings(args.config), args.name)
        try:
            info = client.history(args.src, args.dest, args.limit)
        finally:
            client.close()
        rows = info["history"]
        print(f"{'TIME':<19} {'KIND':<12} {'FROM -> TO':<40} {'STREAMS':>7} {'MBIT/S':>10} "
              f"{'MODEL / BYTES':<15} ARGUMENTS")
        for r in rows:
            detail = r["model"] if r["kind"] == "optimization" else human_bytes(r["bytes_moved"])
            pair = f"{r['src_host']} -> {r['dest_host']}"
            print(f"{when(r['time']):<19} {r['kind']:<12} {pair:<40} {r['streams']:>7} "
                  f"{r['throughput_mbps']:>10.1f} {detail:<15} {r['arguments'] or '-'}")
        direction = "either direction" if info["symmetric"] else "this direction only"
        print(f"{len(rows)} row(s), {direction} (EOS_SYMMETRIC_PAIRS)")
        return EXIT_OK

    return run(body)


def _import(argv: list[str]) -> int:
    p = parser("stork_history import", "Add transfer tables in the HARP grid format (FileSize, "
                                       "FileCount, Bandwidth, RTT, BufferSize, Parallelism, "
                                       "Concurrency, Pipelining, Fast, Throughput, Duration, "
                                       "Date, Time, Source, Destination) to the transfer log.")
    add_name(p)
    p.add_argument("command", choices=["import"], help=argparse.SUPPRESS)
    p.add_argument("files", nargs="+", metavar="FILE.csv")
    args = p.parse_args(argv)

    def body() -> int:
        tables: list[tuple[str, str]] = []
        for name in args.files:  # read them all first: a missing one adds nothing
            try:
                tables.append((name, Path(name).read_text(encoding="utf-8", errors="replace")))
            except OSError as exc:
                error(f"{name}: cannot read: {exc.strerror or exc}; nothing was imported")
                return EXIT_INVALID
        client = Client.from_settings(load_settings(args.config), args.name)
        try:
            for name, text in tables:
                answer = client.import_transfers(Path(name).name, text)
                skipped = answer["skipped"]
                print(f"{name}: {answer['added']} row(s) added, {len(skipped)} skipped")
                for s in skipped[:SHOWN_SKIPPED]:
                    print(f"  line {s['line']}: {s['reason']}")
                if len(skipped) > SHOWN_SKIPPED:
                    print(f"  ... and {len(skipped) - SHOWN_SKIPPED} more")
        finally:
            client.close()
        return EXIT_OK

    return run(body)


def _export(argv: list[str]) -> int:
    p = parser("stork_history export", "Write the transfer log in the HARP grid format.")
    add_name(p)
    p.add_argument("command", choices=["export"], help=argparse.SUPPRESS)
    p.add_argument("-o", dest="output", metavar="FILE", help="write here (default: stdout)")
    p.add_argument("-src", help="only transfers from this host")
    p.add_argument("-dest", help="only transfers to this host")
    p.add_argument("-since", type=float, default=0.0, metavar="UNIX_TIME",
                   help="only transfers that started from then on")
    args = p.parse_args(argv)

    def body() -> int:
        client = Client.from_settings(load_settings(args.config), args.name)
        try:
            rows = client.transfers(args.src, args.dest, args.since)
        finally:
            client.close()
        records = [TransferRecord(**r) for r in reversed(rows)]  # oldest first, as they ran
        if args.output:
            written = write_grid_csv(records, args.output)
            print(f"{written} row(s) written to {args.output}", file=sys.stderr)
        else:
            write_grid_csv(records, sys.stdout)
        return EXIT_OK

    return run(body)


def _analyze(argv: list[str]) -> int:
    p = parser("stork_history analyze", "Run ASM's offline analysis of the transfer log now "
                                        "(additive: only the rows added since its last run).")
    p.add_argument("command", choices=["analyze"], help=argparse.SUPPRESS)
    p.add_argument("-report", "--report", nargs="?", const=".", default=None, metavar="DIR",
                   help="print the clusters, surfaces, maxima and bands; one PNG per cluster "
                        "into DIR (default: the current directory)")
    p.add_argument("-csv", nargs="+", default=None, metavar="FILE.csv",
                   help="analyse these tables (HARP grid format) alone, without the daemon's "
                        "transfer log or state")
    args = p.parse_args(argv)

    def body() -> int:
        from stork.asm import report, state
        from stork.server.flow_tuning import tuning_limits
        from stork.tuning.asm_analysis import Aggregate, build_model

        settings = load_settings(args.config)
        if args.csv:
            agg = Aggregate()
            for name in args.csv:
                rows, skipped = read_grid_csv(name)
                print(f"{name}: {agg.add(rows)} row(s) used, {len(skipped)} skipped")
            model = build_model(agg)
        else:
            if not is_database_url(settings.database) and not Path(settings.database).exists():
                error(f"{settings.database}: no transfer log there (STORK_DATABASE, from "
                      f"{settings.source}); nothing was analysed")
                return EXIT_INVALID
            store = open_store(settings.database)
            try:
                run_ = state.analyze(store, state.directory(settings.state_dir))
            finally:
                store.close()
            model = run_.model
            print(f"{run_.rows_read} new transfer log row(s) read ({run_.rows_added} used, "
                  f"{run_.rows_total} in all), {run_.clusters} cluster(s), "
                  f"{run_.seconds:.1f} s; state in {state.directory(settings.state_dir)}")
        if args.report is not None:
            print(report.text(model, tuning_limits()))
            for path in report.plot(model, tuning_limits(), Path(args.report)):
                print(f"wrote {path}")
        return EXIT_OK

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
