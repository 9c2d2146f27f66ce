"""The table the rate regressions fit: predictors (RTT, flows, and where they vary:
concurrency, pipelining, file size) and the measured rate, from the transfer log's records or
from a CSV in the formats of the public transfer logs.

Two CSV formats are read, told apart by their header:
* the HARP grids (`Parallelism`, `Concurrency`, `Pipelining`, ...): through
  `stork.translog.read_grid_csv`, with its rules for the published tables' defects (units,
  rows above the link);
* the parallelism sweeps (`P`, `CC`, `PP`, `RTT`, `Throughput`, `FileSize`, ...): `P` is
  the flows; `CC` and `PP` are "na" where a row did not use them (read as 1); rows whose
  `P`, `RTT` or `Throughput` is not a number, or whose throughput is not positive, are
  skipped and counted.

`flows` is the TCP streams per file (`-p`, the paper's number of flows); `rtt_ms` the
path's round-trip time in milliseconds. A predictor other than those two that does not vary
in the table is left out (a model cannot learn from a constant); RTT and flows are always
kept, so a table at one RTT still fits, and a prediction at another RTT is flagged as outside
the data. RTTs the daemon measured (a TCP connect per transfer) jitter around the path's: a
held-out RTT takes the rows within RTT_TOLERANCE of it (`Table.near_rtt`), and `rtt_groups`
names the RTTs a table holds.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from stork.errors import AnalyticsError, TransferLogError
from stork.translog import TransferRecord, parse_grid_text

RTT = "rtt_ms"
FLOWS = "flows"
OPTIONAL = ("concurrency", "pipelining", "file_mb")
SWEEP_COLUMNS = ("P", "RTT", "Throughput")  # the parallelism sweeps' columns that must be there
_MISSING = frozenset({"", "na", "n/a", "nan", "none", "null"})
RTT_TOLERANCE = 0.1  # a measured RTT within this share of another is taken as the same RTT


@dataclass(frozen=True)
class Table:
    """Rows of predictors and the measured rate (decimal Mbit/s)."""

    source: str
    columns: tuple[str, ...]  # predictor names; the first two are RTT and FLOWS
    x: npt.NDArray[np.float64]  # rows x columns
    y: npt.NDArray[np.float64]  # Mbit/s
    skipped: int = 0  # rows of the source that could not be used

    def __len__(self) -> int:
        return len(self.y)

    def column(self, name: str) -> npt.NDArray[np.float64]:
        return self.x[:, self.columns.index(name)]

    def ranges(self) -> dict[str, tuple[float, float]]:
        return {c: (float(self.x[:, i].min()), float(self.x[:, i].max()))
                for i, c in enumerate(self.columns)}

    def typical(self) -> dict[str, float]:
        """Each predictor's most frequent value (what a prediction holds the others at)."""
        out = {}
        for i, c in enumerate(self.columns):
            values, counts = np.unique(self.x[:, i], return_counts=True)
            out[c] = float(values[int(np.argmax(counts))])
        return out

    def near_rtt(self, rtt_ms: float, tolerance: float = RTT_TOLERANCE) -> npt.NDArray[np.bool_]:
        """The rows whose RTT is within `tolerance` (a share of `rtt_ms`) of `rtt_ms`: a
        measured RTT is never exactly the nominal one (0: the same value only)."""
        rtts = self.column(RTT)
        return np.isclose(rtts, rtt_ms) | (np.abs(rtts - rtt_ms) <= tolerance * abs(rtt_ms))

    def without(self, mask: npt.NDArray[np.bool_], source: str) -> Table:
        """The rows where `mask` is false."""
        keep = ~mask
        return Table(source, self.columns, self.x[keep], self.y[keep], self.skipped)

    def only(self, mask: npt.NDArray[np.bool_], source: str) -> Table:
        return Table(source, self.columns, self.x[mask], self.y[mask], self.skipped)


def rtt_groups(rtts_ms: npt.NDArray[np.float64],
               tolerance: float = RTT_TOLERANCE) -> list[tuple[float, float, int]]:
    """Measured RTTs gathered into the RTTs they were measured at: in increasing order, a
    value more than `tolerance` (a share) above its group's lowest starts a new group.
    (lowest, highest, rows) per group."""
    groups: list[tuple[float, float, int]] = []
    for value in np.sort(np.asarray(rtts_ms, dtype=float)):
        if groups and value <= groups[-1][0] * (1 + tolerance) + 1e-9:
            low, _, count = groups[-1]
            groups[-1] = (low, float(value), count + 1)
        else:
            groups.append((float(value), float(value), 1))
    return groups


def groups_text(groups: Sequence[tuple[float, float, int]]) -> str:
    """`rtt_groups` as text: "10, 40.2..40.9 (12 rows)" (the rows only where they differ)."""
    counts = {count for _, _, count in groups}
    return ", ".join((f"{low:.4g}" if low == high else f"{low:.4g}..{high:.4g}")
                     + (f" ({count} rows)" if len(counts) > 1 else "")
                     for low, high, count in groups)


def from_rows(source: str, rows: Sequence[dict[str, float]], skipped: int = 0) -> Table:
    """Rows of {rtt_ms, flows, concurrency, pipelining, file_mb, mbps} -> a Table that keeps
    RTT, flows and the optional predictors that vary."""
    if not rows:
        raise AnalyticsError(source, f"no usable rows ({skipped} skipped)")
    columns = [RTT, FLOWS] + [c for c in OPTIONAL
                              if len({r[c] for r in rows}) > 1]
    x = np.array([[r[c] for c in columns] for r in rows], dtype=float)
    y = np.array([r["mbps"] for r in rows], dtype=float)
    return Table(source, tuple(columns), x, y, skipped)


def from_records(records: Sequence[TransferRecord], source: str = "the transfer log") -> Table:
    """Completed records with a known RTT and a positive throughput."""
    return from_rows(source, *_record_rows(records))


def read_csv(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Table:
    """One CSV, or several fitted together, in the HARP grid or the parallelism-sweeps
    format (see the module's text)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows: list[dict[str, float]] = []
    skipped = 0
    for path in paths:
        more, skips = read_rows(path)
        rows += more
        skipped += skips
    return from_rows(" + ".join(os.fspath(p) for p in paths), rows, skipped)


def _record_rows(records: Sequence[TransferRecord]) -> tuple[list[dict[str, float]], int]:
    rows, skipped = [], 0
    for r in records:
        if r.outcome != "completed" or r.rtt_s is None or r.throughput_mbps <= 0:
            skipped += 1
            continue
        rows.append({RTT: r.rtt_s * 1000, FLOWS: float(r.p), "concurrency": float(r.cc),
                     "pipelining": float(r.pp), "file_mb": r.file_size_bytes / 1e6,
                     "mbps": r.throughput_mbps})
    return rows, skipped


def read_rows(path: str | os.PathLike[str]) -> tuple[list[dict[str, float]], int]:
    """The usable rows of one CSV and how many were skipped."""
    name = os.fspath(path)
    try:
        text = Path(name).read_bytes().decode("utf-8-sig", errors="replace")
    except OSError as exc:
        raise AnalyticsError(name, f"cannot read: {exc.strerror or exc}") from None
    lines = text.splitlines()
    header_line = next((line for line in lines if line.strip()), "")
    header = [h.strip() for h in next(csv.reader([header_line]))] if header_line else []
    if "Parallelism" in header:
        try:
            records, bad = parse_grid_text(text, Path(name).name, where=name)
        except TransferLogError as exc:
            raise AnalyticsError(name, exc.reason) from None
        usable, dropped = _record_rows(records)
        return usable, dropped + len(bad)
    missing = [c for c in SWEEP_COLUMNS if c not in header]
    if missing:
        raise AnalyticsError(name, f"missing column{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(missing)}: expected the HARP grid columns "
                                   f"(Parallelism, RTT, Throughput, ...) or the parallelism "
                                   f"sweeps' (P, RTT, Throughput, ...); header: "
                                   f"{', '.join(header[:16]) or '(none)'}")
    rows: list[dict[str, float]] = []
    skipped = 0
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        try:
            p, rtt, mbps = (float(row[c]) for c in ("P", "RTT", "Throughput"))
        except (TypeError, ValueError):
            skipped += 1
            continue
        if mbps <= 0 or p < 1 or rtt < 0:
            skipped += 1
            continue
        rows.append({RTT: rtt * 1000, FLOWS: p, "concurrency": _or_one(row.get("CC")),
                     "pipelining": _or_one(row.get("PP")),
                     "file_mb": _or_one(row.get("FileSize"), 0.0) / 1e6, "mbps": mbps})
    return rows, skipped


def _or_one(text: str | None, default: float = 1.0) -> float:
    if text is None or text.strip().lower() in _MISSING:
        return default
    try:
        return max(float(text), default)
    except ValueError:
        return default
