"""stork_history import/export: the transfer log in the HARP grid format, through a real
stork_server."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.support import StorkServer

TABLE = """FileSize,FileCount,Bandwidth,RTT,BufferSize,Parallelism,Concurrency,Pipelining,Fast,\
Throughput,Duration,Date,Time,Source,Destination\r
1048576,100,10000,0.04,33554432,4,2,8,1,200,4.194304,2015-04-08,15:56:00,alpha,beta\r
1048576,100,10000000000,0.04,33554432,8,2,1,0,400,2.097152,2015-04-08,15:57:00,alpha,beta\r
1048576,100,1000,0.04,33554432,8,2,1,0,99999,2.097152,2015-04-08,15:58:00,alpha,beta\r
not,a,row\r
"""


def test_import_says_what_it_skipped_and_export_writes_it_back(tmp_path: Path) -> None:
    table = tmp_path / "grid.csv"
    table.write_bytes(TABLE.encode())
    with StorkServer(tmp_path / "s") as server:
        result = server.cli("stork_history", "import", str(table), check=True)
        assert "2 row(s) added, 2 skipped" in result.stdout
        assert "line 4:" in result.stdout and "line 5:" in result.stdout
        rows = server.api("GET", "/v1/transfers", params={"src": "alpha"}).json()["transfers"]
        assert [(r["cc"], r["p"], r["pp"], r["fast"]) for r in rows] == [
            (2, 8, 1, False), (2, 4, 8, True)]
        assert all(r["origin"] == "grid.csv" and r["bandwidth_bps"] == 1e10 for r in rows)
        out = tmp_path / "out.csv"
        server.cli("stork_history", "export", "-o", str(out), "-src", "alpha", check=True)
        back = list(csv.DictReader(out.open()))
        assert [(b["Parallelism"], b["Concurrency"], b["Pipelining"]) for b in back] == [
            ("4", "2", "8"), ("8", "2", "1")]
        assert abs(float(back[0]["Throughput"]) - 200.0) < 0.5
        again = server.cli("stork_history", "import", str(out), check=True)
        assert "2 row(s) added, 0 skipped" in again.stdout
        assert len(server.api("GET", "/v1/transfers").json()["transfers"]) == 4  # additive
        missing = server.cli("stork_history", "import", str(tmp_path / "nope.csv"))
        assert missing.returncode != 0 and "nope.csv: cannot read" in missing.stderr
        assert len(server.api("GET", "/v1/transfers").json()["transfers"]) == 4
