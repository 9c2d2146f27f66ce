"""Dataset jobs end to end: a real stork_server, real globus-gridftp-servers, real files."""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
import time
from pathlib import Path

import htcondor2
import pytest

from tests.support import GridFtpServer, StorkServer, removed_after, wait_for
from tests.test_eos_partial import invocations, option, real_guc, recording_guc


def make_tree(root: Path, count: int, size: int, *, sub_every: int = 0) -> dict[str, bytes]:
    """`count` files of `size` bytes (distinct contents) under `root`; every `sub_every`-th
    in a subdirectory. Returns relative path -> bytes."""
    made: dict[str, bytes] = {}
    for i in range(count):
        rel = f"sub{i % 3}/f{i:05d}.dat" if sub_every and i % sub_every == 0 else f"f{i:05d}.dat"
        data = hashlib.sha256(str(i).encode()).digest() * (size // 32) + b"x" * (size % 32)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        made[rel] = data
    return made


def assert_same(made: dict[str, bytes], root: Path) -> None:
    found = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert found == set(made)
    for rel, data in made.items():
        assert (root / rel).read_bytes() == data, rel


def files_of(stork: StorkServer, job_id: int, state: str | None = None) -> list[dict]:
    params = {"state": state} if state else {}
    return stork.api("GET", f"/v1/jobs/{job_id}/files", params=params).json()["files"]


def test_500_files_third_party_and_to_local_disk_with_cc_and_pp(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / "ds500"
    made = make_tree(src, 500, 20_000, sub_every=7)
    third, local = gridftp_root / "ds500-copy", tmp_path / "ds500-local"
    log = tmp_path / "d.log"
    ids = stork.submit(f"""
    [ dap_type = transfer; src_url = "{gridftp.url(src)}/"; dest_url = "{gridftp.url(third)}/";
      recursive = true; arguments = "-cc 4 -pp 8"; log = "{log}" ]
    [ dap_type = transfer; src_url = "{gridftp.url(src)}/"; dest_url = "file://{local}/";
      recursive = true; arguments = "-cc 2 -p 2"; log = "{log}" ]
    """)
    for job_id in ids:
        job = stork.wait_state(job_id, timeout_s=240)
        assert job["state"] == "COMPLETED", job
        assert (job["files_total"], job["files_done"], job["files_failed"]) == (500, 500, 0)
        assert job["bytes_done"] == job["bytes_total"] == 500 * 20_000
    assert_same(made, third)
    assert_same(made, local)
    chunks = stork.job(ids[0])["job"]["result"]["dataset_chunks"]
    assert chunks and "cc=4" in chunks[0] and "pp=8 (on)" in chunks[0]
    assert all(f["state"] == "DONE" and f["attempts"] == 1 for f in files_of(stork, ids[0]))
    events = list(htcondor2.JobEventLog(str(log)).events(stop_after=0))
    for job_id in ids:
        kinds = [int(e.type) for e in events if e.cluster == job_id]
        assert kinds == [0, 1, 5], (job_id, kinds)
    # each batch of each chunk is in the transfer log, as optimizers will read it
    rows = stork.api("GET", "/v1/transfers").json()["transfers"]
    third_party = [r for r in rows if r["cc"] == 4 and r["pp"] == 8]
    assert sum(r["file_count"] for r in third_party) == 500
    assert sum(r["bytes_moved"] for r in third_party) == 500 * 20_000
    assert all(r["outcome"] == "completed" and r["throughput_mbps"] > 0 and r["rtt_s"] > 0
               and r["file_size_bytes"] == 20_000 for r in third_party)


def test_local_directory_glob_and_url_list(stork: StorkServer, gridftp: GridFtpServer,
                                           gridftp_root: Path, tmp_path: Path) -> None:
    src = tmp_path / "here"
    made = make_tree(src, 30, 1000)
    (src / "skip.txt").write_text("not matched")
    up = gridftp_root / "up-glob"
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"file://{src}/f{i:05d}.dat {gridftp.url(gridftp_root)}/ul/{i}.bin\n"
                             for i in range(5)))
    dry = stork.cli("stork_submit", "--dry-run", str(_write(tmp_path / "g.dap", f"""
    [ dap_type = transfer; src_url = "file://{src}/*.dat"; dest_url = "{gridftp.url(up)}" ]
    [ dap_type = transfer; url_list = "{pairs}" ]""")), check=True)
    assert "30 files, 30,000 bytes" in dry.stdout and "5 files, 5,000 bytes" in dry.stdout
    ids = stork.submit((tmp_path / "g.dap").read_text())
    for job_id in ids:
        assert stork.wait_state(job_id, timeout_s=120)["state"] == "COMPLETED"
    assert_same(made, up)
    assert (gridftp_root / "ul" / "3.bin").read_bytes() == made["f00003.dat"]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_directory_is_refused_and_nothing_queued(stork: StorkServer,
                                                          tmp_path: Path) -> None:
    job = _write(tmp_path / "m.dap", f"""[ dap_type = transfer;
      src_url = "file://{tmp_path}/nothing-here/"; dest_url = "file://{tmp_path}/out/" ]""")
    result = stork.cli("stork_submit", str(job))
    assert result.returncode != 0
    assert f"{tmp_path}/nothing-here" in result.stderr and "nothing" in result.stderr
    assert stork.api("GET", "/v1/jobs").json()["jobs"] == []


def test_remote_missing_directory_fails_the_job_naming_it(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    [job_id] = stork.submit(f"""[ dap_type = transfer;
      src_url = "{gridftp.url(gridftp_root)}/no-such-dir/"; dest_url = "file://{tmp_path}/o/" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "FAILED" and job["failure_kind"] == "permanent"
    assert "no-such-dir" in job["last_error"] and "no such directory" in job["last_error"]


def test_one_unreadable_file_fails_alone(stork: StorkServer, tmp_path: Path) -> None:
    # the server's sessions run as nobody: pytest's own directories are closed to it
    top = Path(tempfile.mkdtemp(prefix="stork-unreadable-"))
    os.chmod(top, 0o755)
    src = top / "ds"
    made = make_tree(src, 40, 5000)
    os.chmod(src / "f00013.dat", 0)  # nobody cannot read this one
    out = tmp_path / "out"
    with GridFtpServer(tmp_path / "gf", user="nobody") as server, removed_after(top):
        [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 1;
          src_url = "{server.url(src)}/"; dest_url = "file://{out}/"; arguments = "-cc 4" ]""")
        job = stork.wait_state(job_id, timeout_s=120)
    assert job["state"] == "FAILED"
    assert (job["files_done"], job["files_failed"]) == (39, 1)
    assert "f00013.dat" in job["last_error"] and "1 of 40 files failed" in job["last_error"]
    [failed] = files_of(stork, job_id, "FAILED")
    assert failed["rel_path"] == "f00013.dat" and failed["failure_kind"] == "permanent"
    assert "Permission denied" in failed["last_error"]
    del made["f00013.dat"]
    assert_same(made, out)  # no empty or short file left for the failed one


def test_kill_9_mid_dataset_resumes_without_resending_a_completed_file(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    from stork.job import FileState, JobState
    from stork.store import SqliteStore

    src = gridftp_root / "ds-kill"
    made = make_tree(src, 160, 2 << 20)  # 160 x 2 MiB: batches of 32 files at cc=1
    out = tmp_path / "out"
    server = StorkServer(tmp_path / "s").start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 1 -p 1";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/";
          log = "{tmp_path}/k.log" ]""")
        wait_for(lambda: server.job(job_id)["job"]["files_done"] >= 32, 60,
                 what="a first batch of files done")
        server.kill9()
        store = SqliteStore(str(server.state / "stork.db"))
        try:
            assert store.get(job_id).state is JobState.RUNNING
            done = [f.rel_path for f in store.files(job_id, [FileState.DONE])]
        finally:
            store.close()
        assert 32 <= len(done) < 160, "kill -9 came too late to test a resume"
        stamps = {rel: (out / rel).stat().st_mtime_ns for rel in done}
        time.sleep(0.05)  # a resent file would get a later mtime
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert job["files_done"] == 160 and job["bytes_done"] == 160 * (2 << 20)
        resent = [rel for rel, ns in stamps.items() if (out / rel).stat().st_mtime_ns != ns]
        assert resent == []
        assert_same(made, out)  # the half-sent files were redone whole
        events = list(htcondor2.JobEventLog(str(tmp_path / "k.log")).events(stop_after=0))
        assert [int(e.type) for e in events].count(1) == 1  # one execute for DAGMan
        assert int(events[-1].type) == 5 and events[-1]["ReturnValue"] == 0
    finally:
        server.stop()


def test_stork_rm_stops_the_dataset_and_keeps_finished_files(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / "ds-rm"
    make_tree(src, 480, 2 << 20)  # (160 files could all land before stork_rm on a quiet host)
    out = tmp_path / "out"
    [job_id] = stork.submit(f"""[ dap_type = transfer; arguments = "-cc 1";
      src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
    wait_for(lambda: stork.job(job_id)["job"]["files_done"] >= 32, 60, what="a first batch")
    stork.cli("stork_rm", str(job_id), check=True)
    job = stork.wait_state(job_id)
    assert job["state"] == "REMOVED"  # in the store at once; the pass then stops

    def done() -> set[str]:
        return {f["rel_path"] for f in files_of(stork, job_id, "DONE")}

    # finished files stay in place; what the calls in flight wrote goes when the pass ends
    try:
        wait_for(lambda: {p.name for p in out.iterdir()} == done(), 15,
                 what="only the finished files at the destination")
    except TimeoutError:
        there, finished = {p.name for p in out.iterdir()}, done()
        raise AssertionError(f"at the destination but not DONE: {sorted(there - finished)}; "
                             f"DONE but not there: {sorted(finished - there)}; the daemon "
                             f"said: {stork.stderr_path.read_text()[-3000:]}") from None
    time.sleep(0.5)
    assert {p.name for p in out.iterdir()} == done()
    assert 32 <= len(done()) < 480
    states = {f["state"] for f in files_of(stork, job_id)}
    assert states <= {"DONE", "PENDING"}  # nothing left RUNNING
    for rel in done():
        assert (out / rel).stat().st_size == 2 << 20


def test_100000_file_local_dataset_is_accepted_and_listed(tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.mkdir()
    for i in range(100_000):
        (src / f"f{i:06d}").touch()
    with StorkServer(tmp_path / "s") as server:
        [job_id] = server.submit(f"""[ dap_type = transfer; src_url = "file://{src}/";
          dest_url = "file://{tmp_path}/out/" ]""")
        job = server.job(job_id)["job"]
        assert job["files_total"] == 100_000 and job["bytes_total"] == 0
        q = server.cli("stork_q", check=True)
        assert f"file://{src}/" in q.stdout and "1 job(s)" in q.stdout
        last = server.api("GET", f"/v1/jobs/{job_id}/files",
                          params={"offset": 99_999}).json()["files"]
        assert [f["rel_path"] for f in last] == ["f099999"]
        server.cli("stork_rm", str(job_id), check=True)


def test_more_files_than_the_limit_are_refused_naming_the_knob(tmp_path: Path) -> None:
    src = tmp_path / "eleven"
    make_tree(src, 11, 10)
    with StorkServer(tmp_path / "s", {"STORK_MAX_FILES_PER_JOB": 10}) as server:
        job = _write(tmp_path / "l.dap", f"""[ dap_type = transfer; src_url = "file://{src}/";
          dest_url = "file://{tmp_path}/out/" ]""")
        result = server.cli("stork_submit", str(job))
        assert result.returncode != 0
        assert "STORK_MAX_FILES_PER_JOB = 10" in result.stderr
        assert server.api("GET", "/v1/jobs").json()["jobs"] == []


def test_two_sources_to_one_destination_in_a_url_list_is_refused(
        stork: StorkServer, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    pairs = _write(tmp_path / "pairs.txt", f"file://{tmp_path}/a file://{tmp_path}/o/x\n"
                                           f"file://{tmp_path}/b file://{tmp_path}/o/x\n")
    job = _write(tmp_path / "u.dap", f'[ dap_type = transfer; url_list = "{pairs}" ]')
    result = stork.cli("stork_submit", str(job))
    assert result.returncode != 0
    assert f"{pairs}:2" in result.stderr and "two sources go to one destination" in result.stderr
    assert stork.api("GET", "/v1/jobs").json()["jobs"] == []


@pytest.mark.parametrize("optimizer", ["harp", "eos", "dw"])
def test_an_optimized_dataset_probes_with_its_own_files_and_sends_each_once(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path,
        optimizer: str) -> None:
    src = gridftp_root / f"ds-{optimizer}"
    made = make_tree(src, 120, 50_000)
    out = tmp_path / "out"
    [job_id] = stork.submit(f"""[ dap_type = transfer; optimization = "{optimizer}";
      src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
    job = stork.wait_state(job_id, timeout_s=120)
    assert job["state"] == "COMPLETED", job
    assert_same(made, out)
    [info] = [v for k, v in job["result"].items() if k.startswith("optimizer_")]
    assert info["optimizer"] == optimizer and info["probes"] and "params" in info
    assert info["achieved_mbps"] > 0
    files = files_of(stork, job_id)
    assert all(f["attempts"] == 1 for f in files)  # probed files were not sent again
    assert any("probe" in f["chunk"] for f in files)
    rows = stork.api("GET", "/v1/transfers").json()["transfers"]
    assert sum(r["file_count"] for r in rows) == 120


def test_chunks_of_two_size_classes_are_tuned_side_by_side_and_sent_once(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / "ds-mixed"
    made = make_tree(src, 80, 300)
    made |= {f"big/{k}": v for k, v in make_tree(src / "big", 6, 4 << 20).items()}
    out = tmp_path / "out"
    [job_id] = stork.submit(f"""[ dap_type = transfer; optimization = "harp";
      recursive = true; src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
    job = stork.wait_state(job_id, timeout_s=180)
    assert job["state"] == "COMPLETED", job
    assert_same(made, out)
    tuned = {k: v for k, v in job["result"].items() if k.startswith("optimizer_")}
    # which classes depends on the RTT measured on loopback (small, and medium or large)
    assert len(job["result"]["dataset_chunks"]) == 2 and len(tuned) == 2, job["result"]
    assert all(info["optimizer"] == "harp" and info["probes"] for info in tuned.values())
    assert all(f["attempts"] == 1 for f in files_of(stork, job_id))


def test_optimizer_names_read_without_scikit_learn_match_the_registry() -> None:
    from stork.config import ONLINE_OPTIMIZERS, OPTIMIZER_NAMES, SAMPLING_NAMES
    from stork.tuning import CONTROLLERS, OPTIMIZERS
    from stork.tuning.strategies import STRATEGIES

    assert set(OPTIMIZER_NAMES) == set(OPTIMIZERS) | set(CONTROLLERS)
    assert set(ONLINE_OPTIMIZERS) == set(CONTROLLERS)
    assert set(SAMPLING_NAMES) == set(STRATEGIES)


def test_a_datasets_large_file_goes_as_ranges_beside_its_small_files(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """With 1 MiB ranges (16 BDPs of loopback at a nominal 10 Mbit/s are far less) a 5 MiB
    file of a dataset is sent as byte ranges written in place (third party and to local
    disk), its small files as lists; every file byte-identical, each sent once."""
    src = gridftp_root / "ds-ranges"
    made = make_tree(src, 20, 20_000)
    big = hashlib.sha256(b"big").digest() * ((5 << 20) // 32) + b"tail..."
    (src / "big.dat").write_bytes(big)
    made["big.dat"] = big
    third, local = gridftp_root / "ds-ranges-copy", tmp_path / "ds-ranges-local"
    calls = tmp_path / "calls.log"
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", {"STORK_RANGE_MIN_MB": "1", "STORK_LINK_MBPS": "10",
                             "STORK_GLOBUS_URL_COPY":
                             str(recording_guc(tmp_path, calls))}) as stork:
        ids = stork.submit(f"""
        [ dap_type = transfer; src_url = "{gridftp.url(src)}/";
          dest_url = "{gridftp.url(third)}/"; arguments = "-cc 3" ]
        [ dap_type = transfer; src_url = "{gridftp.url(src)}/"; dest_url = "file://{local}/";
          arguments = "-cc 3" ]""")
        for job_id in ids:
            job = stork.wait_state(job_id, timeout_s=240)
            assert job["state"] == "COMPLETED", job
            assert (job["files_done"], job["files_failed"]) == (21, 0)
            assert job["result"]["dataset_files_as_ranges"] == 1
            assert all(f["attempts"] == 1 for f in files_of(stork, job_id))
    assert_same(made, third)
    assert_same(made, local)
    # each job sent the big file as its six ranges, each once
    ranges = [r for r in invocations(calls) if "-partial-offset" in r]
    assert all(any(a.endswith("/big.dat") for a in r) for r in ranges)
    spans = sorted((int(option(r, "-partial-offset") or -1),
                    int(option(r, "-partial-length") or -1)) for r in ranges)
    assert spans == sorted([(o, min(1 << 20, len(big) - o)) for o in range(0, len(big), 1 << 20)]
                           * 2)


def one_job_without_retries(tmp_path: Path, knobs: dict[str, str], guc: Path, src_url: str,
                            out: Path, arguments: str) -> tuple[dict, dict[str, dict]]:
    """A daemon with `knobs` and globus-url-copy `guc` runs one dataset job from `src_url`
    into `out` with `arguments` and no retries: the job and its files by path."""
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", {**knobs, "STORK_LINK_MBPS": "10",
                             "STORK_GLOBUS_URL_COPY": str(guc)}) as stork:
        [job_id] = stork.submit(f"""[ dap_type = transfer; src_url = "{src_url}/";
            dest_url = "file://{out}/"; arguments = "{arguments}"; max_retries = 0 ]""")
        job = stork.wait_state(job_id, timeout_s=240)
        return job, {f["rel_path"]: f for f in files_of(stork, job_id)}


def test_a_failed_range_is_sent_again_alone_and_a_second_failure_is_its_files(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """A range that fails once is sent again by itself and its file completes; a range that
    fails twice fails its file (retried in a later pass, the job's rules), not the others."""
    src = gridftp_root / "ds-range-fail"
    made = make_tree(src, 5, 10_000)
    for name in ("once.dat", "always.dat"):
        data = hashlib.sha256(name.encode()).digest() * ((3 << 20) // 32)
        (src / name).write_bytes(data)
        made[name] = data
    seen = tmp_path / "failed-once"
    wrapper = tmp_path / "failing-guc"
    wrapper.write_text(f"""#!/bin/sh
case "$*" in
  *"-partial-offset {1 << 20} "*once.dat*)
    if [ ! -e {seen} ]; then touch {seen}; echo "550 injected failure" >&2; exit 1; fi;;
  *"-partial-offset {1 << 20} "*always.dat*) echo "550 injected failure" >&2; exit 1;;
esac
exec {real_guc()} "$@"
""")
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    job, files = one_job_without_retries(tmp_path, {"STORK_RANGE_MIN_MB": "1"}, wrapper,
                                         gridftp.url(src), out, "-cc 2")
    assert seen.exists()  # the injected failure happened
    assert job["state"] == "FAILED" and job["files_failed"] == 1, job
    assert files["always.dat"]["state"] == "FAILED"
    assert "injected failure" in files["always.dat"]["last_error"]
    assert files["once.dat"]["state"] == "DONE" and files["once.dat"]["attempts"] == 1
    assert not (out / "always.dat").exists()  # the ranges it wrote were removed
    del made["always.dat"]
    for rel, data in made.items():
        assert (out / rel).read_bytes() == data, rel


def test_the_last_whole_files_are_cut_into_pieces_each_byte_sent_once_a_failed_ones_removed(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """Files planned whole (6 MiB, under two 64 MiB ranges) at the end of the queue are cut
    into pieces of at least STORK_PIECE_MIN_MB (1) as they are taken: each lands
    byte-identical with every byte sent once; one whose later pieces always fail is FAILED
    and the part its first piece wrote is removed (the file was claimed when it was cut)."""
    src = gridftp_root / "ds-pieces"
    made = {}
    for name in ("a.dat", "b.dat", "broken.dat"):
        data = hashlib.sha256(name.encode()).digest() * ((6 << 20) // 32)
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
        made[name] = data
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    wrapper = tmp_path / "failing-guc"
    wrapper.write_text(f"""#!/bin/sh
case "$*" in
  *"-partial-offset 0 "*) ;;
  *-partial-offset*broken.dat*) echo "550 injected failure" >&2; exit 1;;
esac
exec {recording_guc(tmp_path, calls)} "$@"
""")
    wrapper.chmod(0o755)
    job, files = one_job_without_retries(tmp_path, {"STORK_PIECE_MIN_MB": "1"}, wrapper,
                                         gridftp.url(src), out, "-cc 4 -p 1")
    assert job["state"] == "FAILED" and job["files_failed"] == 1, job
    assert files["broken.dat"]["state"] == "FAILED"
    assert "injected failure" in files["broken.dat"]["last_error"]
    assert not (out / "broken.dat").exists()  # what its first piece wrote was removed
    del made["broken.dat"]
    for rel, data in made.items():
        assert files[rel]["state"] == "DONE" and files[rel]["attempts"] == 1
        assert (out / rel).read_bytes() == data, rel
        pieces = sorted((int(option(r, "-partial-offset") or -1),
                         int(option(r, "-partial-length") or -1))
                        for r in invocations(calls) if r[-1].endswith(f"/{rel}"))
        assert len(pieces) >= 2, (rel, pieces)  # cut, not sent whole
        assert pieces[0][0] == 0 and sum(n for _, n in pieces) == len(data)
        assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(pieces))


def test_kill_9_mid_ranges_of_a_dataset_resends_only_the_ranges_in_flight(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """A dataset's 26 MiB file as 4 MiB ranges, two in flight (held) when the daemon is
    killed: after the restart the two ranges that had landed are not sent again, the two
    that were in flight are, and the file ends whole beside the small ones."""
    from stork.server.kept_ranges import KEY
    from stork.store import SqliteStore
    from tests.test_file_ranges import MB, holding_guc, offsets

    src = gridftp_root / "ds-range-kill"
    made = make_tree(src, 3, 10_000)
    big = hashlib.sha256(b"kill").digest() * (26 * MB // 32)
    (src / "big.dat").write_bytes(big)
    made["big.dat"] = big
    out, calls, hold = tmp_path / "out", tmp_path / "calls.log", tmp_path / "hold"
    hold.touch()
    server = StorkServer(tmp_path / "s", {"STORK_RANGE_MIN_MB": "4", "STORK_LINK_MBPS": "10",
                                          "STORK_GLOBUS_URL_COPY":
                                          str(holding_guc(tmp_path, calls, hold))}).start()

    def ranged() -> list[list[str]]:
        return [r for r in invocations(calls) if "-partial-offset" in r] \
            if calls.exists() else []

    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 2 -p 1";
          src_url = "{gridftp.url(src)}/"; dest_url = "file://{out}/" ]""")
        wait_for(lambda: len(ranged()) == 4 and server.job(job_id)["job"]["result"].get(
            KEY, {}).get("files", {}) != {} and next(iter(server.job(job_id)["job"]["result"][
                KEY]["files"].values()))["landed"] == [[0, 8 * MB]], 60,
                 what="two ranges landed and two held in flight")
        server.kill9()
        store = SqliteStore(str(server.state / "stork.db"))
        try:
            [kept] = store.get(job_id).result[KEY]["files"].values()
        finally:
            store.close()
        assert kept["landed"] == [[0, 8 * MB]]
        hold.unlink()
        first = len(ranged())
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert (job["files_done"], job["files_failed"]) == (4, 0)
        again = ranged()[first:]
        # the ranges in flight (8 and 12 MiB) are sent again, the landed ones never
        assert offsets(again) == list(range(8 * MB, 26 * MB, 4 * MB))
        assert job["result"][KEY]["files"] == {}
        assert_same(made, out)
    finally:
        server.stop()
