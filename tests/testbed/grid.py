"""Ground truth for multi-file optimizers: a dataset moved once per (cc, p, pp, fast) cell.

Each run is one third-party ``globus-url-copy -f LIST -cc CC -p P [-pp] [-fast]`` of every
file of a dataset from one site to another over the emulated link, timed on the monotonic
clock from the tool's start to its exit (set-up of the control and data channels included).
A run counts only when the tool exited 0 and every file arrived with its size; it is then
one row in the columns of the HARP grids (`HARP_COLUMNS`), in their units:

    FileSize     average bytes per file          RTT          seconds (the link's)
    FileCount    files in the dataset            BufferSize   bytes (see `buffer_bytes`)
    Bandwidth    bit/s (the link's rate)         Throughput   total bytes * 8 / Duration / 1e6
    Parallelism, Concurrency   -p, -cc           Duration     seconds
    Pipelining   a depth as the HARP grids and Stork read it: 1 = off, 2 = on (the grid's
                 pp axis is 0 or 1: globus-url-copy's -pp takes no depth)
    Fast         0 or 1 (-fast)
    Date, Time   start of the run, UTC (2024-05-01, 14:03:07.123456)
    Source, Destination        site names
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.testbed.dataset import Dataset, problems
from tests.testbed.netns import Testbed
from tests.testbed.topology import Link

HARP_COLUMNS = ("FileSize", "FileCount", "Bandwidth", "RTT", "BufferSize", "Parallelism",
                "Concurrency", "Pipelining", "Fast", "Throughput", "Duration", "Date", "Time",
                "Source", "Destination")
# axis -> (smallest, largest) value; an axis not given in a grid takes its default
AXES: dict[str, tuple[int, int]] = {"cc": (1, 256), "p": (1, 256), "pp": (0, 1), "fast": (0, 1)}
DEFAULTS: dict[str, int] = {"cc": 1, "p": 1, "pp": 0, "fast": 0}


class GridError(ValueError):
    """A grid that cannot be read, or an output file that is not a grid table."""


class RunFailed(RuntimeError):
    """One run that is not a measurement: the tool failed, timed out, or files are not whole."""

    def __init__(self, cell: Cell, reason: str) -> None:
        super().__init__(f"{cell.label}: {reason}")
        self.cell = cell
        self.reason = reason


@dataclass(frozen=True)
class Cell:
    cc: int
    p: int
    pp: int
    fast: int

    @property
    def label(self) -> str:
        return f"cc={self.cc} p={self.p} pp={self.pp} fast={self.fast}"

    def flags(self) -> list[str]:
        return (["-cc", str(self.cc), "-p", str(self.p)] + (["-pp"] if self.pp else [])
                + (["-fast"] if self.fast else []))


def parse_grid(words: Sequence[str]) -> tuple[Cell, ...]:
    """``["cc=1,2,4", "p=1,4", "pp=0,1"]`` -> every combination, Parallelism outermost, then
    Concurrency, Pipelining, Fast (the column order). Axes not given take `DEFAULTS`."""
    values: dict[str, list[int]] = {}
    for word in words:
        name, sep, text = word.partition("=")
        if not sep or name not in AXES:
            raise GridError(f"grid axis {word!r}: expected NAME=V,V,... with NAME one of "
                            f"{', '.join(AXES)}")
        if name in values:
            raise GridError(f"grid axis {name!r} given twice")
        low, high = AXES[name]
        try:
            numbers = [int(v) for v in text.split(",")]
        except ValueError:
            raise GridError(f"grid axis {word!r}: values are whole numbers") from None
        bad = [v for v in numbers if not low <= v <= high]
        if bad:
            raise GridError(f"grid axis {word!r}: {name} takes {low} to {high}, got {bad}")
        values[name] = list(dict.fromkeys(numbers))
    axes = [values.get(name, [DEFAULTS[name]]) for name in ("p", "cc", "pp", "fast")]
    return tuple(Cell(cc, p, pp, fast) for p, cc, pp, fast in itertools.product(*axes))


@dataclass(frozen=True)
class GridRow:
    """One measured run, in the units of the HARP grid tables."""

    file_size_bytes: int
    file_count: int
    bandwidth_bps: int
    rtt_s: float
    buffer_bytes: int
    parallelism: int
    concurrency: int
    pipelining: int
    fast: int
    throughput_mbps: float
    duration_s: float
    started: dt.datetime  # UTC
    source: str
    destination: str

    def cells(self) -> list[str]:
        """The row as text, in `HARP_COLUMNS` order."""
        return [str(self.file_size_bytes), str(self.file_count), str(self.bandwidth_bps),
                f"{self.rtt_s:g}", str(self.buffer_bytes), str(self.parallelism),
                str(self.concurrency), str(self.pipelining), str(self.fast),
                str(round(self.throughput_mbps, 6)), str(round(self.duration_s, 6)),
                self.started.strftime("%Y-%m-%d"), self.started.strftime("%H:%M:%S.%f"),
                self.source, self.destination]


def depth(pp: int) -> int:
    """The grid's pp (0 off, 1 on) as the Pipelining depth the transfer log reads."""
    return 2 if pp else 1


def measured(dataset: Dataset, link: Link, cell: Cell, buffer: int, duration_s: float,
             started: dt.datetime, source: str, destination: str) -> GridRow:
    """The row of a run that moved all of `dataset` in `duration_s` seconds."""
    return GridRow(dataset.mean_bytes, dataset.count, round(link.rate_mbps * 1e6),
                   link.rtt_ms / 1e3, buffer, cell.p, cell.cc, depth(cell.pp), cell.fast,
                   dataset.total_bytes * 8 / duration_s / 1e6, duration_s, started, source,
                   destination)


class GridLog:
    """A CSV file of grid rows that grows one row per run (a stopped sweep keeps its rows).
    A new or empty file gets the header; an existing one must have exactly that header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists() and path.stat().st_size > 0:
            with open(path, newline="") as handle:
                header = next(csv.reader(handle), [])
            if tuple(header) != HARP_COLUMNS:
                raise GridError(f"{path}: not a grid table (header {','.join(header)[:120]!r});"
                                " give a new file")
        else:
            with open(path, "w", newline="") as handle:
                csv.writer(handle, lineterminator="\n").writerow(HARP_COLUMNS)

    def append(self, row: GridRow) -> None:
        with open(self.path, "a", newline="") as handle:
            csv.writer(handle, lineterminator="\n").writerow(row.cells())


def buffer_bytes(bed: Testbed, src: str, dst: str, tcp_bs: int | None) -> int:
    """The TCP buffer of the data channels: `tcp_bs` when given (``-tcp-bs``), else the
    kernel's autotuning ceiling, the smaller of the sender's `tcp_wmem` and the receiver's
    `tcp_rmem` maximum, read inside the sites."""
    if tcp_bs:
        return tcp_bs
    ceilings = []
    for site, key in ((src, "tcp_wmem"), (dst, "tcp_rmem")):
        text = bed.run(site, ["cat", f"/proc/sys/net/ipv4/{key}"], timeout=10).stdout.split()
        if len(text) != 3:
            raise RuntimeError(f"site {site}: cannot read net.ipv4.{key}")
        ceilings.append(int(text[2]))
    return min(ceilings)


def command(cell: Cell, listfile: Path, tcp_bs: int | None) -> list[str]:
    """The one globus-url-copy command line of a run (no -c: the first error ends it)."""
    return (["globus-url-copy", *cell.flags()]
            + (["-tcp-bs", str(tcp_bs)] if tcp_bs else []) + ["-f", str(listfile)])


def default_timeout_s(dataset: Dataset, link: Link) -> float:
    """Generous: ten times the time at the link rate, plus ten round trips a file, plus 60 s."""
    return 60 + 10 * dataset.total_bytes * 8 / (link.rate_mbps * 1e6) \
        + 10 * dataset.count * link.rtt_ms / 1e3


def run_cell(bed: Testbed, link: Link, src: str, dst: str, dataset: Dataset, src_dir: Path,
             dst_dir: Path, cell: Cell, buffer: int, tcp_bs: int | None = None,
             timeout_s: float | None = None) -> GridRow:
    """Move all of `dataset` from `src_dir` at `src` into `dst_dir` at `dst` (emptied first)
    once, third party; its row, or RunFailed. The files stay in `dst_dir` until the next run."""
    shutil.rmtree(dst_dir, ignore_errors=True)
    dst_dir.mkdir(parents=True)
    listfile = dst_dir.parent / f"{dst_dir.name}.list"
    listfile.write_text("".join(f"{bed.url(src, src_dir / n)} {bed.url(dst, dst_dir / n)}\n"
                                for n in dataset.names()))
    timeout = timeout_s or default_timeout_s(dataset, link)
    started = dt.datetime.now(dt.UTC)
    start = time.monotonic()
    try:
        result = bed.run(src, command(cell, listfile, tcp_bs), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunFailed(cell, f"no end after {timeout:.0f} s") from None
    duration = time.monotonic() - start
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().replace("\n", " | ")[-400:]
        raise RunFailed(cell, f"globus-url-copy exited {result.returncode}: {tail}")
    missing = problems(dataset, dst_dir)
    if missing:
        raise RunFailed(cell, f"{len(missing)} of {dataset.count} files not whole "
                              f"(exit 0): {', '.join(missing[:3])}")
    return measured(dataset, link, cell, buffer, duration, started, src, dst)


@dataclass
class GridSweep:
    rows: list[GridRow] = field(default_factory=list)
    failures: list[RunFailed] = field(default_factory=list)


def sweep_grid(bed: Testbed, link: Link, src: str, dst: str, dataset: Dataset, src_dir: Path,
               cells: Iterable[Cell], repeat: int = 1, tcp_bs: int | None = None,
               timeout_s: float | None = None,
               on_row: Callable[[GridRow], None] | None = None,
               on_failure: Callable[[RunFailed], None] | None = None) -> GridSweep:
    """Every cell `repeat` times, rounds interleaved (drift spreads over all cells). The last
    run's files are left in ``<dst site dir>/grid-in``."""
    cells = list(cells)
    buffer = buffer_bytes(bed, src, dst, tcp_bs)
    dst_dir = bed.site_dir(dst) / "grid-in"
    done = GridSweep()
    for _ in range(repeat):
        for cell in cells:
            try:
                row = run_cell(bed, link, src, dst, dataset, src_dir, dst_dir, cell, buffer,
                               tcp_bs, timeout_s)
            except RunFailed as failure:
                done.failures.append(failure)
                if on_failure:
                    on_failure(failure)
                continue
            done.rows.append(row)
            if on_row:
                on_row(row)
    return done
