"""How a large file's streams are best laid out: few transfers of many streams, or more
transfers of fewer, read from measured (cc, p, pp) grids. Not a test.

    .venv/bin/python bench/bench_layout.py [FILE...] [--min-mb MB] [--totals N,N,...]

The tables default to every table in ../shared/data/transfer-logs/harp-grids/ (read where
they lie, never copied). A *dataset* is one FileSize/FileCount group of one route, as in
`bench_grid.py`; only datasets whose files are at least `--min-mb` MB (default 1000) count.

For each such dataset and each total of streams (cc x p) of `--totals` (default 16, 32 and
64: the 32 streams the EOS gives a large file by default, halved and doubled) that it
measured in two or more ways, the table gives each way's Mbit/s: the median of every repeat
of every pipelining depth of that (cc, p) (pipelining does nothing for files this large).
Then, for each two concurrencies, how often the first beat the second at the same total.

It answers one question for `stork.server.file_run.RANGE_WORKERS`: a single large file sent
as byte ranges keeps that many ranges in flight (each its own globus-url-copy, control
channel and server process, as each of the grids' concurrent files was) and splits the job's
streams between them. The grids measured files, not ranges of one file; this is the nearest
measurement there is that the project did not make itself.

A last table, over every dataset whatever its size, answers one for the online climb
(`stork.tuning.online.Climb`'s `alike_axes`): from each (cc, p) whose two halvings, (cc/2, p)
and (cc, p/2), were both measured, when one of them lost more than 5%, how often the other
lost more than 5% too; by the datasets' size class (`chunks.size_class`, the file size
against the table's bandwidth-delay product). And one for its knee (`path_history.KNEE_GAIN`):
from each (cc, p) whose doubling and halving were both measured, by how much the doubling
gained, how often the halving lost more than 5% (along the same axis; for large files also
along the other). And one for `path_history.lost_above`: when a halving lost more than 5% with
more streams on the other axis, how often the same halving below it did too. And one for
`online.FELL_SHARE`: what a doubling of cc or p lost, as shares of the doublings that lost
less. And one for `moves.halving_order`: near a dataset's best, how often halving cc and
halving p each kept the rate.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_grid import WITHIN, TestSet, print_report, tables_parser

from stork.dataset.chunks import SizeClass, size_class
from stork.errors import TransferLogError

Layout = dict[int, dict[int, float]]  # total streams -> concurrency -> Mbit/s


Rates = dict[tuple[int, int], float]  # (cc, p) -> Mbit/s


def cell_rates(t: TestSet) -> Rates:
    """Each (cc, p) the dataset measured -> its Mbit/s: the median of every repeat of every
    pipelining depth (pipelining does nothing for large files, and pooled it gives each
    (cc, p) of the others one figure)."""
    pooled: dict[tuple[int, int], list[float]] = defaultdict(list)
    for (cc, p, _pp), values in t.cells.items():
        pooled[(cc, p)] += values
    return {cell: statistics.median(values) for cell, values in pooled.items()}


def classed_rates(sets: Sequence[TestSet]) -> Iterator[tuple[SizeClass, Rates]]:
    """Each dataset whose path is known (its RTT and link rate): its size class
    (`chunks.size_class`, the file size against the bandwidth-delay product) and
    `cell_rates`."""
    for t in sets:
        r = t.rows[0]
        if r.rtt_s and r.bandwidth_bps:
            yield size_class(round(r.file_size_bytes), r.bandwidth_bps / 8 * r.rtt_s), \
                cell_rates(t)


def layouts(t: TestSet, totals: Sequence[int]) -> Layout:
    """Each total of streams of `totals` the dataset measured in two or more (cc, p) ways ->
    each way's Mbit/s by its concurrency (the median of every repeat of every pipelining
    depth)."""
    by_total: Layout = defaultdict(dict)
    for (cc, p), rate in cell_rates(t).items():
        by_total[cc * p][cc] = rate
    return {total: ways for total, ways in sorted(by_total.items())
            if total in totals and len(ways) >= 2}


def wins(tables: Sequence[Layout]) -> dict[tuple[int, int], tuple[int, int]]:
    """(a, b) with a < b -> (times cc a beat cc b at the same total, times both were
    measured at the same total)."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for table in tables:
        for ways in table.values():
            for a, b in combinations(sorted(ways), 2):
                won, of = out.get((a, b), (0, 0))
                out[(a, b)] = (won + (ways[a] > ways[b]), of + 1)
    return out


def halvings(sets: Sequence[TestSet]) -> dict[SizeClass, tuple[int, int]]:
    """Size class -> (halvings along one axis that lost more than 5%, of which the halving
    along the other axis lost more than 5% too), over every (cc, p) both of whose halvings
    were measured (each cell the median of every repeat of every pipelining depth)."""
    out: dict[SizeClass, tuple[int, int]] = {}
    for cls, rate in classed_rates(sets):
        for (cc, p), ref in rate.items():
            fewer_cc, fewer_p = rate.get((cc // 2, p)), rate.get((cc, p // 2))
            if cc < 2 or p < 2 or fewer_cc is None or fewer_p is None or ref <= 0:
                continue
            lost = [fewer_cc / ref - 1 < -WITHIN, fewer_p / ref - 1 < -WITHIN]
            n, both = out.get(cls, (0, 0))
            out[cls] = (n + sum(lost), both + 2 * all(lost))
    return out


NEAR_BEST = 0.8  # `halving_axes` looks at cells within this share of their dataset's best


def halving_axes(sets: Sequence[TestSet]) -> dict[SizeClass, tuple[int, int, int, float, float]]:
    """Size class -> (cells, of which halving cc kept the rate within 5%, of which halving
    p did, the mean share halving cc kept, and p), over every (cc, p) with both at 2 or
    more, both halvings measured and at least `NEAR_BEST` of its dataset's best cell (where
    a climb halves; each cell the median of every repeat of every pipelining depth):
    `moves.halving_order`'s evidence."""
    found: dict[SizeClass, list[tuple[float, float]]] = defaultdict(list)
    for cls, rate in classed_rates(sets):
        best = max(rate.values(), default=0.0)
        for (cc, p), ref in rate.items():
            fewer_cc, fewer_p = rate.get((cc // 2, p)), rate.get((cc, p // 2))
            if cc < 2 or p < 2 or fewer_cc is None or fewer_p is None \
                    or ref <= 0 or ref < NEAR_BEST * best:
                continue
            found[cls].append((fewer_cc / ref, fewer_p / ref))
    return {cls: (len(pairs), sum(c >= 1 - WITHIN for c, _ in pairs),
                  sum(q >= 1 - WITHIN for _, q in pairs),
                  statistics.fmean(c for c, _ in pairs), statistics.fmean(q for _, q in pairs))
            for cls, pairs in found.items()}


KNEE_BUCKETS = ((-math.inf, 0.0), (0.0, 0.025), (0.025, 0.05), (0.05, math.inf))


def knees(sets: Sequence[TestSet]) -> dict[tuple[SizeClass, bool, int], tuple[int, int]]:
    """(size class, along the same axis, bucket of `KNEE_BUCKETS`) -> (cells whose
    doubling along one axis gained that much, of which the halving along the same axis, or
    for large files the other, lost more than 5%), over every (cc, p) with both measured
    (each cell the median of every repeat of every pipelining depth)."""
    out: dict[tuple[SizeClass, bool, int], tuple[int, int]] = {}
    for cls, rate in classed_rates(sets):
        for (cc, p), ref in rate.items():
            for up_axis in (0, 1):
                for down_axis in ((0, 1) if cls is SizeClass.LARGE else (up_axis,)):
                    up = rate.get((cc * 2, p) if up_axis == 0 else (cc, p * 2))
                    down = rate.get((cc // 2, p) if down_axis == 0 else (cc, p // 2))
                    if (cc, p)[down_axis] < 2 or up is None or down is None or ref <= 0:
                        continue
                    gain = up / ref - 1
                    bucket = next(i for i, (lo, hi) in enumerate(KNEE_BUCKETS)
                                  if lo <= gain < hi)
                    key = (cls, up_axis == down_axis, bucket)
                    n, lost = out.get(key, (0, 0))
                    out[key] = (n + 1, lost + (down / ref - 1 < -WITHIN))
    return out


def losses_above(sets: Sequence[TestSet]) -> dict[tuple[SizeClass, str, bool], tuple[int, int]]:
    """(size class, axis, whether the same halving lost more than 5% at a higher value of
    the other axis) -> (pairs, of which the halving below lost more than 5%), over every
    (cc, p) whose halving along the axis was measured, each paired with every (cc, p') with
    p' > p (or (cc', p) with cc' > cc) whose same halving was measured too (each cell the
    median of every repeat of every pipelining depth): `path_history.lost_above`'s evidence."""
    out: dict[tuple[SizeClass, str, bool], tuple[int, int]] = {}
    for cls, rate in classed_rates(sets):
        for cell, here in rate.items():
            for axis in (0, 1):
                if cell[axis] < 2 or _half(cell, axis) not in rate or here <= 0:
                    continue
                for above, there in rate.items():
                    if above[axis] != cell[axis] or above[1 - axis] <= cell[1 - axis] \
                            or _half(above, axis) not in rate or there <= 0:
                        continue
                    key = (cls, ("cc", "p")[axis], _lost(rate, above, axis))
                    n, below = out.get(key, (0, 0))
                    out[key] = (n + 1, below + _lost(rate, cell, axis))
    return out


DOUBLING_SHARES = (0.5, 0.9, 0.95, 0.975)


def doubling_losses(sets: Sequence[TestSet]) -> dict[SizeClass, list[float]]:
    """Size class -> what each doubling of cc or p lost (1 - its rate over the cell's; a
    gain is a negative loss), sorted, over every (cc, p) with its doubling measured (each
    cell the median of every repeat of every pipelining depth): how far below a setting a
    try of twice its streams reads with no load that moved (`online.FELL_SHARE`)."""
    out: dict[SizeClass, list[float]] = defaultdict(list)
    for cls, rate in classed_rates(sets):
        for (cc, p), ref in rate.items():
            for up in ((cc * 2, p), (cc, p * 2)):
                if up in rate and ref > 0:
                    out[cls].append(1 - rate[up] / ref)
    return {cls: sorted(values) for cls, values in out.items()}


def _half(cell: tuple[int, int], axis: int) -> tuple[int, int]:
    return (cell[0] // 2, cell[1]) if axis == 0 else (cell[0], cell[1] // 2)


def _lost(rate: Rates, cell: tuple[int, int], axis: int) -> bool:
    """Whether halving `cell` along `axis` lost more than 5%."""
    return rate[_half(cell, axis)] / rate[cell] - 1 < -WITHIN


def report(sets: Sequence[TestSet], min_mb: float, totals: Sequence[int]) -> str:
    large = [(t, layouts(t, totals)) for t in sets if t.key[2] >= min_mb * 1e6]
    large = [(t, table) for t, table in large if table]
    if not large:
        raise TransferLogError(", ".join(sorted({Path(r.origin).name for t in sets
                                                  for r in t.rows})),
                               f"no dataset of files of {min_mb:g} MB or more measured a "
                               f"total of {'/'.join(map(str, totals))} streams in two ways")
    levels = sorted({cc for _, table in large for ways in table.values() for cc in ways})
    title = f"### Streams laid out as cc transfers of p streams (files of {min_mb:g} MB or more)"
    lines = [title, "",
             "| dataset | cc x p | " + " | ".join(f"cc {cc}" for cc in levels)
             + " | best |",
             "| --- | ---: | " + " | ".join("---:" for _ in levels) + " | ---: |"]
    for t, table in large:
        for total, ways in table.items():
            cells = [f"{ways[cc]:.0f}" if cc in ways else "-" for cc in levels]
            best = max(ways, key=lambda cc: ways[cc])
            lines.append(f"| {t.name} | {total} | " + " | ".join(cells) + f" | cc {best} |")
    note = "Mbit/s: the median of every repeat of the (cc, p) cell, every pipelining depth pooled."
    lines += ["", note, "",
              "### Each two concurrencies at the same total of streams", "",
              "| cc a | cc b | a beat b | of |", "| ---: | ---: | ---: | ---: |"]
    for (a, b), (won, of) in sorted(wins([table for _, table in large]).items()):
        lines.append(f"| {a} | {b} | {won} | {of} |")
    lines += _head("### A halving along one axis that lost more than 5%: the other axis "
                   "(every dataset)",
                   ["size class", "halvings that lost", "the other axis lost too", "share"], 1)
    order = list(SizeClass)
    for cls, (n, both) in sorted(halvings(sets).items(), key=lambda e: order.index(e[0])):
        if n:
            lines.append(f"| {cls.value} | {n} | {both} | {both / n:.2f} |")
    lines += _head(f"### Halving cc or p near the best (cells within {NEAR_BEST:.0%} of "
                   "their dataset's best, every dataset)",
                   ["size class", "cells", "halving cc kept within 5%", "halving p kept",
                    "cc kept on average", "p kept on average"], 1)
    for cls, (n, cc_kept, p_kept, cc_mean, p_mean) in sorted(
            halving_axes(sets).items(), key=lambda e: order.index(e[0])):
        lines.append(f"| {cls.value} | {n} | {cc_kept / n:.2f} | {p_kept / n:.2f} | "
                     f"{cc_mean:.3f} | {p_mean:.3f} |")
    lines += _head("### After a doubling that gained this much, a halving that lost more "
                   "than 5% (every dataset)",
                   ["size class", "halving along", "doubling gained", "cells", "halving lost",
                    "share"], 3)
    for (cls, same, bucket), (n, lost) in sorted(
            knees(sets).items(), key=lambda e: (order.index(e[0][0]), not e[0][1], e[0][2])):
        lo, hi = KNEE_BUCKETS[bucket]
        gained = (f"below {hi:.1%}" if lo == -math.inf else
                  f"{lo:.1%} or more" if hi == math.inf else f"{lo:.1%} to {hi:.1%}")
        lines.append(f"| {cls.value} | {'the same axis' if same else 'the other axis'} | "
                     f"{gained} | {n} | {lost} | {lost / n:.2f} |")
    lines += _head("### A halving that lost more than 5% with more streams on the other "
                   "axis: the same halving below it (every dataset)",
                   ["size class", "halving", "above it", "pairs", "lost more than 5%",
                    "share"], 3)
    for (cls, axis, above_lost), (n, below) in sorted(
            losses_above(sets).items(), key=lambda e: (order.index(e[0][0]), e[0][1],
                                                       not e[0][2])):
        lines.append(f"| {cls.value} | {axis} | {'lost' if above_lost else 'kept'} | {n} | "
                     f"{below} | {below / n:.2f} |")
    losses = doubling_losses(sets)
    lines += _head("### What a doubling of cc or p lost (every dataset): the share of "
                   "doublings that lost less",
                   ["size class", "doublings",
                    *[f"{share:.1%}" for share in DOUBLING_SHARES]], 1)
    every = sorted(v for values in losses.values() for v in values)
    for name, values in [*[(cls.value, losses[cls]) for cls in order if cls in losses],
                         ("every class", every)]:
        cut = [f"{values[min(int(share * len(values)), len(values) - 1)]:.1%}"
               for share in DOUBLING_SHARES]
        lines.append(f"| {name} | {len(values)} | " + " | ".join(cut) + " |")
    return "\n".join(lines)


def _head(title: str, columns: Sequence[str], text_columns: int) -> list[str]:
    """A table's title and header lines, after a blank line: its first `text_columns`
    columns left-aligned, the rest (figures) right-aligned."""
    aligns = ["---" if i < text_columns else "---:" for i in range(len(columns))]
    return ["", title, "", "| " + " | ".join(columns) + " |", "| " + " | ".join(aligns) + " |"]


def main(argv: Sequence[str] | None = None) -> int:
    p = tables_parser(__doc__)
    p.add_argument("--min-mb", type=float, default=1000.0,
                   help="the smallest file size, in MB, of a dataset that counts (1000)")
    p.add_argument("--totals", default="16,32,64",
                   help="the totals of streams (cc x p) compared, comma-separated (16,32,64)")
    args = p.parse_args(argv)
    try:
        totals = [int(word) for word in args.totals.split(",")]
    except ValueError:
        p.error(f"--totals {args.totals!r}: expected whole numbers, comma-separated")
    return print_report(args.tables, lambda sets: report(sets, args.min_mb, totals))


if __name__ == "__main__":
    sys.exit(main())
