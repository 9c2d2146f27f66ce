"""stork_history: the EOS history for a host pair (optimizations and finished transfers)."""

from __future__ import annotations

import sys

from stork.cli.common import EXIT_OK, add_name, human_bytes, load_settings, parser, run, when
from stork.client import Client


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_history", "Show what the EOS remembers for a source and destination "
                                "(hosts as HOST or HOST:PORT, or URLs).")
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


if __name__ == "__main__":
    sys.exit(main())
