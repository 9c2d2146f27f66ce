"""The online optimizer `climb` through a real daemon on an emulated 40 ms, 100 Mbit/s link
with 0.1% loss (`tests.testbed`): it changes the running engine's setting with reasons and
figures on the job, nothing is sent twice or lost, the transfer log gets one row per setting,
and the next job on the path starts from what the first one learned."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stork.dataset.chunks import streams_to_fill
from tests.support import StorkServer, make_file, md5, wait_for
from tests.testbed import Testbed, pair
from tests.testbed.netns import leftovers, unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"testbed not possible: {REASON}")

KIB = 1 << 10


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed(pair(40, 100, 0.001), tmp_path_factory.mktemp("tuning-bed")) as testbed:
        yield testbed
    assert leftovers(testbed.tag) == []


@pytest.fixture(scope="module")
def daemon(bed: Testbed) -> Iterator[StorkServer]:
    """A daemon inside site b (third party from a), its store kept for the module."""
    # EOS_SAMPLING_BUDGET 0: every file tuned, however short (the test's files take seconds)
    server = StorkServer(bed.workdir / "stork", {"STORK_LINK_MBPS": "100",
                                                 "STORK_RANGE_MIN_MB": "8",
                                                 "EOS_SAMPLING_BUDGET": "0"},
                         prefix=bed.argv("b", []))
    with server:
        yield server


def dataset(bed: Testbed, name: str, count: int, size: int) -> tuple[Path, Path]:
    src = bed.site_dir("a") / name
    src.mkdir()
    for i in range(count):
        make_file(src / f"f{i:04d}.dat", size, seed=i)
    dest = bed.site_dir("b") / name
    dest.mkdir()
    return src, dest


def submit(daemon: StorkServer, bed: Testbed, src: Path, dest: Path, *,
           slash: str = "/", optimizer: str = "climb") -> dict[str, Any]:
    [job_id] = daemon.submit(f'[ dap_type = transfer; src_url = "{bed.url("a", src)}{slash}"; '
                             f'dest_url = "{bed.url("b", dest)}{slash}"; '
                             f'optimization = "{optimizer}"; ]\n')
    job: dict[str, Any] = daemon.wait_state(job_id, timeout_s=240)
    assert job["state"] == "COMPLETED", job
    return job


def test_a_dataset_is_tuned_while_it_moves_and_the_next_starts_from_what_it_learned(
        bed: Testbed, daemon: StorkServer) -> None:
    src, dest = dataset(bed, "first", 3000, 256 * KIB)
    job = submit(daemon, bed, src, dest)
    for path in sorted(src.iterdir()):
        assert md5(dest / path.name) == md5(path), path.name
    tuning = job["result"]["optimizer_small"]
    assert tuning["optimizer"] == "climb" and "preset" in tuning["prior_reason"]
    # it acted: at least one setting tried on the running flow, with its reason and figures
    assert tuning["change_count"] >= 1, tuning
    first = tuning["changes"][0]
    assert "measured the start" in first["reason"] and "trying cc" in first["reason"]
    judged = [c for c in tuning["changes"][1:] if "gain" in c]
    assert all({"reference_mbps", "tried_mbps", "noise"} <= set(c) for c in judged)
    files = daemon.api("GET", f"/v1/jobs/{job['id']}/files").json()["files"]
    assert all(f["attempts"] == 1 for f in files)  # nothing sent twice
    rows = [r for r in daemon.api("GET", "/v1/transfers").json()["transfers"]
            if r["file_size_bytes"] < 1 << 20]
    assert len({(r["cc"], r["p"], r["pp"]) for r in rows}) >= 2, (rows, tuning)  # a row a setting

    src2, dest2 = dataset(bed, "second", 120, 256 * KIB)
    second = submit(daemon, bed, src2, dest2)
    assert "history" in second["result"]["optimizer_small"]["prior_reason"]

    # harp-climb: the prior is HARP's choice from the same log, no probe sent
    src3, dest3 = dataset(bed, "third", 120, 256 * KIB)
    third = submit(daemon, bed, src3, dest3, optimizer="harp-climb")
    tuning = third["result"]["optimizer_small"]
    assert tuning["optimizer"] == "harp-climb", tuning
    assert tuning["prior_reason"].startswith("harp's choice from the transfer log: "), tuning
    files = daemon.api("GET", f"/v1/jobs/{third['id']}/files").json()["files"]
    assert len(files) == 120 and all(f["attempts"] == 1 for f in files)


def test_a_large_file_as_ranges_is_tuned_while_it_moves(bed: Testbed,
                                                        daemon: StorkServer) -> None:
    """A single file's "YES" is EOS_OPTIMIZER's (climb) on its ranges, not the EOS's samples;
    one too small for two ranges is sent whole with the large-file preset's streams."""
    src_dir, dest_dir = bed.site_dir("a"), bed.site_dir("b")
    # 320 MiB: about 30 s at 100 Mbit/s, where the start's measurement takes 13 s
    big = make_file(src_dir / "big.dat", 320 << 20, seed=7)
    job = submit(daemon, bed, big, dest_dir / "big.dat", slash="", optimizer="YES")
    assert md5(dest_dir / "big.dat") == md5(big)
    tuning, big_id = job["result"]["optimizer_file"], job["id"]
    assert tuning["optimizer"] == "climb" and tuning["change_count"] >= 1, (tuning, job)
    assert "eos_error" not in job["result"] and "optimized_streams" not in job["result"]
    assert "eos_sampling_time_s" not in job["result"]

    small = make_file(src_dir / "small.dat", 6 << 20, seed=8)  # < two 8 MiB ranges
    job = submit(daemon, bed, small, dest_dir / "small.dat", slash="", optimizer="YES")
    assert md5(dest_dir / "small.dat") == md5(small)
    whole = job["result"]["optimizer_file"]
    # cc x p of the preset is 32 streams, more than fill 40 ms at 100 Mbit/s at 1% loss:
    # 28 to 30 streams, by the RTT measured (40 ms and the emulator's up to 2 ms)
    fill = {streams_to_fill(rtt * 100e6 / 8) for rtt in (0.040, 0.041, 0.042)}
    assert fill == {28, 29, 30}
    streams = int(whole["setting"].split()[1].removeprefix("p="))
    assert whole["setting"] == f"cc=1 p={streams} pp=1" and streams in fill, whole
    assert "sent whole" in whole["prior_reason"], whole
    assert "eos_sampling_time_s" not in job["result"]
    log = daemon.stderr_path.read_text()
    assert f"job {job['id']}: smaller than two ranges, sent whole: " in log
    [line] = [x for x in log.splitlines() if f"job {job['id']}: smaller than two" in x]
    assert f" -p {streams} " in line, line

    # with the default budget (a tenth of the file's time for one try), a file of a few
    # seconds is not tuned: it runs untouched at what the path's history (the big file's
    # rows) measured best, one of the settings the big file ran at, or at the doubling of
    # that one the history has not measured
    reconfigure(daemon, EOS_SAMPLING_BUDGET="0.1")
    try:
        # 10 ranges of 8 MiB: the history's cc 8 fits (a flow's cc is at most its items)
        short = make_file(src_dir / "short.dat", 80 << 20, seed=9)
        job = submit(daemon, bed, short, dest_dir / "short.dat", slash="", optimizer="YES")
    finally:
        reconfigure(daemon, EOS_SAMPLING_BUDGET="0")
    assert md5(dest_dir / "short.dat") == md5(short)
    untuned = job["result"]["optimizer_file"]
    assert untuned["prior_reason"].startswith("not tuned: "), untuned
    transfers = daemon.api("GET", "/v1/transfers").json()["transfers"]
    assert "the path's history" in untuned["prior_reason"], untuned
    assert untuned["change_count"] == 0, untuned
    assert untuned["prior"] == untuned["setting"], untuned
    rows = [r for r in transfers if r["job_id"] == job["id"]]
    held = {f"cc={r['cc']} p={r['p']} pp={r['pp']}" for r in rows}
    assert held == {untuned["setting"]}, (rows, untuned)
    big_held = {f"cc={r['cc']} p={r['p']} pp={r['pp']}" for r in transfers
                if r["job_id"] == big_id}
    chosen = re.search(r"settings measured\): (cc=\d+ p=\d+ pp=\d+)", untuned["prior_reason"])
    assert chosen is not None and chosen[1] in big_held, (big_held, untuned)
    if "which the history has not measured" in untuned["prior_reason"]:
        assert "twice its" in untuned["prior_reason"], untuned  # never a halving
        assert _streams(untuned["setting"]) >= 2 * _streams(chosen[1]) or \
            untuned["setting"].startswith("cc=10 "), (chosen[1], untuned)  # (cc <= 10 ranges)
    else:
        assert untuned["setting"] == chosen[1], (chosen[1], untuned)


def _streams(label: str) -> int:
    cc, p = re.match(r"cc=(\d+) p=(\d+)", label).groups()  # type: ignore[union-attr]
    return int(cc) * int(p)


def reconfigure(daemon: StorkServer, **knobs: str) -> None:
    """Change live knobs in the daemon's file and have it read them (SIGHUP)."""
    before = daemon.stderr_path.read_text().count("SIGHUP: configuration re-read")
    daemon.write_config(**knobs)
    daemon.signal(signal.SIGHUP)
    wait_for(lambda: daemon.stderr_path.read_text().count(
        "SIGHUP: configuration re-read") > before, 15, what="the daemon to re-read its file")


def test_a_mixed_datasets_chunk_of_the_most_bytes_leads_while_the_others_hold(
        bed: Testbed, daemon: StorkServer) -> None:
    """Small files beside large ones: each chunk starts at its class's preset. While they
    share the path the large files' chunk (the most bytes) leads: it is tuned on the job's
    total from its preset, and the small files' chunk holds, stepped only once it runs
    alone: no change of it before its `alone_at_s`, none at all without one. (Which chunk
    ends first depends on the machine's load; the small files' takes seconds to set up,
    so both move at the controllers' first look.)"""
    src, dest = dataset(bed, "mixed", 300, 64 * KIB)
    for i in range(2):
        make_file(src / f"large{i}.dat", 64 << 20, seed=100 + i)
    job = submit(daemon, bed, src, dest)
    for path in sorted(src.iterdir()):
        assert md5(dest / path.name) == md5(path), path.name
    result = job["result"]
    small, large = result["optimizer_small"], result["optimizer_large"]
    # "small cc=32 p=1 pp=3 (on): 300 files" -> {"small": "cc=32 p=1 pp=3"}
    presets = dict(c.split(": ")[0].rsplit(" (", 1)[0].split(" ", 1)
                   for c in result["dataset_chunks"])
    assert small["start"] == presets["small"] and large["start"] == presets["large"], result
    assert "led_at_s" in large and "led_at_s" not in small, result
    assert large["changes"][0]["reason"] == (
        f"leads the path it shares with 1 other flow of its job (they hold their "
        f"settings): tuned on the job's total from {presets['large']}"), large
    alone = small.get("alone_at_s")
    if alone is None:
        assert small["change_count"] == 0, small
    else:
        assert all(c["t_s"] >= alone for c in small["changes"]), small
    assert "alone_at_s" not in small or "alone_at_s" not in large, result  # one ended first
