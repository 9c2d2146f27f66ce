"""XRootD (``root://``) and HTTPS/WebDAV (``davs://``) ends against a real xrootd server
(XRootD and its HTTP plugin over TLS with the test CA), through gfal2: the metadata layer
for remote ends, transfers to and from disk and third party, checksums the field uses,
and failures judged as the existing kinds."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import zlib
from pathlib import Path

import pytest

from stork.errors import RemoteEndError
from stork.transfer.remote import RemoteEnds, RemoteStat
from stork.transfer.verify import checksum_of
from tests import corrupting
from tests.gsi import TestCa, XrootdServer
from tests.support import StorkServer, make_file, md5

MB = 1024 * 1024
SCHEMES = ("root", "davs")




@pytest.fixture(scope="module")
def served(xrootd: XrootdServer, export: Path) -> Path:
    """A source file in the export, readable by the server."""
    src = make_file(export / "src.dat", 3 * MB + 5, seed=21)
    nobody = pwd.getpwnam("nobody")
    os.chown(src, nobody.pw_uid, nobody.pw_gid)
    return src


def adler32(path: Path) -> str:
    return f"{zlib.adler32(path.read_bytes()) & 0xFFFFFFFF:08x}"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_metadata_layer_stats_lists_sums_makes_and_deletes(
        xrootd: XrootdServer, served: Path, export: Path, test_ca: TestCa,
        monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    monkeypatch.setenv("X509_CERT_DIR", str(test_ca.trust))
    ends = RemoteEnds()
    url = xrootd.url(scheme, served)
    assert ends.stat(url) == RemoteStat(served.stat().st_size, False)
    assert checksum_of(url, "adler32", ends) == adler32(served)
    assert checksum_of(url, "md5", ends) == md5(served)
    crc = subprocess.run(["xrdcrc32c", str(served)], capture_output=True, text=True,
                         check=True).stdout.split()[0]  # xrootd-client's own
    assert checksum_of(url, "crc32c", ends) == crc
    made = export / f"made-{scheme}" / "deep"
    ends.mkdir(xrootd.url(scheme, made) + "/")
    assert made.is_dir()
    names = {e.name: e for e in ends.list_dir(xrootd.url(scheme, export) + "/")}
    assert names["src.dat"].size_bytes == served.stat().st_size
    assert names[f"made-{scheme}"].is_dir
    doomed = make_file(export / f"doomed-{scheme}.dat", 10)
    ends.delete(xrootd.url(scheme, doomed))
    ends.delete(xrootd.url(scheme, doomed))  # gone already: no error
    assert not doomed.exists()
    with pytest.raises(RemoteEndError) as caught:
        ends.stat(xrootd.url(scheme, export / "nope.dat"))
    assert caught.value.errno == 2 and "nope.dat" in str(caught.value)


@pytest.mark.parametrize("scheme", (*SCHEMES, "https"))
def test_to_and_from_disk_and_third_party_verified_with_progress(
        stork_x: StorkServer, xrootd: XrootdServer, served: Path, export: Path,
        scheme: str) -> None:
    work = stork_x.workdir / f"io-{scheme}"
    work.mkdir()
    into = export / f"in-{scheme}"
    ids = stork_x.submit(f"""
    [ dap_type = transfer; verify_checksum = true; output = "{work}/down.out";
      src_url = "{xrootd.url(scheme, served)}"; dest_url = "file://{work}/down.dat" ]
    [ dap_type = transfer; verify_checksum = true; arguments = "-p 2";
      src_url = "file://{served}"; dest_url = "{xrootd.url(scheme, into / 'up.dat')}" ]
    [ dap_type = transfer; checksum = "adler32:{adler32(served)}";
      src_url = "{xrootd.url(scheme, served)}";
      dest_url = "{xrootd.url(scheme, into / 'tpc.dat')}" ]
    """)
    for job_id in ids:
        job = stork_x.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert job["bytes_done"] == served.stat().st_size
    for path in (work / "down.dat", into / "up.dat", into / "tpc.dat"):
        assert md5(path) == md5(served)
    progress = (work / "down.out").read_text()
    assert f"{served.stat().st_size:>15} bytes" in progress and "MB/sec avg" in progress
    status = stork_x.cli("stork_status", str(ids[2])).stdout
    assert "gfal2-copy" in status


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_corrupted_destination_is_caught_by_the_checksum_and_removed(
        test_ca: TestCa, xrootd: XrootdServer, served: Path, export: Path, tmp_path: Path,
        scheme: str) -> None:
    corrupting.install(tmp_path / "modules", "file", scheme)
    into = export / f"corrupt-{scheme}"
    server = StorkServer(tmp_path, {"STORK_MODULE_DIR": str(tmp_path / "modules")},
                         env={"X509_CERT_DIR": str(test_ca.trust)})
    with server:
        [job_id] = server.submit(f"""[ dap_type = transfer; verify_checksum = true;
            max_retries = 1; src_url = "file://{served}";
            dest_url = "{xrootd.url(scheme, into / 'bad.dat')}" ]""")
        job = server.wait_state(job_id, timeout_s=120)
    assert (job["state"], job["failure_kind"], job["attempts"]) == ("FAILED", "checksum", 2)
    assert "differs from source md5" in job["last_error"]
    assert not (into / "bad.dat").exists()  # the bad destination was removed


@pytest.mark.parametrize("scheme", SCHEMES)
def test_failures_are_the_existing_kinds(stork_x: StorkServer, xrootd: XrootdServer,
                                         export: Path, scheme: str) -> None:
    closed = make_file(export / f"closed-{scheme}.dat", 1000)
    closed.chmod(0o600)  # root's: the server (nobody) may not read it
    work = stork_x.workdir / f"fail-{scheme}"
    work.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, never listening: connections are refused
        dead_url = (f"root://127.0.0.1:{dead}//data/x.dat" if scheme == "root"
                    else f"davs://127.0.0.1:{dead}/data/x.dat")
        ids = stork_x.submit(f"""
        [ dap_type = transfer; src_url = "{xrootd.url(scheme, export / 'no-such.dat')}";
          dest_url = "file://{work}/1.dat" ]
        [ dap_type = transfer; src_url = "{xrootd.url(scheme, closed)}";
          dest_url = "file://{work}/2.dat" ]
        [ dap_type = transfer; max_retries = 1; src_url = "{dead_url}";
          dest_url = "file://{work}/3.dat" ]""")
        missing, denied, unreachable = (stork_x.wait_state(i, timeout_s=120) for i in ids)
    assert (missing["state"], missing["failure_kind"], missing["attempts"]) == \
        ("FAILED", "permanent", 1), missing
    assert (denied["state"], denied["failure_kind"], denied["attempts"]) == \
        ("FAILED", "permanent", 1), denied
    assert (unreachable["state"], unreachable["failure_kind"], unreachable["attempts"]) == \
        ("FAILED", "transient", 2), unreachable
    assert [p for p in work.iterdir() if p.stat().st_size > 0] == []


def test_the_ads_crc32c_and_md5_are_checked_at_the_destination(
        stork_x: StorkServer, xrootd: XrootdServer, served: Path, export: Path) -> None:
    """crc32c as XRootD answers it (hex) and as WebDAV answers it (an RFC 3230 base64
    digest), md5 on both; the expected crc32c comes from xrootd-client's own xrdcrc32c."""
    if shutil.which("xrdcrc32c") is None:
        pytest.skip("xrdcrc32c is missing (Debian package xrootd-client)")
    crc = subprocess.run(["xrdcrc32c", str(served)], capture_output=True, text=True,
                         check=True).stdout.split()[0]
    into = export / "typed"
    ads = "".join(f"""
    [ dap_type = transfer; checksum = "{kind}:{value}"; src_url = "file://{served}";
      dest_url = "{xrootd.url(scheme, into / f'{kind}.{scheme}')}" ]"""
                  for scheme in SCHEMES for kind, value in (("crc32c", crc), ("md5", md5(served))))
    for job_id in stork_x.submit(ads):
        job = stork_x.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
