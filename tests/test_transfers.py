"""Real transfers through a real stork_server and a real globus-gridftp-server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import htcondor2
import pytest

from tests.support import GridFtpServer, StorkServer, make_file, md5

MB = 1024 * 1024


@pytest.fixture(scope="module")
def source(gridftp_root: Path) -> Path:
    return make_file(gridftp_root / "src-50M.dat", 50 * MB, seed=7)


def test_file_ftp_file_and_third_party_with_4_streams(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, source: Path,
        tmp_path: Path) -> None:
    up = gridftp_root / "up.dat"
    down = tmp_path / "down.dat"
    third = gridftp_root / "third.dat"
    log = tmp_path / "t.log"
    ids = stork.submit(f"""
    [ dap_type = transfer; src_url = "file://{source}"; dest_url = "{gridftp.url(up)}";
      arguments = "-p 4"; verify_checksum = true; log = "{log}"; output = "{tmp_path}/up.out" ]
    [ dap_type = transfer; src_url = "{gridftp.url(source)}"; dest_url = "file://{down}";
      arguments = "-p 4"; verify_checksum = true; log = "{log}" ]
    [ dap_type = transfer; src_url = "{gridftp.url(source)}"; dest_url = "{gridftp.url(third)}";
      arguments = "-p 4 -bs 1M -b 2M"; verify_checksum = true; log = "{log}" ]
    """)
    assert len(ids) == 3
    for job_id in ids:
        job = stork.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
        assert job["bytes_done"] == 50 * MB
    want = md5(source)
    assert md5(up) == md5(down) == md5(third) == want
    # the module really ran with 4 streams
    info = stork.job(ids[2])
    assert info["attempts"][0]["module"] == "globus-url-copy"
    assert "-p 4" in (stork.state / "stork_server.log").read_text()
    events = list(htcondor2.JobEventLog(str(log)).events(stop_after=0))
    for job_id in ids:
        kinds = [int(e.type) for e in events if e.cluster == job_id]
        assert kinds == [0, 1, 5], (job_id, kinds)
    # each finished transfer is a transfer log row with the path the daemon knows of: the
    # round trip of a connect to the server (loopback here) and STORK_LINK_MBPS
    rows = stork.api("GET", "/v1/transfers").json()["transfers"]
    assert len(rows) == 3
    assert all(r["p"] == 4 and r["bytes_moved"] == 50 * MB and r["throughput_mbps"] > 0
               and r["bandwidth_bps"] == 1000e6 for r in rows), rows
    assert all(r["rtt_s"] is not None and 0 < r["rtt_s"] < 0.5 for r in rows), rows


def test_missing_source_fails_at_once_with_the_servers_error(
        stork: StorkServer, gridftp: GridFtpServer, tmp_path: Path) -> None:
    [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 5;
      src_url = "{gridftp.url(tmp_path / 'nope.dat')}"; dest_url = "file://{tmp_path}/x.dat";
      err = "{tmp_path}/x.err" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "FAILED" and job["attempts"] == 1
    assert job["failure_kind"] == "permanent"
    assert "No such file or directory" in job["last_error"]
    assert "No such file or directory" in (tmp_path / "x.err").read_text()


def test_unreachable_server_is_retried_then_fails(stork: StorkServer, tmp_path: Path) -> None:
    from tests.support import free_port

    [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 2; log = "{tmp_path}/u.log";
      src_url = "ftp://127.0.0.1:{free_port()}/x"; dest_url = "file://{tmp_path}/x.dat" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "FAILED" and job["attempts"] == 3 and job["failures"] == 3
    assert job["failure_kind"] == "transient" and "Connection refused" in job["last_error"]
    events = list(htcondor2.JobEventLog(str(tmp_path / "u.log")).events(stop_after=0))
    assert [int(e.type) for e in events] == [0, 1, 8, 1, 8, 1, 8, 5]
    assert "retry limit 2 reached" in events[-2]["Info"]
    assert events[-1]["ReturnValue"] != 0
    starts = [a["started_at"] for a in stork.job(job_id)["attempts"]]
    # backoff grows: 0.2 s then 0.4 s (STORK_RETRY_DELAY = 0.2 in the test config)
    assert starts[1] - starts[0] >= 0.2 and starts[2] - starts[1] >= 0.4


def test_alt_protocols_cycle_through_scheme_pairs(
        stork: StorkServer, gridftp: GridFtpServer, source: Path, tmp_path: Path) -> None:
    gsi = gridftp.url(source).replace("ftp://", "gsiftp://", 1)
    [job_id] = stork.submit(f"""[ dap_type = transfer; alt_protocols = "ftp-file";
      src_url = "{gsi}"; dest_url = "file://{tmp_path}/alt.dat" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "COMPLETED"
    attempts = stork.job(job_id)["attempts"]
    assert [a["src_url"].split(":")[0] for a in attempts] == ["gsiftp", "ftp"]
    assert attempts[0]["outcome"] == "failed" and "credential" in attempts[0]["error"]
    assert md5(tmp_path / "alt.dat") == md5(source)


def test_progress_shows_while_a_gridftp_transfer_runs(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """A FIFO source makes globus-url-copy run for seconds and print -vb performance lines."""
    import os
    import threading
    import time

    fifo = tmp_path / "slow.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as handle:
            for _ in range(16):
                handle.write(b"x" * 4 * MB)
                handle.flush()
                time.sleep(0.5)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 0;
      src_url = "file://{fifo}"; dest_url = "{gridftp.url(gridftp_root / 'fifo.out')}" ]""")

    def moving() -> dict | None:
        job = stork.job(job_id)["job"]
        return job if job["state"] == "RUNNING" and job["bytes_done"] > 0 else None

    from tests.support import wait_for

    job = wait_for(moving, 20, what="progress")
    assert job["rate_mbps"] > 0
    q = stork.cli("stork_q", check=True).stdout
    assert "MiB @" in q and "Mb/s" in q
    feeder.join()
    stork.wait_state(job_id)


def test_http_source_through_a_real_http_server(stork: StorkServer, tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    served = tmp_path / "www"
    served.mkdir()
    src = make_file(served / "data.bin", 3 * MB + 123, seed=3)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        ids = stork.submit(f"""
        [ dap_type = transfer; src_url = "http://127.0.0.1:{port}/data.bin";
          dest_url = "file://{tmp_path}/got.bin" ]
        [ dap_type = transfer; src_url = "http://127.0.0.1:{port}/missing.bin"; max_retries = 3;
          dest_url = "file://{tmp_path}/never.bin" ]""")
        assert stork.wait_state(ids[0])["state"] == "COMPLETED"
        assert md5(tmp_path / "got.bin") == md5(src)
        missing = stork.wait_state(ids[1])
        assert missing["state"] == "FAILED" and missing["attempts"] == 1
        assert "HTTP 404" in missing["last_error"]
    finally:
        httpd.shutdown()


def test_output_and_err_files_get_the_modules_streams(
        stork: StorkServer, gridftp: GridFtpServer, source: Path, tmp_path: Path) -> None:
    [job_id] = stork.submit(f"""[ dap_type = transfer; src_url = "{gridftp.url(source)}";
      dest_url = "file://{tmp_path}/o.dat"; output = "o.out"; err = "o.err" ]""")
    assert stork.wait_state(job_id)["state"] == "COMPLETED"
    out = (stork.workdir / "o.out").read_text()  # relative to the submit directory
    assert f"Source: {gridftp.url(source.parent)}/" in out and "src-50M.dat  ->  o.dat" in out
    assert (stork.workdir / "o.err").read_text() == ""


def test_a_short_destination_is_never_reported_as_success(stork: StorkServer,
                                                          tmp_path: Path) -> None:
    """A module that exits 0 but writes half the file: the size check fails the attempt."""
    import stat

    modules = tmp_path / "modules"
    modules.mkdir()
    liar = modules / "stork.transfer.file-file"
    liar.write_text("#!/bin/sh\nhead -c 1000 \"${1#file://}\" > \"${2#file://}\"\nexit 0\n")
    liar.chmod(liar.stat().st_mode | stat.S_IEXEC)
    stork.write_config(STORK_MODULE_DIR=modules)
    import signal

    stork.signal(signal.SIGHUP)
    time.sleep(1.0)
    src = make_file(tmp_path / "s.dat", 5000)
    [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 1;
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/d.dat" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "FAILED" and job["failure_kind"] == "verify" and job["attempts"] == 2
    assert "destination size 1000 differs from source size 5000" in job["last_error"]
    assert not (tmp_path / "d.dat").exists()


def test_an_end_that_does_not_answer_the_verification_is_asked_once_more(
        stork: StorkServer, tmp_path: Path) -> None:
    """A module that exits 0 while its copy lands a second later: the first size query finds
    no destination, the second (VERIFY_REASK_S later) finds it, and the job completes in one
    attempt. A destination that never lands fails as `verify`, saying it was asked twice."""
    import signal
    import stat

    modules = tmp_path / "modules"
    modules.mkdir()
    late = modules / "stork.transfer.file-file"
    late.write_text("#!/bin/sh\ncase \"$2\" in *never*) exit 0;; esac\n"
                    "(sleep 1; cp \"${1#file://}\" \"${2#file://}\") </dev/null >/dev/null 2>&1 &\n"
                    "exit 0\n")
    late.chmod(late.stat().st_mode | stat.S_IEXEC)
    stork.write_config(STORK_MODULE_DIR=modules)
    stork.signal(signal.SIGHUP)
    time.sleep(1.0)
    src = make_file(tmp_path / "s.dat", 5000)
    landed, never = stork.submit(f"""
    [ dap_type = transfer; max_retries = 0;
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/late.dat" ]
    [ dap_type = transfer; max_retries = 0;
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/never.dat" ]""")
    job = stork.wait_state(landed)
    assert job["state"] == "COMPLETED" and job["attempts"] == 1, job
    assert md5(tmp_path / "late.dat") == md5(src)
    job = stork.wait_state(never)
    assert job["state"] == "FAILED" and job["failure_kind"] == "verify", job
    assert "never.dat" in job["last_error"] and "asked twice" in job["last_error"], job


def test_the_ads_stork_server_picks_the_server(stork: StorkServer, tmp_path: Path) -> None:
    other = StorkServer(tmp_path / "other")  # the config names a server that is not running
    src = make_file(tmp_path / "s.dat", 1000)
    (tmp_path / "j.dap").write_text(f"""[ dap_type = transfer; stork_server = "{stork.socket}";
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/d.dat" ]""")
    result = other.cli("stork_submit", "--wait", str(tmp_path / "j.dap"))
    assert result.returncode == 0, result.stderr
    assert "Request assigned id: 1" in result.stdout
    assert stork.job(1)["job"]["state"] == "COMPLETED"


def test_x509proxy_reaches_the_module_environment(stork: StorkServer, tmp_path: Path) -> None:
    """An external module sees X509_USER_PROXY (globus-url-copy reads its proxy from it)."""
    modules = tmp_path / "modules"
    modules.mkdir()
    probe = modules / "stork.transfer.file-file"
    probe.write_text('#!/bin/sh\nprintf "%s" "$X509_USER_PROXY" > "${2#file://}.proxy"\n'
                     'cp "${1#file://}" "${2#file://}"\n')
    probe.chmod(0o755)
    stork.write_config(STORK_MODULE_DIR=modules)
    import signal

    stork.signal(signal.SIGHUP)
    time.sleep(1.0)
    src = make_file(tmp_path / "s.dat", 1000)
    proxy = tmp_path / "x509up_u0"
    proxy.write_text("not a real proxy")
    proxy.chmod(0o600)
    ids = stork.submit(f"""
    [ dap_type = transfer; x509proxy = "x509up_u0";
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/a.dat" ]
    [ dap_type = transfer; x509proxy = "default";
      src_url = "file://{src}"; dest_url = "file://{tmp_path}/b.dat" ]""")
    for job_id in ids:
        assert stork.wait_state(job_id)["state"] == "COMPLETED"
    assert (tmp_path / "a.dat.proxy").read_text() == str(proxy)  # relative to the submit dir
    assert (tmp_path / "b.dat.proxy").read_text() == ""


def test_x509proxy_must_be_the_submitters_own_0600_file(stork: StorkServer,
                                                        tmp_path: Path) -> None:
    proxy = tmp_path / "x509up"
    proxy.write_text("proxy")
    ad = ('[ dap_type = transfer; x509proxy = "{p}"; src_url = "file:///tmp/a"; '
          'dest_url = "file:///tmp/b" ]')
    proxy.chmod(0o644)
    (tmp_path / "j.dap").write_text(ad.format(p=proxy))
    loose = stork.cli("stork_submit", "j.dap")
    assert loose.returncode != 0
    assert f"attribute 'x509proxy': {proxy} has mode 0644; a proxy must be 0600" in loose.stderr
    os.chown(proxy, 65534, 65534)
    proxy.chmod(0o600)
    theirs = stork.cli("stork_submit", "j.dap")
    assert theirs.returncode != 0 and "belongs to uid 65534, not to the submitter" in theirs.stderr
    (tmp_path / "j.dap").write_text(ad.format(p=tmp_path / "missing"))
    missing = stork.cli("stork_submit", "j.dap")
    assert missing.returncode != 0 and "No such file or directory" in missing.stderr
    assert stork.api("GET", "/v1/jobs").json()["jobs"] == []  # nothing was queued
