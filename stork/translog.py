"""The transfer log: one `TransferRecord` per finished chunk or file of a transfer. Pure.

Every optimizer learns from these rows (`stork.tuning`); the store keeps them (history is
additive: rows are added, never rewritten) and `stork_history import/export` moves them in
and out of CSV tables in the column format of the HARP grids (`GRID_COLUMNS`):

    FileSize     average bytes per file           Parallelism   -p (streams per file)
    FileCount    files                            Concurrency   -cc (files in flight)
    Bandwidth    the path's bottleneck rate       Pipelining    depth (1 = off; 0 read as 1)
    RTT          seconds                          Fast          0 or 1 (-fast)
    BufferSize   TCP buffer, bytes                Throughput    see below
    Duration     seconds                          Date, Time    start of the run (UTC)
    Source, Destination   host names

Reading (`read_grid_csv`) accepts any line endings (LF, CRLF, and the CR-only endings of
old spreadsheet exports), a UTF-8 byte-order mark, blank lines and extra columns (`Note`).
Rows that cannot be used are returned as `Skipped` with their line number and the reason,
never silently dropped. The rules, each from a defect of the published tables:

* Bandwidth: a value below 1e6 is in Mbit/s (some tables write 10000 for 10 Gbit/s), a value
  of 1e6 or more is in bit/s (10000000000). No real path is slower than 1 Mbit/s, and no
  table writes a rate in Mbit/s of a million or more, so the two cannot be confused.
  Empty or ``na``: unknown (None). `write_grid_csv` follows the same rule (bit/s from
  1 Mbit/s up, Mbit/s below), so its tables read back unchanged.
* Throughput: the published grids write ``bytes * 8 / Duration / 2**20`` (Mibit/s, although
  the column says Mbit/s; checked on every row of every table), Stork and the testbed write
  ``bytes * 8 / Duration / 1e6``. A row's unit is told by comparing it with its own
  FileSize * FileCount / Duration: Mibit/s values are converted to Mbit/s (x 1.048576), a
  row that matches neither within 1% is skipped.
* BufferSize 0 (a table that did not record the buffer, or a system default it could not
  read) is unknown (None), as are an empty cell and ``na``; a negative size is skipped.
* A throughput above the path's Bandwidth is impossible (a 10 Gbit/s link cannot carry
  66 Gbit/s): skipped.
* Date: ``2015-04-08``, ``4/8/15`` or ``4/8/2015``. Time: ``15:56:00.989789`` or, in tables
  an old spreadsheet rewrote, ``57:22.9`` (minutes and seconds: the hour is lost). For the
  latter the hour is counted from 0 at each new date and goes up by one each time the
  minutes wrap (the rows are in the order they ran and a run is shorter than an hour), so
  the times of one day are right relative to each other, not absolutely. All times are UTC.

A record's `throughput_mbps` is always decimal Mbit/s, `origin` says where it came from
("stork" for Stork's own transfers, the file's name for an import). The CSV format has no
column for `sharing`, `outcome` or a partial `bytes_moved`: imported rows are completed
transfers of the whole dataset with `sharing` 0 (unknown), and `write_grid_csv` writes
completed records only.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from stork.dataset.chunks import Params
from stork.errors import TransferLogError

COMPLETED: Final = "completed"
FAILED: Final = "failed"
ORIGIN_STORK: Final = "stork"

GRID_COLUMNS: Final = ("FileSize", "FileCount", "Bandwidth", "RTT", "BufferSize",
                       "Parallelism", "Concurrency", "Pipelining", "Fast", "Throughput",
                       "Duration", "Date", "Time", "Source", "Destination")
MBPS_BELOW: Final = 1e6  # a Bandwidth below this is in Mbit/s, else bit/s
MIBIT: Final = 2**20 / 1e6  # one Mibit/s in Mbit/s
UNIT_TOLERANCE: Final = 0.01  # how close Throughput must be to bytes/Duration in one unit
_MISSING: Final = frozenset({"", "na", "n/a", "nan", "none", "null"})


@dataclass(frozen=True)
class TransferRecord:
    """One finished chunk or file of a transfer: what moved, how, and how fast."""

    time: float  # start, unix seconds (UTC)
    src_host: str
    dest_host: str
    rtt_s: float | None  # the path's round-trip time, when known
    bandwidth_bps: float | None  # the path's bottleneck rate, bit/s, when known
    buffer_bytes: int | None  # TCP buffer, when known
    file_size_bytes: float  # average per file
    file_count: int
    cc: int
    p: int
    pp: int  # pipelining depth, 1 = off
    fast: bool
    bytes_moved: int
    duration_s: float
    throughput_mbps: float  # decimal Mbit/s: bytes_moved * 8 / duration_s / 1e6
    sharing: int = 0  # other transfers on the same link at the time; 0 when unknown
    outcome: str = COMPLETED  # "completed", "failed", ...
    origin: str = ORIGIN_STORK  # "stork", or the name of the file it was imported from
    # a stretch of a flow (one setting and load): the standard deviation of its 1-second
    # windows' rates, Mbit/s; None for a row that is not one (a single file, an import)
    spread_mbps: float | None = None
    job_id: int | None = None  # the Stork job that moved it (None: an import, or older rows)

    @property
    def params(self) -> Params:
        return Params(cc=self.cc, p=self.p, pp=self.pp)

    @property
    def streams(self) -> int:
        """TCP data connections open at once: cc * p."""
        return self.cc * self.p


@dataclass(frozen=True)
class Skipped:
    """A row of an imported table that was not used."""

    line: int  # 1-based line number in the file
    reason: str
    text: str  # the line as it was (cut to 200 characters)


class _RowError(ValueError):
    pass


def read_grid_csv(path: str | os.PathLike[str]) -> tuple[list[TransferRecord],
                                                          list[Skipped]]:
    """A table in the HARP grid columns -> its usable rows and the skipped ones (see the
    module's text for the rules). Raises `TransferLogError` when the file has no header
    with every column of `GRID_COLUMNS`, or cannot be read."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except OSError as exc:
        raise TransferLogError(name, f"cannot read: {exc.strerror or exc}") from None
    return parse_grid_text(data.decode("utf-8-sig", errors="replace"), Path(name).name,
                           where=name)


def parse_grid_text(text: str, origin: str, *, where: str = "") -> tuple[
        list[TransferRecord], list[Skipped]]:
    """`read_grid_csv` on text already read; `origin` names the rows' source."""
    where = where or origin
    lines = text.removeprefix("\ufeff").splitlines()  # \n, \r\n and a lone \r all end a line
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise TransferLogError(where, "empty file")
    header = [h.strip() for h in next(csv.reader([lines[header_at]]))]
    missing = [c for c in GRID_COLUMNS if c not in header]
    if missing:
        raise TransferLogError(where, f"not a transfer grid table: no column "
                                      f"{', '.join(missing)} (header: {', '.join(header[:16])})")
    index = {c: header.index(c) for c in GRID_COLUMNS}
    clock = _Clock()
    records: list[TransferRecord] = []
    skipped: list[Skipped] = []
    for number, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        if not line.strip():
            continue
        fields = next(csv.reader([line]))
        try:
            if len(fields) <= max(index.values()):
                raise _RowError(f"{len(fields)} fields, the header has {len(header)}")
            row = {c: fields[i].strip() for c, i in index.items()}
            records.append(_record(row, clock, origin))
        except _RowError as exc:
            skipped.append(Skipped(number, str(exc), line[:200]))
    return records, skipped


def write_grid_csv(records: Iterable[TransferRecord],
                   path_or_stream: str | os.PathLike[str] | IO[str]) -> int:
    """Write the completed records as a table in `GRID_COLUMNS` (LF line endings, decimal
    Mbit/s, UTC times); returns how many rows were written."""
    if isinstance(path_or_stream, (str, os.PathLike)):
        with open(path_or_stream, "w", newline="", encoding="utf-8") as handle:
            return _write(records, handle)
    return _write(records, path_or_stream)


def grid_csv_text(records: Iterable[TransferRecord]) -> str:
    """`write_grid_csv` into a string."""
    out = io.StringIO()
    _write(records, out)
    return out.getvalue()


def _write(records: Iterable[TransferRecord], handle: IO[str]) -> int:
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(GRID_COLUMNS)
    written = 0
    for r in records:
        if r.outcome != COMPLETED:
            continue
        started = dt.datetime.fromtimestamp(r.time, dt.UTC)
        writer.writerow([_num(r.file_size_bytes), r.file_count, _bandwidth_text(r.bandwidth_bps),
                         _num(r.rtt_s), _num(r.buffer_bytes), r.p, r.cc, r.pp, int(r.fast),
                         _num(r.throughput_mbps), _num(r.duration_s),
                         started.strftime("%Y-%m-%d"), started.strftime("%H:%M:%S.%f"),
                         r.src_host, r.dest_host])
        written += 1
    return written


def _num(value: float | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _bandwidth_text(bps: float | None) -> str:
    if bps is None:
        return ""
    return _num(bps) if bps >= MBPS_BELOW else _num(bps / 1e6)


def bandwidth_bps(value: float) -> float:
    """A Bandwidth cell -> bit/s: below 1e6 it is Mbit/s, else bit/s."""
    return value * 1e6 if value < MBPS_BELOW else value


# -- one row -------------------------------------------------------------------------------

def _record(row: dict[str, str], clock: _Clock, origin: str) -> TransferRecord:
    size = _float(row, "FileSize", positive=True)
    count = _int(row, "FileCount", least=1)
    bw = _optional_float(row, "Bandwidth")
    bw_bps = bandwidth_bps(bw) if bw is not None else None
    rtt = _optional_float(row, "RTT")
    buffer = _optional_float(row, "BufferSize", zero_unknown=True)
    p = _int(row, "Parallelism", least=1)
    cc = _int(row, "Concurrency", least=1)
    pp = max(_int(row, "Pipelining", least=0), 1)
    fast = _int(row, "Fast", least=0)
    if fast > 1:
        raise _RowError(f"Fast {row['Fast']!r} is not 0 or 1")
    stated = _float(row, "Throughput", positive=True)
    duration = _float(row, "Duration", positive=True)
    for host in ("Source", "Destination"):
        if not row[host]:
            raise _RowError(f"no {host}")
    moved = size * count
    from_bytes = moved * 8 / duration / 1e6
    if math.isclose(stated, from_bytes, rel_tol=UNIT_TOLERANCE):
        mbps = stated
    elif math.isclose(stated * MIBIT, from_bytes, rel_tol=UNIT_TOLERANCE):
        mbps = stated * MIBIT
    else:
        raise _RowError(f"Throughput {stated:g} matches neither Mbit/s nor Mibit/s of "
                        f"FileSize*FileCount/Duration ({from_bytes:.6g} Mbit/s)")
    if bw_bps is not None and mbps * 1e6 > bw_bps:
        raise _RowError(f"throughput {mbps:.6g} Mbit/s above the link rate "
                        f"{bw_bps / 1e6:g} Mbit/s")
    when = clock.timestamp(row["Date"], row["Time"])
    return TransferRecord(
        time=when, src_host=row["Source"], dest_host=row["Destination"], rtt_s=rtt,
        bandwidth_bps=bw_bps, buffer_bytes=round(buffer) if buffer is not None else None,
        file_size_bytes=size, file_count=count, cc=cc, p=p, pp=pp, fast=bool(fast),
        bytes_moved=round(moved), duration_s=duration, throughput_mbps=mbps, origin=origin)


def _float(row: dict[str, str], column: str, *, positive: bool = False) -> float:
    text = row[column]
    try:
        value = float(text)
    except ValueError:
        raise _RowError(f"{column} {text!r} is not a number") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise _RowError(f"{column} {text!r} is not a positive number")
    return value


def _optional_float(row: dict[str, str], column: str, *,
                    zero_unknown: bool = False) -> float | None:
    """A positive number, or None where the cell is empty or ``na`` (or 0, with
    `zero_unknown`: a column where 0 means "not recorded")."""
    if row[column].lower() in _MISSING:
        return None
    if zero_unknown and _float(row, column) == 0:
        return None
    return _float(row, column, positive=True)


def _int(row: dict[str, str], column: str, *, least: int) -> int:
    value = _float(row, column)
    if not value.is_integer() or value < least:
        raise _RowError(f"{column} {row[column]!r} is not a whole number >= {least}")
    return int(value)


class _Clock:
    """Date and Time cells -> unix seconds; keeps the hour count of minutes-only times."""

    def __init__(self) -> None:
        self._date: dt.date | None = None
        self._hour = 0
        self._last_s = -1.0

    def timestamp(self, date_text: str, time_text: str) -> float:
        date = _date(date_text)
        parts = time_text.split(":")
        try:
            numbers = [float(x) for x in parts]
        except ValueError:
            raise _RowError(f"Time {time_text!r} is not H:M:S or M:S") from None
        if len(numbers) == 3:
            hours, minutes, seconds = numbers
        elif len(numbers) == 2:
            minutes, seconds = numbers
            in_hour = minutes * 60 + seconds
            if date != self._date:
                self._hour = 0
            elif in_hour < self._last_s:
                self._hour += 1
            self._date, self._last_s = date, in_hour
            hours = float(self._hour)
        else:
            raise _RowError(f"Time {time_text!r} is not H:M:S or M:S")
        if not (0 <= minutes < 60 and 0 <= seconds < 61 and hours >= 0):
            raise _RowError(f"Time {time_text!r} is out of range")
        midnight = dt.datetime(date.year, date.month, date.day, tzinfo=dt.UTC)
        return midnight.timestamp() + hours * 3600 + minutes * 60 + seconds


@functools.lru_cache(maxsize=4096)
def _date(text: str) -> dt.date:
    for fmt in ("%Y-%m-%d", "%m/%d/%y", "%m/%d/%Y"):
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    raise _RowError(f"Date {text!r} is not YYYY-MM-DD or M/D/YY")


def completed(records: Sequence[TransferRecord]) -> list[TransferRecord]:
    """The records of transfers that completed (what models learn from)."""
    return [r for r in records if r.outcome == COMPLETED]
