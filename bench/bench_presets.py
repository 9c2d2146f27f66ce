"""What measured (cc, p, pp) grids say of the small-file preset's concurrency
(`stork.dataset.chunks.DEFAULT_CC`). Not a test.

    .venv/bin/python bench/bench_presets.py [FILE...]

The tables default to every table in ../shared/data/transfer-logs/harp-grids/ (read where
they lie, never copied). A *dataset* is one FileSize/FileCount group of one route, as in
`bench_grid.py`; only datasets of *small* files count (`chunks.size_class`: files under
one bandwidth-delay product of the table's Bandwidth and RTT). A small file gains nothing
from more streams of its own, so the preset sends them one stream each (p = 1) and all of
a small-file chunk's streams are its concurrency; the medium and large presets lay their
streams out as cc x p (`bench_layout.py` reads the grids on that).

For each dataset the table gives the Mbit/s of each concurrency at p = 1: the median of the
cell's repeats, at its best pipelining depth. Then the preset's concurrency, its share of
the best, and the fewest concurrency within 5% of the best. A dataset whose best is its
largest measured level asked for at least that much: the grid did not find its top.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_grid import WITHIN, TestSet, print_report, tables_parser

from stork.dataset.chunks import DEFAULT_CC, SizeClass, size_class
from stork.errors import TransferLogError


def by_cc(t: TestSet) -> dict[int, float]:
    """Concurrency -> Mbit/s at p = 1 (each cell's median, the best pipelining depth)."""
    out: dict[int, float] = {}
    for (cc, p, _pp), median in t.medians.items():
        if p == 1:
            out[cc] = max(out.get(cc, 0.0), median)
    return out


def class_of(t: TestSet) -> SizeClass | None:
    r = t.rows[0]
    if not r.rtt_s or not r.bandwidth_bps:
        return None
    return size_class(round(r.file_size_bytes), r.bandwidth_bps / 8 * r.rtt_s)


def report(sets: Sequence[TestSet]) -> str:
    rows = [(t, curve) for t in sets
            if class_of(t) is SizeClass.SMALL and len(curve := by_cc(t)) >= 2]
    if not rows:
        raise TransferLogError(", ".join(sorted({Path(r.origin).name for t in sets
                                                  for r in t.rows})),
                               "no dataset of files under one bandwidth-delay product (a "
                               "known RTT and bandwidth) measured two concurrencies at p = 1")
    levels = sorted({cc for _, curve in rows for cc in curve})
    preset = DEFAULT_CC[SizeClass.SMALL]
    lines = ["### Small files: concurrency at one stream per file", "",
             "| dataset | " + " | ".join(f"cc {cc}" for cc in levels)
             + f" | best | preset (cc {preset}) / best | fewest within 5% |",
             "| --- | " + " | ".join("---:" for _ in levels) + " | ---: | ---: | ---: |"]
    for t, curve in sorted(rows, key=lambda e: e[0].key[2]):
        best = max(curve, key=lambda cc: curve[cc])
        top = curve[best]
        fewest = min(cc for cc, v in curve.items() if v >= (1 - WITHIN) * top)
        share = f"{curve[preset] / top:.2f}" if preset in curve else "-"
        cells = [f"{curve[cc]:.0f}" if cc in curve else "-" for cc in levels]
        edge = " (largest measured)" if best == max(curve) else ""
        lines.append(f"| {t.name} | " + " | ".join(cells)
                     + f" | cc {best}{edge} | {share} | cc {fewest} |")
    lines += ["", "Mbit/s: the median of the cell's repeats, at its best pipelining depth, p = 1."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = tables_parser(__doc__)
    args = p.parse_args(argv)
    return print_report(args.tables, report)


if __name__ == "__main__":
    sys.exit(main())
