"""Datasets over XRootD (``root://``) and HTTPS/WebDAV (``davs://``) against a real xrootd
server (XRootD and its HTTP plugin over TLS with the test CA): listed through gfal2 as the
job's owner, each batch copied by gfal2 ``cc`` files at a time, each file's end recorded."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from stork.dataset import DatasetError, expand, is_dataset
from stork.transfer.gfalhelper import EXIT_CHECKSUM
from stork.transfer.remote import GFAL_PYTHON, HELPER
from tests.gsi import TestCa, XrootdServer
from tests.support import StorkServer, md5, wait_for
from tests.test_dataset_jobs import assert_same, files_of, make_tree

COUNT = 30




def test_datasets_to_from_and_between_xrootd_and_webdav_ends(
        stork_x: StorkServer, xrootd: XrootdServer, export: Path) -> None:
    made = make_tree(export / "ds", COUNT, 20_000, sub_every=5)  # 6 files in 3 subdirs
    top = {rel: data for rel, data in made.items() if "/" not in rel}
    local = stork_x.workdir / "local"
    local_made = make_tree(local, COUNT, 15_000)
    work = stork_x.workdir / "got"
    logs = stork_x.workdir / "outputs"
    logs.mkdir()
    # a file sent alone (after its batch) writes gfal2's progress lines to `output`; a
    # batch's per-file answers do not: empty outputs mean each file went once, in its batch
    # (the test server computes 4 checksums at once, `xrootd.chksum max 4`, and refuses
    # more: a file refused would be sent again alone; so two jobs verify, 2 files at once)
    ids = stork_x.submit(f"""
    [ dap_type = transfer; recursive = true; arguments = "-cc 4 -p 2";
      output = "{logs}/1.out";
      src_url = "{xrootd.url('root', export / 'ds')}/"; dest_url = "file://{work}/root/" ]
    [ dap_type = transfer; arguments = "-cc 2"; output = "{logs}/2.out"; verify_checksum = true;
      src_url = "file://{local}/"; dest_url = "{xrootd.url('root', export / 'up')}/" ]
    [ dap_type = transfer; recursive = true; arguments = "-cc 10"; output = "{logs}/3.out";
      src_url = "{xrootd.url('root', export / 'ds')}/";
      dest_url = "{xrootd.url('root', export / 'tpc')}/" ]
    [ dap_type = transfer; arguments = "-cc 2"; output = "{logs}/4.out"; verify_checksum = true;
      src_url = "{xrootd.url('davs', export / 'ds')}/*.dat"; dest_url = "file://{work}/davs/" ]
    """)
    wants = [(made, work / "root"), (local_made, export / "up"), (made, export / "tpc"),
             (top, work / "davs")]
    for number, (job_id, (want, where)) in enumerate(zip(ids, wants, strict=True), 1):
        job = stork_x.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert job["files_done"] == len(want)
        assert job["bytes_done"] == sum(len(data) for data in want.values())
        files = files_of(stork_x, job_id)
        assert len(files) == len(want)
        assert all(f["state"] == "DONE" and f["attempts"] == 1 for f in files), files
        assert_same(want, where)
        assert (logs / f"{number}.out").read_text() == ""


def test_a_batch_compares_each_files_checksum_and_names_a_mismatch(
        xrootd: XrootdServer, export: Path, test_ca: TestCa, tmp_path: Path) -> None:
    made = make_tree(export / "sums", 2, 30_000)
    good, bad = (xrootd.url("root", export / "sums" / name) for name in sorted(made))
    want = f"{zlib.adler32(made['f00000.dat']) & 0xFFFFFFFF:08x}"
    lines = (f"{good} file://{tmp_path}/good.dat adler32:{want}\n"
             f"{bad} file://{tmp_path}/bad.dat adler32:{want}\n")
    ran = subprocess.run([GFAL_PYTHON, "-I", HELPER, "copylist", "--parallel", "2"],
                         input=lines, capture_output=True, text=True, check=True,
                         env={**os.environ, "X509_CERT_DIR": str(test_ca.trust)})
    answers = {a["line"]: a for a in map(json.loads, ran.stdout.splitlines())}
    assert answers[1] == {"line": 1, "size": 30_000}
    assert answers[2]["exit"] == EXIT_CHECKSUM, answers[2]
    assert "checksum" in answers[2]["error"].lower()


def test_one_missing_file_of_a_url_list_fails_alone_naming_it(
        stork_x: StorkServer, xrootd: XrootdServer, export: Path) -> None:
    made = make_tree(export / "listed", COUNT, 10_000)
    out = stork_x.workdir / "listed-out"
    names = sorted(made)
    lines = [f"{xrootd.url('root', export / 'listed' / name)} file://{out}/{name}"
             for name in names]
    lines[7] = f"{xrootd.url('root', export / 'listed' / 'absent.dat')} file://{out}/absent.dat"
    url_list = stork_x.workdir / "pairs.txt"
    url_list.write_text("\n".join(lines) + "\n")
    [job_id] = stork_x.submit(f"""[ dap_type = transfer; max_retries = 0;
      arguments = "-cc 4"; url_list = "{url_list}"; err = "{url_list}.err";
      output = "{url_list}.out" ]""")
    job = stork_x.wait_state(job_id, timeout_s=120)
    assert job["state"] == "FAILED"
    assert (job["files_done"], job["files_failed"]) == (COUNT - 1, 1)
    assert "absent.dat" in job["last_error"]
    [failed] = files_of(stork_x, job_id, "FAILED")
    assert failed["rel_path"] == "absent.dat" and failed["failure_kind"] == "permanent"
    assert "absent.dat" in failed["last_error"]
    sent_alone = Path(f"{url_list}.err").read_text()  # gfal2's error of the one sent alone
    assert "absent.dat" in sent_alone and "f0000" not in sent_alone
    assert Path(f"{url_list}.out").read_text() == ""  # no file copied alone
    done = files_of(stork_x, job_id, "DONE")
    assert len(done) == COUNT - 1 and all(f["attempts"] == 1 for f in done)
    del made[names[7]]
    assert_same(made, out)  # no empty file left for the missing one


def test_pairs_gfal2_cannot_copy_are_refused_naming_the_attribute(
        stork_x: StorkServer, xrootd: XrootdServer, export: Path) -> None:
    pairs = stork_x.workdir / "ftp-pairs.txt"
    pairs.write_text(f"file:///etc/hostname file:///tmp/h\n"
                     f"{xrootd.url('root', export / 'x.dat')} ftp://127.0.0.1:1/x.dat\n")
    refused = stork_x.cli("stork_submit", "-stdin", stdin=f'[ dap_type = transfer; '
                                                      f'url_list = "{pairs}" ]')
    assert refused.returncode != 0
    assert f"{pairs}:2" in refused.stderr and "root:// -> ftp://" in refused.stderr
    refused = stork_x.cli("stork_submit", "-stdin", stdin=f"""[ dap_type = transfer;
      src_url = "{xrootd.url('davs', export / 'ds')}/"; dest_url = "ftp://127.0.0.1:1/d/" ]""")
    assert refused.returncode != 0
    assert "dest_url" in refused.stderr and "davs -> ftp" in refused.stderr


def test_xrootd_and_webdav_sources_are_datasets_and_an_http_query_is_no_glob() -> None:
    assert is_dataset("root://h:1094//data/run/")
    assert is_dataset("root://h:1094//data/run/*.root")
    assert is_dataset("davs://h/data/run/f[0-3].dat")
    assert not is_dataset("https://h/data/file.dat?version=2")
    assert not is_dataset("davs://h/data/file.dat?token=x")
    with pytest.raises(DatasetError, match="ftp-end"):
        expand(None, None, url_list_text="davs://h/a.dat ftp://ftp-end/a.dat\n",
               url_list_name="ftp-end", max_files=10)


# xrootd's third-party copies take a few seconds each on this server, so a root -> root
# dataset at cc = 1 is still running when it is stopped or its daemon killed


def test_stork_rm_stops_the_gfal2_batch_and_keeps_finished_files(
        stork_x: StorkServer, xrootd: XrootdServer, export: Path) -> None:
    made = make_tree(export / "rm-src", 6, 50_000)
    out = export / "rm-out"
    [job_id] = stork_x.submit(f"""[ dap_type = transfer; arguments = "-cc 1";
      src_url = "{xrootd.url('root', export / 'rm-src')}/";
      dest_url = "{xrootd.url('root', out)}/" ]""")
    wait_for((out / "f00000.dat").exists, 60, what="a first file at the destination")
    stork_x.cli("stork_rm", str(job_id), check=True)
    assert stork_x.wait_state(job_id)["state"] == "REMOVED"
    files = files_of(stork_x, job_id)
    assert {f["state"] for f in files} == {"PENDING"}  # the stopped batch waits again
    there = {p.name for p in out.iterdir()}
    time.sleep(3)  # longer than one third-party copy here: a live helper would add a file
    assert {p.name for p in out.iterdir()} == there
    assert len(there) < len(made)


def test_kill_9_mid_gfal2_batch_settles_finished_files_without_resending_them(
        test_ca: TestCa, xrootd: XrootdServer, export: Path, tmp_path: Path) -> None:
    made = make_tree(export / "k-src", 5, 50_000)
    out = export / "k-out"
    server = StorkServer(tmp_path / "s", env={"X509_CERT_DIR": str(test_ca.trust)}).start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; arguments = "-cc 1";
          src_url = "{xrootd.url('root', export / 'k-src')}/";
          dest_url = "{xrootd.url('root', out)}/" ]""")
        # at cc = 1 the copies go in order: f00000 is whole once f00001 is begun
        wait_for((out / "f00001.dat").exists, 60, what="a second file begun")
        server.kill9()
        names = sorted(made)
        whole = [n for n, after in itertools.pairwise(names) if (out / after).exists()]
        stamps = {n: (out / n).stat().st_mtime_ns for n in whole}
        assert whole and len(whole) < len(names), "kill -9 came too late to test a resume"
        time.sleep(0.05)  # a resent file would get a later mtime
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert job["files_done"] == len(made)
        assert [n for n in whole if (out / n).stat().st_mtime_ns != stamps[n]] == []
        assert_same(made, out)
    finally:
        server.stop()


def test_gfal2_copies_into_a_device_and_a_fifo_keep_them(
        stork_x: StorkServer, xrootd: XrootdServer, export: Path) -> None:
    """root:// and davs:// through gfal2 into a null device and a FIFO of the test's own:
    a file and a dataset, with verify_checksum (which a device cannot answer)."""
    from tests.test_destinations import FifoReader, fifo, null_node

    made = make_tree(export / "to-sink", 4, 50_000)
    single = export / "to-sink" / sorted(made)[0]
    sinks = stork_x.workdir / "sinks"
    sinks.mkdir()
    null = null_node(sinks / "null")
    pipe = fifo(sinks / "pipe")
    reader = FifoReader(pipe.path)
    ids = stork_x.submit(f"""
    [ dap_type = transfer; verify_checksum = true;
      src_url = "{xrootd.url('root', single)}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; verify_checksum = true; arguments = "-cc 4";
      src_url = "{xrootd.url('root', export / 'to-sink')}/"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer;
      src_url = "{xrootd.url('davs', single)}"; dest_url = "file://{pipe.path}" ]""")
    for job_id in ids:
        job = stork_x.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
        assert null.intact() and pipe.intact()
    assert stork_x.job(ids[1])["job"]["files_done"] == len(made)
    assert reader.result() == (single.stat().st_size, md5(single))
