"""Samples that are part of the transfer: a transfer job's GridFTP samples write byte ranges of
the real file into the real destination, and the attempt sends only the rest (issue 13,
point 5). Real globus-url-copy against a real globus-gridftp-server on loopback, through the
real daemon where the job's path is under test."""

from __future__ import annotations

import dataclasses
import filecmp
import shutil
import sys
from pathlib import Path

import pytest

from stork.eos.samplers import InPlaceSampler, in_place_refusal
from stork.process import Child
from stork.transfer import verify
from stork.transfer.base import TransferRequest, remaining_ranges
from stork.transfer.gridftp import GridFtpModule, parse_ranges
from stork.transfer.options import TransferOptions
from tests.support import GridFtpServer, StorkServer, make_file, wait_for

MB = 1024 * 1024
KNOBS = {"EOS_SAMPLE_SIZE": "4M", "EOS_MAX_STREAMS": "16", "EOS_SAMPLING_BUDGET": "0"}


def real_guc() -> str:
    real = shutil.which("globus-url-copy")
    if real is None:
        pytest.skip("globus-url-copy is not installed; run `make setup`")
    return real


def recording_guc(tmp_path: Path, calls: Path, delay_s: float = 0.0) -> Path:
    """globus-url-copy that appends its arguments to `calls` (after an optional pause)."""
    wrapper = tmp_path / "recording-guc"
    pause = f"sleep {delay_s}\n" if delay_s else ""
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{pause}exec {real_guc()} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def invocations(calls: Path) -> list[list[str]]:
    return [line.split() for line in calls.read_text().splitlines()]


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("third_party", [False, True], ids=["ftp-to-file", "ftp-to-ftp"])
def test_samples_land_in_the_destination_and_the_rest_is_sent_as_ranges(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path, third_party: bool) -> None:
    size = 40 * MB
    src = make_file(gridftp_root / f"partial-src-{third_party}.dat", size, seed=31)
    calls = tmp_path / "calls.log"
    server = StorkServer(tmp_path, {**KNOBS, "STORK_GLOBUS_URL_COPY":
                                    str(recording_guc(tmp_path, calls))}).start()
    dest = (gridftp_root if third_party else tmp_path) / f"partial-out-{third_party}.dat"
    dest_url = gridftp.url(dest) if third_party else f"file://{dest}"
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
            verify_checksum = true; src_url = "{gridftp.url(src)}"; dest_url = "{dest_url}" ]""")
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert filecmp.cmp(src, dest, shallow=False)  # byte-identical, no holes
        result = job["result"]
        assert result["optimization_source"] == "sampled"
        assert result["samples_in_destination"] is True and result["scratch_reason"] == ""
        in_dest = result["sample_bytes_in_destination"]
        assert in_dest > 0 and in_dest % (4 * MB) == 0 and in_dest <= size // 2
        assert result["transfer_ranges"] == [[in_dest, size - in_dest]]
        assert result["bytes_sent_by_attempt"] == size - in_dest and job["bytes_done"] == size
        # the samples wrote one range after the other into the real destination ...
        runs = invocations(calls)
        samples, attempt = runs[:-1], runs[-1]
        in_place = [r for r in samples if r[-1] == dest_url]
        offsets = [int(option(r, "-partial-offset") or -1) for r in in_place]
        assert offsets[:in_dest // (4 * MB)] == list(range(0, in_dest, 4 * MB))
        # ... and the attempt sent only what was left, with the chosen streams, its checksum
        # checked by Stork over the whole file (globus-url-copy's would see one range)
        assert attempt[-1] == dest_url
        assert option(attempt, "-partial-offset") == str(in_dest)
        assert option(attempt, "-partial-length") == str(size - in_dest)
        assert option(attempt, "-p") == str(result["optimized_streams"])
        assert "-verify-checksum" not in attempt
        assert "the rest as ranges" in (server.state / "stork_server.log").read_text()
        ad = server.cli("stork_q", "-l", check=True).stdout
        assert "samples_in_destination = true" in ad and "transfer_ranges = " in ad
        leftovers = [p.name for p in dest.parent.iterdir() if p.name.startswith(".stork-sample")]
        assert leftovers == []
    finally:
        server.stop()


def test_a_stopped_sample_is_sent_again_with_the_rest(tmp_path: Path, gridftp: GridFtpServer,
                                                       gridftp_root: Path) -> None:
    """A sample stopped after EOS_SAMPLE_TIME leaves its range in doubt: the rest sends it
    again, and several ranges go through `python -m stork.transfer.gridftp --ranges`."""
    size = 24 * MB
    src = make_file(gridftp_root / "doubt-src.dat", size, seed=32)
    dest = gridftp_root / "doubt-out.dat"
    wrapper = tmp_path / "stalling-guc"  # the 2-stream sample never gets going
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *"-p 2 -partial-offset"*) sleep 60;; esac\n'
                       f'exec {real_guc()} "$@"\n')
    wrapper.chmod(0o755)
    sampler = InPlaceSampler(gridftp.url(src), gridftp.url(dest), 4 * MB, size,
                             globus_url_copy=str(wrapper), seconds=1.5)
    assert sampler.measure(1).bytes_moved == 4 * MB
    stalled = sampler.measure(2)
    assert stalled.raw["stopped_after_s"] == 1.5 and stalled.bytes_moved == 0
    sampler.measure(4)
    assert sampler.in_place and sampler.written == [(0, 4 * MB), (8 * MB, 4 * MB)]
    rest = remaining_ranges(size, sampler.written)
    assert rest == ((4 * MB, 4 * MB), (12 * MB, 12 * MB))
    request = TransferRequest(gridftp.url(src), gridftp.url(dest), TransferOptions(streams=8), 1,
                              verify_checksum=True, ranges=rest)
    argv = GridFtpModule(str(wrapper)).command(request)
    assert argv[:3] == [sys.executable, "-m", "stork.transfer.gridftp"]
    assert parse_ranges(argv[argv.index("--ranges") + 1]) == list(rest)
    assert "-verify-checksum" not in argv
    out = bytearray()
    ended = Child(argv, on_stdout=out.extend).run(timeout_s=120)
    assert ended.code == 0, ended.stderr_tail
    assert ended.bytes_done == 16 * MB  # one progress count over both ranges
    assert out.decode().count("range ") == 2
    assert filecmp.cmp(src, dest, shallow=False)
    assert verify.md5_of(gridftp.url(src)) == verify.md5_of(gridftp.url(dest))


def test_a_failing_range_fails_the_helper_with_the_tools_error(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    request = TransferRequest(gridftp.url(gridftp_root / "no-such-file.dat"),
                              f"file://{tmp_path}/x.dat", TransferOptions(streams=2), 1,
                              ranges=((0, MB), (2 * MB, MB)))
    module = GridFtpModule(real_guc())
    ended = Child(module.command(request)).run(timeout_s=60)
    assert ended.code == 1 and "No such file or directory" in ended.stderr_tail
    assert module.judge(ended.code, ended.stderr_tail).kind.value == "permanent"


def offset_ignoring_guc(tmp_path: Path, dest_url: str) -> Path:
    """globus-url-copy behind a destination that ignores the offset of a partial store: a
    range bound for `dest_url` is written at offset 0 (other transfers are untouched)."""
    wrapper = tmp_path / "offset-ignoring-guc"
    wrapper.write_text(f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
if args[-1] == {dest_url!r} and "-partial-offset" in args:
    args[args.index("-partial-offset") + 1] = "0"
os.execv({real_guc()!r}, [{real_guc()!r}, *args])
""")
    wrapper.chmod(0o755)
    return wrapper


def test_a_destination_that_ignores_offsets_falls_back_to_scratch_samples(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    size = 32 * MB
    src = make_file(gridftp_root / "ignoring-src.dat", size, seed=33)
    dest = tmp_path / "ignoring-out.dat"
    wrapper = offset_ignoring_guc(tmp_path, f"file://{dest}")
    server = StorkServer(tmp_path, {**KNOBS, "STORK_GLOBUS_URL_COPY": str(wrapper),
                                    "EOS_SAMPLING": "doubling"}).start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
            src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert filecmp.cmp(src, dest, shallow=False)
        result = job["result"]
        assert result["samples_in_destination"] is False
        assert "does not write at an offset" in result["scratch_reason"]
        assert result["transfer_ranges"] == [] and result["sample_bytes_in_destination"] == 0
        assert "bytes_sent_by_attempt" not in result  # the whole file, as before
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".stork-sample")] == []
    finally:
        server.stop()


def test_which_ends_take_samples_in_place() -> None:
    assert in_place_refusal("ftp://a:2811/x", "file:///y") is None
    assert in_place_refusal("file:///x", "ftp://b:2811/y") is None
    why = in_place_refusal("gsiftp://a:2811/x", "file:///y")
    assert why is not None and "source is gsiftp://" in why
    why = in_place_refusal("ftp://a:2811/x", "gsiftp://b:2811/y")
    assert why is not None and "destination is gsiftp://" in why and "checked whole" in why
    assert remaining_ranges(10, [(0, 3), (3, 2), (8, 5)]) == ((5, 3),)
    assert remaining_ranges(10, []) == ((0, 10),)


def test_a_crash_between_the_samples_and_the_rest_never_completes_a_file_with_holes(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    """kill -9 after in-place samples wrote ranges of the destination, before the rest:
    the job is still IDLE (being optimized); after the restart its retry samples again or
    sends the whole file, and the destination is byte-identical when it completes. Then
    kill -9 while the rest runs: recovery removes the partial file and the retry completes."""
    size = 40 * MB
    src = make_file(gridftp_root / "crash-src.dat", size, seed=34)
    dest = tmp_path / "crash-out.dat"
    calls = tmp_path / "calls.log"
    knobs = {**KNOBS, "STORK_GLOBUS_URL_COPY": str(recording_guc(tmp_path, calls, 1.0))}
    server = StorkServer(tmp_path, knobs).start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
            src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}" ]""")

        def sampled_in_place() -> bool:
            job = server.job(job_id)["job"]
            return (job["wait_reason"] == "optimizing: EOS sampling" and dest.exists()
                    and dest.stat().st_size >= 4 * MB)

        wait_for(sampled_in_place, 60, what="a sample written into the destination")
        server.kill9()
        assert dest.stat().st_size < size  # ranges with holes after them, not a result
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert filecmp.cmp(src, dest, shallow=False)
        assert job["attempts"] == 1  # the crash came before any attempt started

        [again] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
            src_url = "{gridftp.url(src)}"; dest_url = "file://{dest}.2" ]""")
        wait_for(lambda: server.job(again)["job"]["state"] == "RUNNING", 60,
                 what="the rest to be sent")
        server.kill9()
        server.start()
        job = server.wait_state(again, timeout_s=120)
        assert job["state"] == "COMPLETED" and job["attempts"] == 2, job
        assert filecmp.cmp(src, Path(f"{dest}.2"), shallow=False)
    finally:
        server.stop()


def test_the_judge_counts_only_what_the_attempt_sent_and_never_keeps_holes() -> None:
    """Pure: after in-place samples the attempt's throughput and history row are over the
    bytes it sent itself, and any failure removes the destination (it has holes)."""
    from stork import config
    from stork.errors import NotFound
    from stork.job import DapType, Job, JobSpec, JobState
    from stork.server.judge import AttemptOutcome, HistoryRecord, judge
    from stork.server.runner import AttemptResult

    src, dest = "ftp://a:2811/in.dat", "file:///out.dat"
    spec = JobSpec(DapType.TRANSFER, src, dest)
    job = Job(7, 1000, "alice", JobState.RUNNING, spec.to_json(), "transfer", src, dest,
              100.0, 150.0, attempts=1)
    settings = config.load(None, env={"HOME": "/nonexistent"})
    done = AttemptOutcome(1, AttemptResult(0, "", 30 * MB, 2.0), dest, dest_size=40 * MB,
                          streams=4, bytes_before=10 * MB)
    verdict = judge(job, done, settings, 200.0)
    assert verdict.transition is not None and verdict.transition.bytes_done == 40 * MB
    result = verdict.transition.result
    assert result["bytes_sent_by_attempt"] == 30 * MB
    assert result["achieved_throughput_mbps"] == round(30 * MB * 8 / 1e6 / 2.0, 3)
    assert verdict.history == HistoryRecord(4, 30 * MB, 2.0)
    failed = AttemptOutcome(1, AttemptResult(1, "No such file", 0, 1.0), dest,
                            failure=NotFound("No such file"), bytes_before=10 * MB)
    assert judge(job, failed, settings, 200.0).remove_partial  # permanent, yet removed
    plain = dataclasses.replace(failed, bytes_before=0)
    assert not judge(job, plain, settings, 200.0).remove_partial  # as before
