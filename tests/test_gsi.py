"""Real GSI end to end: a throw-away CA, host and user certificates and proxies made with
Debian's Globus tools (tests/gsi.py), globus-gridftp-server with GSI, and gsiftp jobs with
x509proxy: to disk, third party, verified, with a checksum in the ad, EOS samples and
datasets; a proxy that cannot work fails before any byte moves."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stork.transfer.remote import GFAL_PYTHON, HELPER
from tests import corrupting
from tests.gsi import GsiGridFtpServer, TestCa
from tests.support import (
    StorkServer,
    install_slow_module,
    make_file,
    md5,
    removed_after,
    wait_for,
)
from tests.test_api import as_user

MB = 1024 * 1024


@pytest.fixture(scope="module")
def area(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gsi-data")


@pytest.fixture(scope="module")
def site_a(test_ca: TestCa, area: Path) -> Iterator[GsiGridFtpServer]:
    server = GsiGridFtpServer(test_ca, area / "site-a").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def site_b(test_ca: TestCa, area: Path) -> Iterator[GsiGridFtpServer]:
    server = GsiGridFtpServer(test_ca, area / "site-b").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(test_ca: TestCa, area: Path) -> Path:
    return test_ca.proxy(area / "x509up_valid")


@pytest.fixture(scope="module")
def stork_gsi(test_ca: TestCa, area: Path) -> Iterator[StorkServer]:
    server = StorkServer(area / "stork", env={"X509_CERT_DIR": str(test_ca.trust)}).start()
    yield server
    server.stop()


def adler32(path: Path) -> str:
    return f"{zlib.adler32(path.read_bytes()) & 0xFFFFFFFF:08x}"


def test_gsiftp_jobs_with_a_proxy_to_disk_third_party_verified_and_checksummed(
        stork_gsi: StorkServer, site_a: GsiGridFtpServer, site_b: GsiGridFtpServer,
        proxy: Path, area: Path) -> None:
    src = make_file(area / "gsi-src.dat", 3 * MB + 17, seed=5)
    out = area / "out-basic"
    out.mkdir()
    ids = stork_gsi.submit(f"""
    [ dap_type = transfer; x509proxy = "{proxy}"; verify_checksum = true;
      src_url = "{site_a.url(src)}"; dest_url = "file://{out}/to-disk.dat" ]
    [ dap_type = transfer; x509proxy = "{proxy}"; verify_checksum = true; arguments = "-p 4";
      src_url = "{site_a.url(src)}"; dest_url = "{site_b.url(out / 'third-party.dat')}" ]
    [ dap_type = transfer; x509proxy = "{proxy}"; checksum = "adler32:{adler32(src)}";
      src_url = "{site_a.url(src)}"; dest_url = "{site_b.url(out / 'expected.dat')}" ]""")
    for job_id in ids:
        job = stork_gsi.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
        assert job["bytes_done"] == src.stat().st_size
    for name in ("to-disk.dat", "third-party.dat", "expected.dat"):
        assert md5(out / name) == md5(src)


def test_a_corrupted_gsiftp_destination_is_caught_by_the_checksum_and_removed(
        stork_gsi: StorkServer, site_a: GsiGridFtpServer, site_b: GsiGridFtpServer,
        proxy: Path, area: Path, tmp_path: Path) -> None:
    src = make_file(area / "gsi-corrupt-src.dat", 2 * MB, seed=6)
    out = area / "out-corrupt"
    out.mkdir()
    server = StorkServer(tmp_path, {"STORK_MODULE_DIR": tmp_path / "modules"},
                         env=stork_gsi.extra_env)
    corrupting.install(tmp_path / "modules", "gsiftp", "gsiftp")
    with server:
        ids = server.submit(f"""
        [ dap_type = transfer; x509proxy = "{proxy}"; verify_checksum = true; max_retries = 1;
          src_url = "{site_a.url(src)}"; dest_url = "{site_b.url(out / 'verified.dat')}" ]
        [ dap_type = transfer; x509proxy = "{proxy}"; max_retries = 0;
          checksum = "adler32:{adler32(src)}";
          src_url = "{site_a.url(src)}"; dest_url = "{site_b.url(out / 'expected.dat')}" ]""")
        verified, expected = (server.wait_state(i) for i in ids)
        lines = server.log_lines()

    def why(job: dict[str, Any]) -> str:  # what the job and the daemon said of it
        said = "\n".join(line for line in lines if f"job {job['id']}" in line)
        return f"{job['failure_kind']}: {job['last_error']}\n{said}"

    assert verified["state"] == "FAILED" and verified["failure_kind"] == "checksum", \
        why(verified)
    assert verified["attempts"] == 2, verified  # a mismatch may be corruption on the way
    assert "differs from source md5" in verified["last_error"], verified
    assert expected["state"] == "FAILED" and expected["failure_kind"] == "checksum", \
        why(expected)
    assert f"is not the expected {adler32(src)}" in expected["last_error"], expected
    assert list(out.iterdir()) == []  # the bad destinations were removed


def test_gsi_queries_of_the_gfal2_helper_end_cleanly(
        test_ca: TestCa, site_a: GsiGridFtpServer, proxy: Path, area: Path) -> None:
    """Each size and checksum query over GSI ends with status 0 and its answer. gfal2's
    teardown of Globus at the helper's exit aborted 3-4% of such runs after the answer was
    written (6 of 200 stat and 8 of 200 checksum runs, 8 at a time); two in a row failed a
    job's verification (`test_a_corrupted...` saw "verify" in place of "checksum")."""
    src = make_file(area / "gsi-queried.dat", 300_000, seed=9)
    env = {**test_ca.env, "X509_USER_PROXY": str(proxy)}

    def ask(n: int) -> tuple[int, str, str]:
        args = ["stat", site_a.url(src)] if n % 2 else ["checksum", "MD5", site_a.url(src)]
        run = subprocess.run([GFAL_PYTHON, "-I", HELPER, *args], capture_output=True,
                             text=True, env=env, timeout=120, check=False)
        return run.returncode, run.stdout, run.stderr[-200:]

    with ThreadPoolExecutor(8) as pool:
        ended = list(pool.map(ask, range(160)))
    crashed = [(code, err) for code, _, err in ended if code != 0]
    assert crashed == [], f"{len(crashed)} of {len(ended)}: {crashed[:3]}"
    answers = {json.loads(out)["url"] for _, out, _ in ended}
    assert answers == {site_a.url(src)}


def test_gsiftp_failures_are_the_existing_kinds(
        stork_gsi: StorkServer, site_a: GsiGridFtpServer, proxy: Path, area: Path,
        test_ca: TestCa, users: list[pwd.struct_passwd]) -> None:
    # a second server maps the test user to an unprivileged account: a real permission error
    user = users[0]
    gridmap = area / "grid-mapfile-user"
    gridmap.write_text(f'"{test_ca.user_dn}" {user.pw_name}\n')
    top = Path(f"/tmp/stork-gsi-perm-{os.getpid()}")
    with removed_after(top):
        top.mkdir(mode=0o755)
        closed = make_file(top / "closed.dat", 1000)
        closed.chmod(0o600)  # root's: the mapped user may not read it
        unprivileged = GsiGridFtpServer(test_ca, area / "site-user", gridmap=gridmap).start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]  # bound, never listening: connections are refused
            try:
                ids = stork_gsi.submit(f"""
                [ dap_type = transfer; x509proxy = "{proxy}";
                  src_url = "{site_a.url(area / 'no-such.dat')}";
                  dest_url = "file://{area}/never-1.dat" ]
                [ dap_type = transfer; x509proxy = "{proxy}";
                  src_url = "{unprivileged.url(closed)}"; dest_url = "file://{area}/never-2.dat" ]
                [ dap_type = transfer; x509proxy = "{proxy}"; max_retries = 1;
                  src_url = "gsiftp://127.0.0.1:{dead}/data/x.dat";
                  dest_url = "file://{area}/never-3.dat" ]""")
                missing, denied, unreachable = (stork_gsi.wait_state(i) for i in ids)
            finally:
                unprivileged.stop()
    assert (missing["state"], missing["failure_kind"], missing["attempts"]) == \
        ("FAILED", "permanent", 1)
    assert "No such file or directory" in missing["last_error"]
    assert (denied["state"], denied["failure_kind"], denied["attempts"]) == \
        ("FAILED", "permanent", 1)
    assert "Permission denied" in denied["last_error"]
    assert (unreachable["state"], unreachable["failure_kind"], unreachable["attempts"]) == \
        ("FAILED", "transient", 2)
    for n in (1, 2, 3):  # no byte arrived (globus-url-copy may have opened the file)
        never = area / f"never-{n}.dat"
        assert not never.exists() or never.stat().st_size == 0


def test_a_proxy_that_cannot_work_fails_before_any_byte_moves(
        test_ca: TestCa, site_a: GsiGridFtpServer, area: Path, tmp_path: Path,
        users: list[pwd.struct_passwd]) -> None:
    """Missing, unreadable by the owner, someone else's, expired: each a permanent
    credential failure naming the file and the reason, at the first attempt, with nothing
    written. One slot and a slow job first, so the proxies can be spoiled after the
    submission (which checks them) and before the attempts."""
    user = users[0]
    src = make_file(area / "gsi-cred-src.dat", 1000, seed=8)
    top = Path(f"/tmp/stork-gsi-cred-{os.getpid()}")
    server = StorkServer(tmp_path, {"STORK_MAX_NUM_JOBS": 1,
                                    "STORK_MODULE_DIR": tmp_path / "modules",
                                    "STORK_SOCKET": str(top / "stork.sock")},
                         env={"X509_CERT_DIR": str(test_ca.trust)})
    install_slow_module(tmp_path / "modules", "file", "file", delay_s=0.2)
    slow_src = make_file(tmp_path / "slow.dat", 65536 * 400)
    top.mkdir(mode=0o755)
    with removed_after(top), server:
        out = top / "out"
        out.mkdir(mode=0o777)
        gone = test_ca.proxy(tmp_path / "x509up_gone")
        foreign = test_ca.proxy(tmp_path / "x509up_foreign")
        expired = test_ca.proxy(tmp_path / "x509up_expired", valid="1:00", shift="-3h")
        closed = test_ca.proxy(top / "x509up_closed", owner=user.pw_uid)
        closed.chmod(0o000)  # the owner's own file, mode 0000: they cannot read it
        [blocker] = server.submit(f"""[ dap_type = transfer;
            src_url = "file://{slow_src}"; dest_url = "file://{tmp_path}/slow-out.dat" ]""")
        server.wait_state(blocker, ("RUNNING",))
        ids = server.submit("".join(f"""
            [ dap_type = transfer; x509proxy = "{path}"; src_url = "{site_a.url(src)}";
              dest_url = "file://{out}/{name}.dat" ]""" for name, path in
                                     (("gone", gone), ("foreign", foreign),
                                      ("expired", expired))))
        code, body = as_user(user.pw_uid, server.socket, "POST", "/v1/jobs", {
            "text": f"""[ dap_type = transfer; x509proxy = "{closed}";
                src_url = "{site_a.url(src)}"; dest_url = "file://{out}/closed.dat" ]""",
            "filename": "closed.dap", "iwd": str(top)}, gid=user.pw_gid)
        assert code == 201, body
        ids += body["ids"]
        gone.unlink()
        os.chown(foreign, user.pw_uid, -1)
        assert server.cli("stork_rm", str(blocker)).returncode == 0
        jobs = [server.wait_state(i) for i in ids]
        assert list(out.iterdir()) == []  # no byte moved
    reasons = ["no such file", f"belongs to uid {user.pw_uid}, not to the job's owner (uid 0)",
               "expired at ", "the job's owner cannot read it (permission denied)"]
    for job, path, reason in zip(jobs, (gone, foreign, expired, closed), reasons, strict=True):
        assert (job["state"], job["failure_kind"], job["attempts"]) == ("FAILED", "permanent", 1)
        assert job["last_error"].startswith(f"x509proxy {path}: {reason}"), job["last_error"]


def test_a_proxy_expiring_before_the_estimated_end_is_flagged(
        test_ca: TestCa, site_a: GsiGridFtpServer, area: Path, tmp_path: Path) -> None:
    src = make_file(area / "gsi-expiry-src.dat", 10 * MB, seed=9)
    short = test_ca.proxy(tmp_path / "x509up_short", valid="0:10")
    long = test_ca.proxy(tmp_path / "x509up_long", valid="12:00")
    # 10 MiB at 0.1 Mbit/s: about 14 minutes, longer than the short proxy's 10
    server = StorkServer(tmp_path, {"STORK_LINK_MBPS": "0.1"},
                         env={"X509_CERT_DIR": str(test_ca.trust)})
    with server:
        ids = server.submit("".join(f"""
            [ dap_type = transfer; x509proxy = "{path}"; src_url = "{site_a.url(src)}";
              dest_url = "file://{tmp_path}/{path.name}.dat" ]""" for path in (short, long)))
        flagged, fine = (server.wait_state(i) for i in ids)
        # the check runs beside the transfer (it asks the source for its size): on a busy
        # machine a fast transfer may end before the flag is written
        wait_for(lambda: "x509proxy_expires_before_end" in server.job(ids[0])["job"]["result"],
                 30, what="the short proxy's flag")
        flagged, fine = (server.job(i)["job"] for i in ids)
        status = server.cli("stork_status", str(ids[0])).stdout
        other = server.cli("stork_status", str(ids[1])).stdout
    assert flagged["state"] == fine["state"] == "COMPLETED"
    assert flagged["result"]["x509proxy_expires_before_end"] is True
    assert "x509proxy_expires_before_end" not in fine["result"]
    assert f"Warning: x509proxy {short} expires at" in status
    assert "x509proxy_expires_before_end = true" in status
    assert "Warning" not in other


def test_eos_samples_over_gsiftp_delete_their_scratch_files(
        test_ca: TestCa, site_a: GsiGridFtpServer, site_b: GsiGridFtpServer, proxy: Path,
        area: Path, tmp_path: Path) -> None:
    src = make_file(area / "gsi-eos-src.dat", 16 * MB, seed=10)
    out = area / "out-eos"
    out.mkdir()
    server = StorkServer(tmp_path, {"EOS_SAMPLE_SIZE": "4M", "EOS_MAX_STREAMS": "4",
                                    "EOS_SAMPLING_BUDGET": "0"},
                         env={"X509_CERT_DIR": str(test_ca.trust)})
    with server:
        [job_id] = server.submit(f"""[ dap_type = transfer; optimization = "eos";
            x509proxy = "{proxy}"; verify_checksum = true;
            src_url = "{site_a.url(src)}"; dest_url = "{site_b.url(out / 'eos.dat')}" ]""")
        job = server.wait_state(job_id, timeout_s=180)
    assert job["state"] == "COMPLETED", job
    assert job["result"]["optimization_source"] == "sampled"
    assert job["result"]["samples_in_destination"] is False
    assert [p.name for p in out.iterdir()] == ["eos.dat"]  # every scratch file was deleted
    assert md5(out / "eos.dat") == md5(src)


def test_a_gsiftp_dataset_is_listed_with_the_proxy(
        stork_gsi: StorkServer, site_a: GsiGridFtpServer, proxy: Path, area: Path) -> None:
    tree = area / "gsi-tree"
    (tree / "sub").mkdir(parents=True)
    files = {"a.dat": 1000, "b.dat": 250_000, "sub/c.dat": 77}
    for seed, (rel, size) in enumerate(files.items()):
        make_file(tree / rel, size, seed=seed)
    out = area / "gsi-tree-out"
    [job_id] = stork_gsi.submit(f"""[ dap_type = transfer; x509proxy = "{proxy}";
        recursive = true; src_url = "{site_a.url(tree)}/"; dest_url = "file://{out}/" ]""")
    job = stork_gsi.wait_state(job_id, timeout_s=120)
    assert job["state"] == "COMPLETED", job
    assert job["files_total"] == 3 and job["bytes_total"] == sum(files.values())
    for rel in files:
        assert md5(out / rel) == md5(tree / rel)


def test_gsiftp_into_a_device_and_a_fifo_keeps_them(
        stork_gsi: StorkServer, site_a: GsiGridFtpServer, proxy: Path, area: Path,
        tmp_path: Path) -> None:
    """A GSI source into a null device of the test's own (a file and a dataset, with
    verify_checksum, which a device cannot answer) and into a FIFO with a reader."""
    from tests.test_destinations import FifoReader, fifo, null_node

    src = make_file(area / "gsi-to-sink.dat", 3 * MB + 5, seed=40)
    data = area / "gsi-set-to-sink"
    data.mkdir()
    for i in range(3):
        make_file(data / f"f{i}.dat", 200_000 + i, seed=41 + i)
    null = null_node(tmp_path / "null")
    pipe = fifo(tmp_path / "pipe")
    reader = FifoReader(pipe.path)
    ids = stork_gsi.submit(f"""
    [ dap_type = transfer; x509proxy = "{proxy}"; verify_checksum = true; arguments = "-p 4";
      src_url = "{site_a.url(src)}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; x509proxy = "{proxy}"; verify_checksum = true;
      src_url = "{site_a.url(data)}/"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; x509proxy = "{proxy}"; arguments = "-p 4";
      src_url = "{site_a.url(src)}"; dest_url = "file://{pipe.path}" ]""")
    for job_id in ids:
        job = stork_gsi.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
    assert stork_gsi.job(ids[0])["job"]["result"]["source_checksum"] == f"md5:{md5(src)}"
    assert null.intact() and pipe.intact()
    assert reader.result() == (src.stat().st_size, md5(src))


def test_kill_9_mid_ranges_to_a_gsiftp_destination_sends_again_only_those_in_flight(
        test_ca: TestCa, site_a: GsiGridFtpServer, site_b: GsiGridFtpServer, proxy: Path,
        area: Path, tmp_path: Path) -> None:
    """A 26 MiB file sent third party over gsiftp as 4 MiB ranges, two landed and two in
    flight when the daemon is killed: a gsiftp end cannot name the file it holds, so its
    size (at least the landed spans' end) is what keeps them; after the restart only the
    ranges in flight and the rest are sent."""
    from tests.test_eos_partial import invocations
    from tests.test_file_ranges import holding_guc, offsets

    src = make_file(area / "gsi-ranges-src.dat", 26 * MB, seed=46)
    out = area / "out-ranges"
    out.mkdir()
    calls, hold = tmp_path / "calls.log", tmp_path / "hold"
    hold.touch()
    server = StorkServer(tmp_path / "s", {"STORK_RANGE_MIN_MB": "4", "STORK_GLOBUS_URL_COPY":
                                          str(holding_guc(tmp_path, calls, hold))},
                         env={"X509_CERT_DIR": str(test_ca.trust)})
    with removed_after(tmp_path / "s"):
        try:
            server.start()
            [job_id] = server.submit(f"""[ dap_type = transfer; x509proxy = "{proxy}";
                arguments = "-cc 2 -p 1"; src_url = "{site_a.url(src)}";
                dest_url = "{site_b.url(out / 'ranges.dat')}" ]""")
            wait_for(lambda: calls.exists() and len(invocations(calls)) == 4 and server.job(
                job_id)["job"]["result"].get("ranges_landed") == [[0, 8 * MB]], 60,
                     what="two ranges landed and two held in flight")
            server.kill9()
            hold.unlink()
            first = len(invocations(calls))
            server.start()
            job = server.wait_state(job_id, timeout_s=120)
            assert job["state"] == "COMPLETED", job
            assert offsets(invocations(calls)[first:]) == list(range(8 * MB, 26 * MB, 4 * MB))
            assert md5(out / "ranges.dat") == md5(src)
        finally:
            server.stop()
