"""The transfer log's CSV format: units, line endings, skipped rows and the round trip."""

from __future__ import annotations

import datetime as dt
import io

import pytest

from stork.errors import StorkError, TransferLogError
from stork.translog import (
    FAILED,
    GRID_COLUMNS,
    TransferRecord,
    grid_csv_text,
    parse_grid_text,
    read_grid_csv,
    write_grid_csv,
)

HEADER = ",".join(GRID_COLUMNS)


def _line(*, size: str = "1000000", count: str = "10", bw: str = "10000000000",
          thr: str = "80", dur: str = "1", p: str = "2", cc: str = "4", pp: str = "8",
          date: str = "2015-04-08", time: str = "15:56:00.5") -> str:
    return ",".join([size, count, bw, "0.04", "33554432", p, cc, pp, "0", thr, dur, date, time,
                     "Stampede", "Gordon"])


def _record(**changes: object) -> TransferRecord:
    base = TransferRecord(
        time=1_428_508_560.25, src_host="a.example", dest_host="b.example", rtt_s=0.04,
        bandwidth_bps=1e10, buffer_bytes=33554432, file_size_bytes=3150088.5, file_count=3409,
        cc=32, p=1, pp=16, fast=False, bytes_moved=10738651696, duration_s=166.75,
        throughput_mbps=515.2, sharing=2, origin="stork")
    return TransferRecord(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_a_row_in_decimal_units() -> None:
    records, skipped = parse_grid_text(f"{HEADER}\n{_line()}\n", "t.csv")
    assert skipped == []
    (r,) = records
    assert (r.cc, r.p, r.pp, r.fast) == (4, 2, 8, False)
    assert r.throughput_mbps == 80.0  # 1e7 bytes * 8 / 1 s / 1e6
    assert r.bandwidth_bps == 1e10
    assert r.bytes_moved == 10_000_000 and r.file_count == 10
    assert r.origin == "t.csv" and r.sharing == 0 and r.outcome == "completed"
    assert r.time == dt.datetime(2015, 4, 8, 15, 56, 0, 500000, tzinfo=dt.UTC).timestamp()


def test_mibit_throughput_is_converted() -> None:
    # the published grids divide by 2**20: 1e7 bytes in 1 s is 76.2939 "Mbps" there
    records, skipped = parse_grid_text(f"{HEADER}\n{_line(thr='76.2939453125')}\n", "t.csv")
    assert skipped == []
    assert records[0].throughput_mbps == pytest.approx(80.0)


def test_bandwidth_unit_rule() -> None:
    text = f"{HEADER}\n{_line(bw='10000')}\n{_line(bw='1000000000')}\n{_line(bw='na')}\n"
    records, _ = parse_grid_text(text, "t.csv")
    assert [r.bandwidth_bps for r in records] == [1e10, 1e9, None]


def test_skipped_rows_say_where_and_why() -> None:
    text = "\n".join([
        HEADER,
        _line(),
        _line(thr="66379", dur="0.001205"),  # 66 Gbit/s on a 10 Gbit/s link
        _line(thr="fast"),
        _line(thr="50"),  # matches neither unit of bytes/Duration
        _line(cc="0"),
        "1,2,3",
        _line(date="yesterday"),
        "",
        _line(),
    ]) + "\n"
    records, skipped = parse_grid_text(text, "t.csv")
    assert len(records) == 2
    assert [s.line for s in skipped] == [3, 4, 5, 6, 7, 8]
    reasons = [s.reason for s in skipped]
    assert "above the link rate 10000 Mbit/s" in reasons[0]
    assert "Throughput 'fast' is not a number" in reasons[1]
    assert "matches neither" in reasons[2]
    assert "Concurrency '0'" in reasons[3]
    assert "3 fields" in reasons[4]
    assert "Date 'yesterday'" in reasons[5]
    assert skipped[4].text == "1,2,3"


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_any_line_endings(tmp_path, ending: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "g.csv"
    path.write_bytes(ending.join([HEADER, _line(), _line(cc="8"), ""]).encode())
    records, skipped = read_grid_csv(path)
    assert skipped == [] and [r.cc for r in records] == [4, 8]
    assert records[0].origin == "g.csv"


def test_extra_columns_and_bom() -> None:
    text = "\ufeff" + HEADER + ",Note\n" + _line() + ",BS=32MB\n"
    records, skipped = parse_grid_text(text, "t.csv")
    assert len(records) == 1 and skipped == []


def test_minutes_only_times_count_hours() -> None:
    lines = [HEADER, _line(date="3/31/15", time="57:22.9"), _line(date="3/31/15", time="04:09.5"),
             _line(date="3/31/15", time="09:01.2"), _line(date="4/1/15", time="02:00.0")]
    records, _ = parse_grid_text("\n".join(lines), "t.csv")
    day = dt.datetime(2015, 3, 31, tzinfo=dt.UTC).timestamp()
    assert [r.time - day for r in records] == pytest.approx(
        [57 * 60 + 22.9, 3600 + 4 * 60 + 9.5, 3600 + 9 * 60 + 1.2, 86400 + 120.0])


def test_pipelining_zero_is_off() -> None:
    records, _ = parse_grid_text(f"{HEADER}\n{_line(pp='0')}\n", "t.csv")
    assert records[0].pp == 1 and not records[0].params.pipelining


def test_not_a_table() -> None:
    with pytest.raises(TransferLogError, match="no column Bandwidth, RTT"):
        parse_grid_text("FileSize,FileCount\n1,2\n", "t.csv")
    with pytest.raises(StorkError, match="empty file"):
        parse_grid_text("\n\n", "t.csv")


def test_missing_file_is_a_log_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TransferLogError, match="cannot read"):
        read_grid_csv(tmp_path / "nope.csv")


def test_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    records = [_record(), _record(cc=1, p=8, pp=1, fast=True, rtt_s=None, buffer_bytes=None),
               _record(bandwidth_bps=5e5, file_size_bytes=62500.0, file_count=1, duration_s=2.0),
               _record(bandwidth_bps=None, time=1_500_000_000.0)]
    records = [_record(**{**r.__dict__, "bytes_moved": round(r.file_size_bytes * r.file_count),
                          "throughput_mbps": round(r.file_size_bytes * r.file_count) * 8
                          / r.duration_s / 1e6, "sharing": 0})
               for r in records]
    path = tmp_path / "out.csv"
    assert write_grid_csv([*records, _record(outcome=FAILED)], path) == len(records)
    back, skipped = read_grid_csv(path)
    assert skipped == []
    assert [TransferRecord(**{**r.__dict__, "origin": "stork"}) for r in back] == records
    stream = io.StringIO()
    write_grid_csv(records, stream)
    assert stream.getvalue() == grid_csv_text(records) == path.read_text()
