"""A large single file through the transfer engine: byte ranges in flight, written in place,
kept on the job as they land, and after a kill -9 only what had not landed is sent again.
Real globus-url-copy against a real globus-gridftp-server, through the real daemon."""

from __future__ import annotations

import filecmp
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from stork.server.file_run import file_preset
from stork.store.sqlite import SqliteStore
from stork.transfer.worker import Setting
from tests.browser import children
from tests.support import GridFtpServer, StorkServer, make_file, wait_for
from tests.test_eos_partial import invocations, option, real_guc

MB = 1024 * 1024
KNOBS = {"STORK_RANGE_MIN_MB": "4",  # 4 MiB ranges: a 26 MiB file is seven
         "STORK_LINK_MBPS": "10"}  # 16 BDPs stay below the 4 MiB floor up to 0.2 s of RTT


def holding_guc(tmp_path: Path, calls: Path, hold: Path) -> Path:
    """globus-url-copy that appends its arguments to `calls` and, while the file `hold`
    exists, sleeps instead of sending a range from offset 8 MiB on (a range in flight)."""
    wrapper = tmp_path / "holding-guc"
    wrapper.write_text(f"""#!/bin/sh
echo "$*" >> {calls}
case "$*" in *"-partial-offset {8 * MB} "*|*"-partial-offset {12 * MB} "*)
  if [ -e {hold} ]; then exec sleep 600; fi;;  # killed with the daemon (PDEATHSIG)
esac
exec {real_guc()} "$@"
""")
    wrapper.chmod(0o755)
    return wrapper


def offsets(runs: list[list[str]]) -> list[int]:
    return sorted(int(option(r, "-partial-offset") or -1) for r in runs)


@pytest.mark.parametrize("third_party", [False, True], ids=["ftp-to-file", "ftp-to-ftp"])
def test_a_large_file_is_sent_as_ranges_and_a_small_one_whole(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path, third_party: bool) -> None:
    size = 26 * MB
    src = make_file(gridftp_root / f"ranges-src-{third_party}.dat", size, seed=41)
    small = make_file(gridftp_root / f"ranges-small-{third_party}.dat", 3 * MB, seed=42)
    calls = tmp_path / "calls.log"
    server = StorkServer(tmp_path, {**KNOBS, "STORK_GLOBUS_URL_COPY":
                                    str(holding_guc(tmp_path, calls, tmp_path / "no-hold"))})
    out = gridftp_root if third_party else tmp_path
    dest, small_dest = out / f"ranges-out-{third_party}.dat", out / f"small-{third_party}.dat"
    url = gridftp.url if third_party else (lambda p: f"file://{p}")
    try:
        server.start()
        [job_id, small_id] = server.submit(f"""
          [ dap_type = transfer; arguments = "-p 4"; verify_checksum = true;
            src_url = "{gridftp.url(src)}"; dest_url = "{url(dest)}" ]
          [ dap_type = transfer; src_url = "{gridftp.url(small)}";
            dest_url = "{url(small_dest)}" ]""")
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert server.wait_state(small_id, timeout_s=60)["state"] == "COMPLETED"
        assert filecmp.cmp(src, dest, shallow=False)  # byte-identical, no holes
        assert filecmp.cmp(small, small_dest, shallow=False)
        assert job["result"]["ranges_landed"] == [[0, size]]
        assert job["result"]["range_bytes"] == 4 * MB and job["bytes_done"] == size
        runs = invocations(calls)
        ranged = [r for r in runs if r[-1] == url(dest)]
        assert offsets(ranged) == list(range(0, size, 4 * MB))  # each range once
        # -p 4 without -cc: RANGE_WORKERS (4) ranges of one stream each
        assert {option(r, "-p") for r in ranged} == {"1"}
        [whole] = [r for r in runs if r[-1] == url(small_dest)]
        assert "-partial-offset" not in whole
        kept = server.api("GET", f"/v1/jobs/{job_id}/flow").json()
        assert kept["mbps"] and len(kept["t"]) == len(kept["mbps"])
        assert sum(kept["mbps"]) > 0
    finally:
        server.stop()


@dataclass
class Held:
    """A daemon sending a 26 MiB file as 4 MiB ranges two at a time, whose ranges from
    8 MiB on are held in flight while the file `hold` exists."""

    server: StorkServer
    job_id: int
    src: Path
    dest: Path
    calls: Path
    hold: Path


@contextmanager
def held_ranges(tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path, name: str,
                seed: int) -> Iterator[Held]:
    src = make_file(gridftp_root / f"{name}-src.dat", 26 * MB, seed=seed)
    dest = tmp_path / f"{name}-out.dat"
    calls, hold = tmp_path / "calls.log", tmp_path / "hold"
    hold.touch()
    server = StorkServer(tmp_path, {**KNOBS, "STORK_GLOBUS_URL_COPY":
                                    str(holding_guc(tmp_path, calls, hold))})
    try:
        server.start()
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 2 -p 1";
            src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")
        yield Held(server, job_id, src, dest, calls, hold)
    finally:
        server.stop()


def test_kill_9_mid_ranges_sends_again_only_the_ranges_in_flight(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    with held_ranges(tmp_path, gridftp, gridftp_root, "resume", 43) as held:
        server, job_id, calls = held.server, held.job_id, held.calls
        wait_for(lambda: server.job(job_id)["job"]["result"].get("ranges_landed")
                 == [[0, 8 * MB]] and len(invocations(calls)) == 4, 60,
                 what="two ranges landed and two held in flight")
        server.kill9()
        store = SqliteStore(str(server.state / "stork.db"))
        try:
            assert store.get(job_id).result["ranges_landed"] == [[0, 8 * MB]]
        finally:
            store.close()
        held.hold.unlink()
        first = len(invocations(calls))
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert filecmp.cmp(held.src, held.dest, shallow=False)
        again = invocations(calls)[first:]
        # the two ranges in flight (8 and 12 MiB) are sent again, the landed ones never
        assert offsets(again) == list(range(8 * MB, 26 * MB, 4 * MB))
        assert job["result"]["ranges_landed"] == [[0, 26 * MB]]


def test_stork_rm_stops_every_range_in_flight_and_removes_the_partial_file(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    with held_ranges(tmp_path, gridftp, gridftp_root, "rm", 44) as held:
        server, job_id, calls = held.server, held.job_id, held.calls
        wait_for(lambda: calls.exists() and len(invocations(calls)) == 4, 60,
                 what="two ranges held in flight")
        assert server.api("DELETE", f"/v1/jobs/{job_id}").status_code == 200
        assert server.wait_state(job_id, timeout_s=60)["state"] == "REMOVED"
        wait_for(lambda: not held.dest.exists(), 20, what="the partial file removed")
        assert server.proc is not None
        pid = server.proc.pid
        assert wait_for(lambda: not children(pid, "sleep"), 20,
                        what="both held ranges stopped")
        assert len(invocations(calls)) == 4  # and nothing started after the removal


def test_the_last_ranges_of_a_file_are_cut_into_pieces_and_every_byte_sent_once(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    """A 26 MiB file in 8 MiB ranges at cc 2 with pieces of at least 2 MiB: the ranges taken
    once less than two ranges' worth is queued are cut to their share (bytes queued over
    cc), and the pieces still tile the file, each byte sent once, byte-identical."""
    size = 26 * MB
    src = make_file(gridftp_root / "pieces-src.dat", size, seed=45)
    dest = tmp_path / "pieces-out.dat"
    calls = tmp_path / "calls.log"
    server = StorkServer(tmp_path, {"STORK_RANGE_MIN_MB": "8", "STORK_PIECE_MIN_MB": "2",
                                    "STORK_LINK_MBPS": "10", "STORK_GLOBUS_URL_COPY":
                                    str(holding_guc(tmp_path, calls, tmp_path / "no-hold"))})
    try:
        server.start()
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 2 -p 1";
            src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert filecmp.cmp(src, dest, shallow=False)
        assert job["result"]["range_bytes"] == 8 * MB
        assert job["result"]["streams_used"] == 2  # two ranges in flight, one stream each
        spans = sorted((int(option(r, "-partial-offset") or -1),
                        int(option(r, "-partial-length") or -1)) for r in invocations(calls))
        assert spans[0][0] == 0 and sum(n for _, n in spans) == size
        assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(spans))
        # the first two ranges go whole (26 and 18 MiB queued over 2 workers are more than
        # a range each); the third is cut at its share of the 10 MiB left: 5 MiB
        assert spans[:3] == [(0, 8 * MB), (8 * MB, 8 * MB), (16 * MB, 5 * MB)]
    finally:
        server.stop()


def test_a_tuned_file_starts_from_the_large_file_preset_in_ranges_or_whole() -> None:
    """`file_preset`: a file of two ranges starts as the large-file preset's ranges of p
    streams; a smaller one (or of unknown size) whole, with as many streams in one run."""
    bdp = 2.5e6  # 2 ms at 10 Gbit/s
    assert file_preset(5_000_000_000, 64 * MB, bdp) == Setting(8, 4, 1)  # 64 MiB = 27 BDPs
    assert file_preset(128 * MB, 64 * MB, bdp) == Setting(8, 4, 1)
    assert file_preset(128 * MB - 1, 64 * MB, bdp) == Setting(1, 32, 1)  # whole: 8 x 4
    assert file_preset(2_000_000, 64 * MB, bdp) == Setting(1, 8, 1)  # below 1 BDP: 8 x 1
    assert file_preset(None, 64 * MB, bdp) == Setting(1, 32, 1)  # unknown: 4 BDPs assumed
    assert file_preset(5_000_000_000, 0, bdp) == Setting(1, 32, 1)  # no ranges: whole
    # a LAN (0.16 ms at 1 Gbit/s: 20 KB): two streams fill it, so a file sent whole takes
    # two; its ranges keep one stream each
    lan = 1e9 * 0.00016 / 8
    assert file_preset(1 << 30, 0, lan) == Setting(1, 2, 1)
    assert file_preset(1 << 30, 64 * MB, lan) == Setting(8, 1, 1)
    # a round trip not measured (a BDP of 0) is not a short path: the caps, as before
    assert file_preset(1 << 30, 0, 0.0) == Setting(1, 32, 1)
    assert file_preset(1 << 30, 64 * MB, 0.0) == Setting(8, 4, 1)
