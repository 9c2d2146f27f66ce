"""The emulated WAN testbed: the link emulator's shaping (pure), topologies, and a smoke run
of two real sites with the real daemon inside one of them (skipped, with the reason, where the
machine cannot host namespaces and TUN devices)."""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import REPO, StorkServer, make_file, md5
from tests.testbed import (
    Link,
    Testbed,
    Topology,
    TopologyError,
    leftovers,
    load,
    pair,
    unavailable_reason,
)
from tests.testbed.dataset import DatasetError, Part, parse_spec, plan, problems, write
from tests.testbed.grid import (
    HARP_COLUMNS,
    Cell,
    GridError,
    GridLog,
    GridRow,
    command,
    measured,
    parse_grid,
    sweep_grid,
)
from tests.testbed.linkemu import Shaper
from tests.testbed.measure import check_link
from tests.testbed.netns import CC_SYSCTL
from tests.testbed.sweep import main as sweep_main

# --- the shaper (pure) -------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.01), st.integers(40, 1500)), min_size=1, max_size=300),
       st.floats(1, 1000), st.integers(3000, 200_000))
def test_shaper_never_exceeds_rate_nor_queue(arrivals: list[tuple[float, int]], rate: float,
                                             queue: int) -> None:
    shaper = Shaper(rate, 0.02, 0.0, queue, random.Random(1))
    now, out = 0.0, []
    for gap, length in arrivals:
        now += gap
        backlog = shaper.backlog(now)
        at = shaper.offer(now, length)
        if at is None:
            assert backlog + length > queue  # dropped only when the queue is full
            continue
        assert at >= now + 0.02 + length * 8 / (rate * 1e6) - 1e-12  # delay + serialisation
        out.append((at, length))
    # the bottleneck: departures are spaced by at least each packet's serialisation time
    for (t0, _), (t1, l1) in itertools.pairwise(out):
        assert t1 - t0 >= l1 * 8 / (rate * 1e6) - 1e-9
    assert shaper.counters.packets == len(out)
    assert shaper.counters.queue_drops == len(arrivals) - len(out)


def test_shaper_random_loss_rate() -> None:
    shaper = Shaper(1000, 0.0, 0.01, 10**9, random.Random(7))
    for i in range(100_000):
        shaper.offer(i * 1e-3, 1500)
    assert 850 <= shaper.counters.lost <= 1150


# --- topologies --------------------------------------------------------------------------

def test_topology_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[[site]]\nname = "x"\n[[site]]\nname = "y"\n[[site]]\nname = "z"\n'
                    '[[link]]\na = "x"\nb = "y"\nrtt_ms = 40\nrate_mbps = 200\nloss = 0.001\n')
    topo = load(path)
    assert topo.sites == ("x", "y", "z") and topo.link("y", "x").rtt_ms == 40
    assert topo.link("x", "y").queue == 1_000_000  # one bandwidth-delay product
    assert len({topo.address(s) for s in topo.sites}) == 3
    with pytest.raises(TopologyError, match=r"link 1 .x-q.: no site named 'q'"):
        Topology(("x", "y"), (Link("x", "q", 10, 10),))
    with pytest.raises(TopologyError, match="loss is a fraction"):
        pair(10, 10, 1.5)
    path.write_text('[[site]]\nname = "x"\n[[link]]\na = "x"\n')
    with pytest.raises(TopologyError, match=f"{path}: missing or bad field"):
        load(path)


# --- two real sites ----------------------------------------------------------------------

REASON = unavailable_reason()
needs_testbed = pytest.mark.skipif(REASON is not None,
                                   reason=f"testbed not possible here: {REASON}")


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed(pair(40, 100, 0.001), tmp_path_factory.mktemp("testbed")) as testbed:
        yield testbed
    assert leftovers(testbed.tag) == []


@needs_testbed
def test_link_measures_true(bed: Testbed) -> None:
    assert bed.site_congestion == {"a": "cubic", "b": "cubic"}
    assert CC_SYSCTL.read_text().strip() != "" and bed._saved_cc is None  # root cc put back
    check = check_link(bed, bed.topology.links[0], (1, 8), seconds=3)
    assert check.rtt_ok, f"RTT {check.rtt_ms} ms for a 40 ms link"
    assert check.rate_ok, f"{check.mbps} above the 100 Mbit/s bottleneck"
    assert check.mbps[8] > 2 * check.mbps[1], f"no gain from streams at 0.1% loss: {check.mbps}"


@needs_testbed
def test_daemon_in_a_site_moves_files_and_estimates(bed: Testbed) -> None:
    src_dir, dst_dir = bed.site_dir("a"), bed.site_dir("b")
    work = bed.workdir / "stork"
    files = [make_file(src_dir / f"f{i}.dat", (2 + i) << 20, seed=i) for i in range(3)]
    server = StorkServer(work, {"EOS_SAMPLE_SIZE": "4M", "STORK_MAX_NUM_JOBS": "3"},
                         prefix=bed.argv("a", []))
    with server:
        ads = "".join(f'[ dap_type = transfer; src_url = "{bed.url("a", f)}"; '
                      f'dest_url = "{bed.url("b", dst_dir / f.name)}"; '
                      f'optimization = "{"eos" if i == 0 else "NO"}"; ]\n'
                      for i, f in enumerate(files))
        ids = server.submit(ads)
        est = work / "est.dap"
        est.write_text(f'[ dap_type = estimation; src_url = "{bed.url("a", files[2])}"; '
                       f'dest_url = "{bed.url("b", dst_dir / "est.dat")}"; ]')
        answer = server.cli("stork_submit", str(est), check=True).stdout
        jobs = [server.wait_state(i, timeout_s=90) for i in ids]
        rows = server.api("GET", "/v1/transfers").json()["transfers"]
    assert [j["state"] for j in jobs] == ["COMPLETED"] * 3
    for f in files:
        assert md5(dst_dir / f.name) == md5(f)
    assert jobs[0]["result"]["optimized_streams"] >= 1
    assert "optimal_streams" in answer and "samples" in answer
    # the data crossed the emulated link, not loopback
    assert "198.18." in (work / "state" / "stork_server.log").read_text()
    # the transfer log rows carry the path's round trip as the daemon in site a measures it
    # (its connect to site b's server; the link is 40 ms)
    assert len(rows) == 3
    assert all(0.036 <= r["rtt_s"] <= 0.06 for r in rows), [r["rtt_s"] for r in rows]


@needs_testbed
def test_an_estimation_on_a_slow_link_answers_what_it_measured(bed: Testbed) -> None:
    """48 MiB on the 100 Mbit/s link with STORK_LINK_MBPS at its default (1000): a
    transfer's budget would not sample, but an estimation measures, and its figures are
    the link's, not the configured rate."""
    src = make_file(bed.site_dir("a") / "est48.dat", 4 << 20, seed=48)
    work = bed.workdir / "stork-est"
    with StorkServer(work, {"EOS_SAMPLE_SIZE": "4M"}, prefix=bed.argv("a", [])) as server:
        est = work / "est48.dap"
        est.write_text(f'[ dap_type = estimation; size = {48 << 20}; '
                       f'src_url = "{bed.url("a", src)}"; '
                       f'dest_url = "{bed.url("b", bed.site_dir("b") / "est48.dat")}"; ]')
        out = server.cli("stork_submit", str(est), check=True).stdout
    ad = classad2.ClassAd(out[out.index("["):out.rindex("]") + 1])
    assert ad["optimization_source"] in ("sampled", "budget") and len(ad["samples"]) >= 2
    assert 5 < ad["estimated_throughput_mbps"] <= 110, ad
    expected_s = (48 << 20) * 8 / 1e6 / ad["estimated_throughput_mbps"]
    assert ad["estimated_time_s"] == pytest.approx(expected_s, rel=0.05)


SAMPLE = """
import json, sys
from stork.eos.samplers import GridFtpSampler
s = GridFtpSampler(sys.argv[1], sys.argv[2], 64 << 20, seconds=2).measure(1)
print(json.dumps({"mbps": s.mbps, "setup": s.setup_s, "bytes": s.bytes_moved,
                  "elapsed": s.duration_s, "raw": s.raw}))
"""


@needs_testbed
def test_gridftp_sample_is_cut_at_the_time_limit_and_measured_at_the_destination(
        bed: Testbed) -> None:
    source = make_file(bed.site_dir("a") / "sample-src.dat", 64 << 20, seed=9)
    result = bed.run("a", [sys.executable, "-c", SAMPLE, bed.url("a", source),
                           bed.url("b", bed.site_dir("b") / "sample.dat")], timeout=120,
                     cwd=REPO)
    assert result.returncode == 0, result.stderr
    sample = json.loads(result.stdout)
    assert sample["raw"]["stopped_after_s"] == 2 and sample["elapsed"] < 10
    assert 0 < sample["bytes"] < 64 << 20  # one stream cannot move 64 MiB in 2 s here
    assert sample["raw"]["method"].startswith("destination size")
    assert sample["setup"] >= 0.04  # at least one round trip before the first byte
    assert 0 < sample["mbps"] <= 100
    assert not list(bed.site_dir("b").glob(".stork-sample-*"))  # scratch removed


@needs_testbed
def test_teardown_on_sigterm_and_on_error(tmp_path: Path) -> None:
    script = ("import sys, time; from pathlib import Path; from tests.testbed import Testbed,"
              " pair\nwith Testbed(pair(5, 50), Path(sys.argv[1]), servers=False):\n"
              "    print('up', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "t")], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    assert leftovers(proc.pid) != []
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert leftovers(proc.pid) == []
    # an error inside the block tears down too
    with (pytest.raises(ZeroDivisionError),
          Testbed(pair(5, 50), tmp_path / "e", servers=False) as testbed):
        assert leftovers(testbed.tag) != []
        raise ZeroDivisionError
    assert leftovers(testbed.tag) == []


@pytest.mark.parametrize("euid, tun, missing, expected", [
    (1000, True, (), "the testbed needs root"),
    (0, False, (), "/dev/net/tun is missing"),
    (0, True, ("iperf3", "ip"), "missing tools: ip, iperf3"),
])
def test_testbed_unavailable_reason_names_what_is_missing(
        monkeypatch: pytest.MonkeyPatch, euid: int, tun: bool, missing: tuple[str, ...],
        expected: str) -> None:
    # the smoke tests above skip with this text when the machine cannot host the testbed
    exists, which = os.path.exists, shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setattr(os.path, "exists", lambda p: tun if p == "/dev/net/tun" else exists(p))
    monkeypatch.setattr(shutil, "which", lambda t: None if t in missing else which(t))
    reason = unavailable_reason()
    assert reason is not None and reason.startswith(expected), reason


def test_testbed_comes_up_where_the_reason_says_it_can(tmp_path: Path) -> None:
    if REASON is not None:
        pytest.skip(f"testbed not possible here: {REASON}")
    with Testbed(pair(5, 50), tmp_path / "t", servers=False) as testbed:
        assert leftovers(testbed.tag) != []
    assert leftovers(testbed.tag) == []


# --- datasets and (cc, p, pp) grids ------------------------------------------------------

def test_dataset_spec_fixed_range_and_mix() -> None:
    assert parse_spec("20x64K") == (Part(20, 65536, 65536),)
    assert parse_spec("200x1M-4M") == (Part(200, 1 << 20, 4 << 20),)
    assert parse_spec("2000x256K, 500x2M,20x64M") == (
        Part(2000, 256 << 10, 256 << 10), Part(500, 2 << 20, 2 << 20), Part(20, 64 << 20, 64 << 20))
    for bad, match in (("x1M", "expected COUNTxSIZE"), ("10x", "expected COUNTxSIZE"),
                       ("0x1M", "at least one file"), ("10x4M-1M", "from low to high"),
                       ("10x1Q", "expected COUNTxSIZE"), ("10x1M,", "part ''"),
                       ("2000000x1", "more than")):
        with pytest.raises(DatasetError, match=match):
            parse_spec(bad)


def test_dataset_plan_is_fixed_by_the_seed() -> None:
    mix = plan("3x1K,2x2K", seed=5)
    assert sorted(mix.sizes) == [1024] * 3 + [2048] * 2 and mix.total_bytes == 7168
    assert mix.mean_bytes == 1434 and mix.count == 5 and mix.dirname == "3x1K+2x2K-s5"
    assert plan("3x1K,2x2K", seed=5) == mix
    ranged = plan("50x1K-2K", seed=1)
    assert all(1024 <= s <= 2048 for s in ranged.sizes) and len(set(ranged.sizes)) > 10
    assert plan("50x1K-2K", seed=2).sizes != ranged.sizes
    assert mix.names()[:2] == ["f000000.dat", "f000001.dat"]


def test_dataset_bytes_are_real_and_deterministic(tmp_path: Path) -> None:
    dataset = plan("3x3M,4x10,1x0K-20", seed=7)  # chunks, files shorter than a chunk header
    one, two = write(dataset, tmp_path / "one"), write(dataset, tmp_path / "two")
    assert problems(dataset, one) == []
    digests = [md5(one / n) for n in dataset.names()]
    assert digests == [md5(two / n) for n in dataset.names()]
    big = [n for n, s in zip(dataset.names(), dataset.sizes, strict=True) if s == 3 << 20]
    assert len({md5(one / n) for n in big}) == 3  # every file its own bytes
    data = (one / big[0]).read_bytes()
    assert data.count(0) < len(data) // 100  # no holes of zeros
    assert len({data[i:i + 4096] for i in range(0, len(data), 1 << 20)}) == 3  # chunks differ
    other = write(plan("3x3M,4x10,1x0K-20", seed=8), tmp_path / "other")
    assert md5(other / big[0]) != md5(one / big[0])
    (one / big[1]).write_bytes(b"short")
    (one / dataset.names()[-1]).unlink()
    assert problems(dataset, one) == [f"{big[1]}: 5 of {3 << 20} bytes",
                                      f"{dataset.names()[-1]}: missing"]
    write(dataset, one)  # a damaged copy is written again
    assert problems(dataset, one) == []


def test_grid_axes() -> None:
    cells = parse_grid(["cc=1,4", "p=1,8", "pp=0,1"])
    assert [c.label for c in cells[:3]] == ["cc=1 p=1 pp=0 fast=0", "cc=1 p=1 pp=1 fast=0",
                                            "cc=4 p=1 pp=0 fast=0"]
    assert len(cells) == 8 and cells[-1] == Cell(cc=4, p=8, pp=1, fast=0)
    assert parse_grid(["fast=1"]) == (Cell(1, 1, 0, 1),)
    assert Cell(4, 2, 1, 1).flags() == ["-cc", "4", "-p", "2", "-pp", "-fast"]
    assert command(Cell(2, 1, 0, 0), Path("/l"), 1 << 20) == [
        "globus-url-copy", "-cc", "2", "-p", "1", "-tcp-bs", "1048576", "-f", "/l"]
    for bad, match in (("cc", "expected NAME="), ("q=1", "expected NAME="),
                       ("pp=2", "takes 0 to 1"), ("cc=0", "takes 1 to 256"),
                       ("p=x", "whole numbers")):
        with pytest.raises(GridError, match=match):
            parse_grid([bad])
    with pytest.raises(GridError, match="given twice"):
        parse_grid(["cc=1", "cc=2"])


HARP_HEADER = ("FileSize,FileCount,Bandwidth,RTT,BufferSize,Parallelism,Concurrency,Pipelining,"
               "Fast,Throughput,Duration,Date,Time,Source,Destination")


def test_grid_row_in_harp_columns_and_units(tmp_path: Path) -> None:
    dataset = plan("2x1M,2x3M", seed=1)
    started = dt.datetime(2024, 5, 1, 14, 3, 7, 123456, tzinfo=dt.UTC)
    row = measured(dataset, Link("a", "b", 40, 200, 0.001), Cell(4, 8, 1, 0), 33554432,
                   2.5, started, "a", "b")
    assert row.throughput_mbps == pytest.approx(8 * 2**20 * 8 / 2.5 / 1e6)
    log = GridLog(tmp_path / "g.csv")
    log.append(row)
    GridLog(tmp_path / "g.csv").append(row)  # an existing table grows, header kept once
    line = ("2097152,4,200000000,0.04,33554432,8,4,2,0,26.843546,2.5,2024-05-01,"
            "14:03:07.123456,a,b")
    assert (tmp_path / "g.csv").read_text() == f"{HARP_HEADER}\n{line}\n{line}\n"
    assert ",".join(HARP_COLUMNS) == HARP_HEADER
    (tmp_path / "other.csv").write_text("Note,FileSize\nx,1\n")
    with pytest.raises(GridError, match="not a grid table"):
        GridLog(tmp_path / "other.csv")


class CopyBed:
    """Stands in for a Testbed: "globus-url-copy -f" copies the listed files locally; cells
    with cc=2 fail, cells with p=4 leave the last file short (and exit 0)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def site_dir(self, site: str) -> Path:
        path = self.root / f"site-{site}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def url(self, site: str, path: Path) -> str:
        return f"ftp://{site}:2811{path}"

    def run(self, site: str, argv: list[str], timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
        if argv[0] == "cat":  # net.ipv4.tcp_wmem at the source, tcp_rmem at the destination
            ceiling = "4194304" if argv[1].endswith("wmem") else "6291456"
            return subprocess.CompletedProcess(argv, 0, f"4096 16384 {ceiling}\n", "")
        if argv[argv.index("-cc") + 1] == "2":
            return subprocess.CompletedProcess(argv, 1, "", "error: 550 no such file\n")
        pairs = [line.split() for line in Path(argv[-1]).read_text().splitlines()]
        for src, dst in pairs:
            shutil.copyfile(src.split(":2811", 1)[1], dst.split(":2811", 1)[1])
        if argv[argv.index("-p") + 1] == "4":
            Path(pairs[-1][1].split(":2811", 1)[1]).write_bytes(b"")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_grid_sweep_records_only_runs_that_moved_every_file(tmp_path: Path) -> None:
    bed = CopyBed(tmp_path)
    dataset = plan("5x10K", seed=1)
    src_dir = write(dataset, bed.site_dir("a") / "ds")
    link = Link("a", "b", 40, 200)
    rows: list[GridRow] = []
    done = sweep_grid(bed, link, "a", "b", dataset, src_dir,  # type: ignore[arg-type]
                      parse_grid(["cc=1,2", "p=1,4"]), repeat=2, on_row=rows.append)
    assert rows == done.rows and len(rows) == 2  # cc=1 p=1, twice
    assert {(r.concurrency, r.parallelism) for r in rows} == {(1, 1)}
    assert rows[0].buffer_bytes == 4194304 and rows[0].file_count == 5  # the smaller ceiling
    assert rows[0].file_size_bytes == 10240 and rows[0].bandwidth_bps == 200_000_000
    reasons = sorted(f.reason for f in done.failures)
    assert len(reasons) == 6 and reasons[0].startswith("1 of 5 files not whole (exit 0)")
    assert reasons[-1] == "globus-url-copy exited 1: error: 550 no such file"
    assert str(done.failures[0]) == ("cc=2 p=1 pp=0 fast=0: globus-url-copy exited 1: "
                                     "error: 550 no such file")


@needs_testbed
def test_grid_sweep_moves_a_dataset_over_the_link(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "grid.csv"
    code = sweep_main(["--link", "2,200,0", "--workdir", str(tmp_path), "--dataset", "20x64K",
                       "--grid", "cc=1,4", "p=2", "--out", str(out), "--keep"])
    assert code == 0, capsys.readouterr().err
    lines = out.read_text().splitlines()
    assert lines[0] == HARP_HEADER and len(lines) == 3
    rows = list(csv.DictReader(lines))
    assert [(r["Concurrency"], r["Parallelism"], r["Pipelining"], r["Fast"]) for r in rows] == [
        ("1", "2", "1", "0"), ("4", "2", "1", "0")]  # Pipelining: depth 1, off
    for r in rows:
        assert (r["FileSize"], r["FileCount"], r["Bandwidth"], r["RTT"]) == (
            "65536", "20", "200000000", "0.002")
        assert int(r["BufferSize"]) >= 65536 and (r["Source"], r["Destination"]) == ("a", "b")
        duration, mbps = float(r["Duration"]), float(r["Throughput"])
        assert 0.004 < duration < 60 and 0 < mbps <= 200
        assert mbps == pytest.approx(20 * 65536 * 8 / duration / 1e6, rel=1e-4)
        started = dt.datetime.fromisoformat(f"{r['Date']}T{r['Time']}+00:00")
        assert abs(dt.datetime.now(dt.UTC) - started) < dt.timedelta(minutes=5)
    dataset = plan("20x64K", seed=1)
    src_dir = tmp_path / "link" / "site-a" / "datasets" / dataset.dirname
    dst_dir = tmp_path / "link" / "site-b" / "grid-in"
    assert problems(dataset, dst_dir) == []
    assert [md5(dst_dir / n) for n in dataset.names()] == [md5(src_dir / n)
                                                           for n in dataset.names()]
    stats = json.loads((tmp_path / "link" / "link0-a-b.json").read_text())
    assert stats["a_to_b"]["bytes"] > 2 * dataset.total_bytes  # both runs crossed the link
