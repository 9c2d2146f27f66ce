"""The EOS against real tools: GridFTP and iperf3 samplers, estimation jobs through the daemon,
optimized transfers, shared sampling runs and the history."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from stork import config
from stork.eos.samplers import (
    MODE_E_BLOCK,
    GridFtpSampler,
    Iperf3Sampler,
    Sampler,
    SamplingError,
    Steady,
    steady_rate,
)
from stork.eos.service import EosService
from stork.eos.types import EstimateRequest, EstimateResult
from stork.store import SqliteStore
from stork.tuning.sampling import Sample
from tests.support import (
    GridFtpServer,
    StorkServer,
    free_port,
    make_file,
    md5,
    up_or_ended,
    wait_for,
)

MB = 1024 * 1024
# the sampling mechanics on 16 MiB files; the budget (which would not sample them) is tested
# in test_eos_budget.py
EOS_KNOBS = {"EOS_SAMPLE_SIZE": "4M", "EOS_MAX_STREAMS": "16", "EOS_SAMPLING_BUDGET": "0"}


@pytest.fixture(scope="module")
def big(gridftp_root: Path) -> Path:
    return make_file(gridftp_root / "eos-src-16M.dat", 16 * MB, seed=11)


@pytest.fixture
def eos_stork(tmp_path: Path) -> Iterator[StorkServer]:
    server = StorkServer(tmp_path, EOS_KNOBS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def iperf3_server() -> Iterator[int]:
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed; run `make setup`")
    for _ in range(3):  # a port another process took first: iperf3 exits, try another
        port = free_port()
        proc = subprocess.Popen(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(functools.partial(up_or_ended, proc, port), 10, what="iperf3 server")
        if proc.poll() is None:
            break
    else:
        raise RuntimeError(f"iperf3 -s exited with status {proc.returncode} on three ports")
    yield port
    proc.kill()
    proc.wait()


def test_gridftp_sampler_moves_a_slice_and_cleans_up(gridftp: GridFtpServer, big: Path,
                                                     gridftp_root: Path) -> None:
    dest_dir = gridftp_root / "eos-dest"
    dest_dir.mkdir(exist_ok=True)
    sampler = GridFtpSampler(gridftp.url(big), gridftp.url(dest_dir / "target.dat"), 3 * MB)
    sample = sampler.measure(4)
    assert sample.streams == 4 and sample.bytes_moved == 3 * MB and sample.mbps > 0
    assert "-p" in sample.raw["argv"] and "4" in sample.raw["argv"]
    assert "-partial-length" in sample.raw["argv"]
    assert list(dest_dir.iterdir()) == []  # the scratch file is gone
    broken = GridFtpSampler(gridftp.url(big.parent / "missing.dat"),
                            gridftp.url(dest_dir / "t.dat"), MB)
    with pytest.raises(SamplingError, match="No such file or directory"):
        broken.measure(1)


def test_steady_rate_leaves_out_the_start_up() -> None:
    points = [(0.1, 0), (0.3, 0), (0.5, 1_000_000), (1.0, 6_000_000), (1.5, 11_000_000)]
    steady = steady_rate(points)
    assert steady is not None and steady.setup_s == 0.5 and steady.mbps == pytest.approx(80.0)
    # a slow-start burst of 10 MB in half a second, then 1 MB/s: the rate is the 1 MB/s
    burst = [(0.5, 1_000_000), (1.0, 11_000_000), (2.0, 12_000_000), (3.0, 13_000_000),
             (4.0, 14_000_000), (5.0, 15_000_000)]
    steady = steady_rate(burst)
    assert steady is not None and steady.setup_s == 0.5 and steady.mbps == pytest.approx(8.0)
    assert (steady.startup_s, steady.startup_bytes) == (1.5, 12_000_000)
    # a transfer of a given size repeats the set-up and start-up, then runs at the steady rate
    sample = Sample(1, steady.mbps, setup_s=steady.setup_s, startup_s=steady.startup_s,
                    startup_bytes=steady.startup_bytes)
    assert sample.seconds_for(15_000_000, steady.mbps) == pytest.approx(5.0)
    assert sample.seconds_for(112_000_000, steady.mbps) == pytest.approx(102.0)
    assert sample.seconds_for(6_000_000, steady.mbps) == pytest.approx(1.25)
    # a completed sample: the size reaches its total while gaps still fill (4.0 -> 5.0 s);
    # the rate is taken between polls of the steady part, where the lead is the same
    tail = [(0.5, 1_000_000), (1.0, 3_000_000), (2.0, 5_000_000), (3.0, 7_000_000),
            (4.0, 10_000_000), (5.0, 10_000_000)]
    steady = steady_rate(tail, total=10_000_000)
    assert steady is not None and steady.mbps == pytest.approx(16.0)  # 2.0 -> 3.0 s
    assert steady.finish_s == pytest.approx(0.5)  # 3 MB in 2 s where the rate moves it in 1.5
    whole = steady_rate(tail)
    assert whole is not None and whole.mbps == pytest.approx(13.33, rel=1e-3)
    assert steady_rate(points[:3]) is None  # one point with data: cannot tell a rate
    assert steady_rate([(0.5, 1), (0.55, 2), (0.6, 3)]) is None  # under 0.2 s of data


def test_steady_rate_widens_where_the_size_jumps_a_block_per_stream() -> None:
    """Polls of a real 32 MiB sample with 32 streams at 366 ms (the size in MiB where it
    changed): the size jumps 8 MiB (32 blocks of 256 KiB) at once and stands while the gaps
    fill, so its slope in the steady part says nothing; from the first byte to the end the
    sample ran at about 34 Mbit/s."""
    mib = 1 << 20
    jumps = [(6.35, 0.5), (6.65, 8.25), (7.15, 8.5), (7.55, 16.25), (8.05, 16.75),
             (8.15, 24.0), (8.76, 26.25), (8.86, 28.0), (8.96, 29.75), (9.06, 30.0),
             (9.36, 30.25), (9.46, 31.25), (10.16, 32.0), (14.09, 32.0)]
    points = [(t, int(m * mib)) for t, m in jumps]
    blind = steady_rate(points, total=32 * mib)
    assert blind is not None and blind.mbps < 5 and not blind.widened
    steady = steady_rate(points, total=32 * mib, lead_bytes=32 * MODE_E_BLOCK)
    assert steady is not None and steady.widened
    assert steady.mbps == pytest.approx(31.5 * mib * 8 / 1e6 / (14.09 - 6.35))
    assert (steady.setup_s, steady.startup_s, steady.finish_s) == (6.35, 0.0, 0.0)
    # a sample stopped early, 5 MiB of lead: the steady part (3.0 -> 7.0 s) moved 4 MiB
    stopped = [(t, m * mib) for t, m in ((1.0, 1), (2.0, 3), (3.0, 5), (4.0, 6), (5.0, 7),
                                         (6.0, 8), (7.0, 9))]
    steady = steady_rate(stopped, lead_bytes=20 * MODE_E_BLOCK)
    assert steady == Steady(8 * mib * 8 / 1e6 / 6.0, 1.0, 0.0, 1 * mib, 0.0, widened=True)
    # one stream's lead (256 KiB): the steady part (3.0 -> 7.0 s) moved 16 leads, and is kept
    assert steady_rate(stopped, lead_bytes=MODE_E_BLOCK) == steady_rate(stopped)
    assert steady_rate(stopped) == Steady(8.388608, 1.0, 2.0, 5 * mib, 0.0)


def test_iperf3_sampler_reads_the_json_report(iperf3_server: int) -> None:
    sample = Iperf3Sampler("127.0.0.1", iperf3_server, seconds=2).measure(2)
    assert sample.streams == 2 and sample.mbps > 10 and sample.bytes_moved > 0
    with pytest.raises(SamplingError, match="failed"):
        Iperf3Sampler("127.0.0.1", free_port(), seconds=1).measure(1)


def test_estimation_job_end_to_end(eos_stork: StorkServer, gridftp: GridFtpServer, big: Path,
                                   tmp_path: Path) -> None:
    (tmp_path / "est.dap").write_text(f"""[ dap_type = estimation;
        src_url = "{gridftp.url(big)}"; dest_url = "{gridftp.url(tmp_path / 'x.dat')}";
        size = 1073741824 ]""")
    plot = tmp_path / "est.png"
    result = eos_stork.cli("stork_submit", "--plot", str(plot), "est.dap", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Request assigned id: 1" in out
    import classad2

    ad = classad2.ClassAd(out[out.index("["):out.rindex("]") + 1])
    assert 1 <= ad["optimal_streams"] <= 16
    assert ad["estimated_throughput_mbps"] > 0
    assert ad["estimated_time_s"] == pytest.approx(
        1073741824 * 8 / 1e6 / ad["estimated_throughput_mbps"], rel=1e-3)
    assert ad["model"] in ("second_order", "dynamic_order", "best_sample")
    assert len(ad["samples"]) >= 2 and ad["sampling_time_s"] > 0
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"
    status = eos_stork.cli("stork_status", "1", check=True).stdout
    assert "optimal_streams = " in status and "COMPLETED" in status
    # never through the transfer queue: no transfer module ran for it
    assert eos_stork.job(1)["attempts"][0]["module"] == "eos"


def test_equal_requests_in_flight_share_one_sampling_run(tmp_path: Path) -> None:
    settings = config.load(None, env={"HOME": str(tmp_path)})
    store = SqliteStore(str(tmp_path / "q.db"))
    gate = threading.Event()
    calls: list[int] = []

    class SlowSampler(Sampler):
        name = "fake-timed"

        def measure(self, n: int) -> Sample:  # a stand-in network: a curve peaking at 8
            gate.wait(10)
            calls.append(n)
            return Sample(n, 100 * n / (1 + (n / 8) ** 2) ** 0.5 / (1 + n / 64))

    eos = EosService(settings, store, sampler_factory=lambda r: SlowSampler())
    a = EstimateRequest("ftp://10.9.9.1:2811/data/a", "ftp://10.9.9.2:2811/data/b", "-b 1M")
    swapped = EstimateRequest("ftp://10.9.9.2:2811/data/c", "ftp://10.9.9.1:2811/data/d",
                              "-b 1048576")
    other_args = EstimateRequest("ftp://10.9.9.1:2811/data/a", "ftp://10.9.9.2:2811/data/b",
                                 "-b 2M")
    results: dict[str, EstimateResult] = {}
    threads = [threading.Thread(target=lambda k=k, r=r: results.__setitem__(k, eos.estimate(r)),
                                daemon=True)
               for k, r in (("a", a), ("a2", a), ("swapped", swapped), ("other", other_args))]
    for t in threads:
        t.start()
    # one row for the host pair: the equal requests behind the first, the -b 2M one waiting
    # its turn (approximate tasks never sample at the same time)
    wait_for(lambda: len(eos.matrix) == 4, 5, what="four tasks in the matrix")
    assert len(eos.matrix.running()) == 1 and len(eos.matrix.rows()) == 1
    gate.set()
    for t in threads:
        t.join(20)
    assert eos.sampling_runs == 2  # one for the equal triple (either direction), one for -b 2M
    assert len(eos.matrix) == 0
    assert results["a"].optimal_streams == results["a2"].optimal_streams == \
        results["swapped"].optimal_streams
    assert sum(r.shared_run for r in results.values()) == 2
    rows = store.history("10.9.9.1:2811", "10.9.9.2:2811", symmetric=True, kind="optimization")
    assert len(rows) == 2
    eos.shutdown()


def test_optimized_transfer_records_its_parameters(eos_stork: StorkServer, gridftp: GridFtpServer,
                                                   big: Path, tmp_path: Path) -> None:
    dest = tmp_path / "opt.dat"
    [job_id] = eos_stork.submit(f"""[ dap_type = transfer; optimization = "eos";
        src_url = "{gridftp.url(big)}"; dest_url = "file://{dest}" ]""")
    job = eos_stork.wait_state(job_id)
    assert job["state"] == "COMPLETED" and md5(dest) == md5(big)
    result = job["result"]
    streams = result["optimized_streams"]
    assert 1 <= streams <= 16 and result["predicted_throughput_mbps"] > 0
    assert result["achieved_throughput_mbps"] > 0 and result["streams_used"] == streams
    assert result["eos_from_history"] is False
    assert f"-p {streams} " in (eos_stork.state / "stork_server.log").read_text()
    ad = eos_stork.cli("stork_q", "-l", check=True).stdout
    assert f"optimized_streams = {streams}" in ad and "achieved_throughput_mbps" in ad
    # one throughput figure for the finished job, wherever it is shown
    import classad2

    achieved = result["achieved_throughput_mbps"]
    parsed = classad2.ClassAd(ad[ad.index("["):ad.rindex("]") + 1])
    assert job["rate_mbps"] == parsed["transfer_rate_mbps"] == achieved


def slow_globus_url_copy(tmp_path: Path, delay_s: float = 1.0) -> Path:
    """globus-url-copy behind a pause, so samples (and transfers) take a while."""
    real = shutil.which("globus-url-copy")
    assert real is not None
    wrapper = tmp_path / "slow-guc"
    wrapper.write_text(f'#!/bin/sh\nsleep {delay_s}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_a_job_being_optimized_waits_for_it_and_can_be_removed(
        tmp_path: Path, gridftp: GridFtpServer, big: Path) -> None:
    """Sampling is a phase of its own before launch: the job stays IDLE with the wait reason
    "optimizing: EOS sampling" (no attempt, no execute event), holds its transfer slot, and
    a removal meanwhile ends it REMOVED without any transfer starting."""
    server = StorkServer(tmp_path, {**EOS_KNOBS, "STORK_MAX_NUM_JOBS": "1",
                                    "STORK_GLOBUS_URL_COPY": str(slow_globus_url_copy(tmp_path)),
                                    "EOS_SAMPLE_TIME": "2"}).start()
    dest = tmp_path / "optimized.dat"
    plain_src = make_file(tmp_path / "plain.dat", 1024 * 1024, seed=5)
    log = tmp_path / "opt.log"
    try:
        optimized, plain = server.submit(f"""
            [ dap_type = transfer; optimization = "eos"; log = "{log}";
              src_url = "{gridftp.url(big)}"; dest_url = "file://{dest}" ]
            [ dap_type = transfer; src_url = "file://{plain_src}";
              dest_url = "file://{tmp_path}/plain.out" ]""")

        def optimizing() -> dict | None:
            job = server.job(optimized)["job"]
            return job if job["wait_reason"] == "optimizing: EOS sampling" else None

        job = wait_for(optimizing, 20, what="the job to be optimized")
        assert job["state"] == "IDLE" and job["attempts"] == 0
        assert server.job(optimized)["attempts"] == []
        # the optimization holds the only slot: the other transfer waits for it
        assert server.job(plain)["job"]["wait_reason"] == "slots full"
        assert "optimizing: EOS sampling" in server.cli("stork_q", check=True).stdout
        status = server.cli("stork_status", str(optimized), check=True).stdout
        assert f"Job {optimized}: IDLE" in status and "Waiting: optimizing: EOS sampling" in status
        server.cli("stork_rm", str(optimized), check=True)
        assert server.wait_state(optimized, timeout_s=10)["state"] == "REMOVED"
        # the sampling run ends, then the slot goes to the other job; the removed one never ran
        assert server.wait_state(plain, timeout_s=60)["state"] == "COMPLETED"
        info = server.job(optimized)
        assert info["attempts"] == [] and info["job"]["state"] == "REMOVED"
        assert "execute" not in [e["kind"] for e in info["events"]]
        assert not dest.exists()
        import htcondor2

        codes = [int(e.type) for e in htcondor2.JobEventLog(str(log)).events(stop_after=0)]
        assert codes == [0, 9]
    finally:
        server.stop()


def test_queued_equal_jobs_take_the_run_that_ended_after_they_were_queued(
        tmp_path: Path, gridftp: GridFtpServer, big: Path) -> None:
    server = StorkServer(tmp_path, {**EOS_KNOBS, "STORK_MAX_NUM_JOBS": "1"}).start()
    try:
        ads = "".join(f'''[ dap_type = transfer; optimization = "eos";
            src_url = "{gridftp.url(big)}"; dest_url = "file://{tmp_path}/q{i}.dat" ]'''
                      for i in range(3))
        ids = server.submit(ads)  # one at a time: the first samples, the others wait queued
        results = [server.wait_state(i)["result"] for i in ids]
        assert [r["eos_shared_run"] for r in results] == [False, True, True]
        assert len({r["optimized_streams"] for r in results}) == 1
        [late] = server.submit(ads.split("]")[0] + "]")  # queued after that run ended
        assert server.wait_state(late)["result"]["eos_shared_run"] is False
        store = SqliteStore(str(server.state / "stork.db"))
        src, dest = EstimateRequest(gridftp.url(big), f"file://{tmp_path}/q0.dat").hosts()
        runs = store.history(src, dest, symmetric=False, kind="optimization")
        assert len(runs) == 2  # four jobs, two sampling runs
    finally:
        server.stop()


def test_share_window_zero_samples_for_every_job(tmp_path: Path) -> None:
    settings = config.load(None, env={"HOME": str(tmp_path)})
    now = [1000.0]
    runs: list[int] = []

    class Curve(Sampler):
        name = "fake-curve"

        def measure(self, n: int) -> Sample:  # a stand-in network (the logic is under test)
            runs.append(n)
            return Sample(n, 100 * n / (1 + n / 8))

    def service(window: str) -> EosService:
        s = config.load(None, env={"HOME": str(tmp_path), "_STORK_EOS_SHARE_WINDOW": window})
        return EosService(s, None, sampler_factory=lambda r: Curve(), clock=lambda: now[0])

    def request(queued: float | None) -> EstimateRequest:
        return EstimateRequest("ftp://10.9.9.1:2811/a", "ftp://10.9.9.2:2811/b",
                               size_bytes=2 * 10**9, queued_since=queued)

    eos = service("3600")
    assert eos.estimate(request(900.0)).shared_run is False
    assert eos.estimate(request(990.0)).shared_run is True  # queued before it ended
    assert eos.estimate(request(None)).shared_run is False  # an estimation job samples
    now[0] = 1001.0
    assert eos.estimate(request(1000.5)).shared_run is False  # queued after it ended
    now[0] = 1001.0 + 3601
    assert eos.estimate(request(900.0)).shared_run is False  # the run is too old
    assert eos.sampling_runs == 4
    eager = service("0")
    assert eager.estimate(request(900.0)).shared_run is False
    assert eager.estimate(request(900.0)).shared_run is False
    assert eager.sampling_runs == 2 and settings.eos_share_window_s == 3600
    eos.shutdown()
    eager.shutdown()


def test_explicit_streams_win_and_no_means_default(tmp_path: Path, gridftp: GridFtpServer,
                                                    big: Path) -> None:
    server = StorkServer(tmp_path, {**EOS_KNOBS, "STORK_DEFAULT_STREAMS": "2"}).start()
    try:
        ids = server.submit(f"""
        [ dap_type = transfer; optimization = "YES"; arguments = "-p 3";
          src_url = "{gridftp.url(big)}"; dest_url = "file://{tmp_path}/p3.dat" ]
        [ dap_type = transfer; optimization = "NO";
          src_url = "{gridftp.url(big)}"; dest_url = "file://{tmp_path}/d2.dat" ]""")
        jobs = [server.wait_state(i) for i in ids]
        assert [j["result"]["streams_used"] for j in jobs] == [3, 2]
        assert "optimized_streams" not in jobs[0]["result"]
        history = server.cli("stork_history", gridftp.url(big), f"file://{tmp_path}/x",
                             check=True).stdout
        assert "optimization" not in history  # nothing was sampled
        assert history.count("transfer") >= 2 and "2 row(s)" in history
    finally:
        server.stop()


def test_history_hit_skips_sampling_and_miss_fills_it(eos_stork: StorkServer,
                                                     gridftp: GridFtpServer, big: Path,
                                                     tmp_path: Path) -> None:
    ad = (f'[ dap_type = estimation; use_history = "YES"; src_url = "{gridftp.url(big)}"; '
          f'dest_url = "{gridftp.url(tmp_path / "h.dat")}" ]')
    first = eos_stork.submit(ad)[0]
    one = eos_stork.wait_state(first)["result"]
    second = eos_stork.submit(ad)[0]
    two = eos_stork.wait_state(second)["result"]
    assert one["from_history"] is False and two["from_history"] is True
    assert two["optimal_streams"] == one["optimal_streams"] and two["sampling_time_s"] == 0
    rows = json.loads(eos_stork.api("GET", "/v1/history", params={
        "src": gridftp.url(big), "dest": gridftp.url(tmp_path)}).text)["history"]
    assert [r["kind"] for r in rows] == ["optimization"]
    text = eos_stork.cli("stork_history", f"127.0.0.1:{gridftp.port}",
                         f"127.0.0.1:{gridftp.port}", check=True).stdout
    assert "optimization" in text and "1 row(s)" in text


def test_remote_eos_server_answers_for_opt_server(tmp_path: Path, gridftp: GridFtpServer,
                                                   big: Path) -> None:
    port = free_port()
    eos_dir = tmp_path / "eos"
    token = tmp_path / "eos.token"
    token.write_text("eos-token-" + "x" * 20)
    token.chmod(0o600)
    knobs = {**EOS_KNOBS, "EOS_API_TOKEN_FILE": str(token)}
    eos_cfg = StorkServer(eos_dir, {**knobs, "EOS_API_ADDRESS": f"127.0.0.1:{port}"})
    proc = subprocess.Popen([str(Path(eos_cfg.env()["PATH"].split(":")[0]) / "eos_server")],
                            env=eos_cfg.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = StorkServer(tmp_path / "stork", knobs).start()
    try:
        import httpx

        wait_for(lambda: _pings(port), 20, what="eos_server")
        [job_id] = server.submit(f"""[ dap_type = estimation; opt_server = "127.0.0.1:{port}";
            src_url = "{gridftp.url(big)}"; dest_url = "{gridftp.url(tmp_path / 'r.dat')}" ]""")
        job = server.wait_state(job_id)
        assert job["state"] == "COMPLETED" and job["result"]["optimal_streams"] >= 1
        ping = httpx.get(f"http://127.0.0.1:{port}/v1/ping",
                         headers={"Authorization": f"Bearer {token.read_text()}"})
        assert ping.json()["sampling_runs"] == 1
        remote_rows = SqliteStore(str(eos_dir / "state" / "stork.db")).history(
            f"127.0.0.1:{gridftp.port}", f"127.0.0.1:{gridftp.port}", symmetric=True)
        assert len(remote_rows) == 1  # the remote EOS sampled and remembered it
    finally:
        server.stop()
        proc.terminate()
        proc.wait(10)


def _pings(port: int) -> bool:
    import httpx

    try:
        # without the token eos_server refuses, which still says it is up
        return httpx.get(f"http://127.0.0.1:{port}/v1/ping", timeout=1).status_code == 403
    except httpx.TransportError:
        return False


def test_gridftp_samples_use_the_jobs_proxy(tmp_path: Path) -> None:
    """The sampler hands x509proxy to globus-url-copy as X509_USER_PROXY."""
    fake = tmp_path / "globus-url-copy"
    fake.write_text(f'#!/bin/sh\nprintf "%s" "$X509_USER_PROXY" > {tmp_path}/seen\n'
                    'echo "error: no server here" >&2\nexit 1\n')
    fake.chmod(0o755)
    sampler = GridFtpSampler("gsiftp://a.example/x", "gsiftp://b.example/y", MB, str(fake),
                             x509proxy="/tmp/x509up_u77")
    with pytest.raises(SamplingError, match="no server here"):
        sampler.measure(2)
    assert (tmp_path / "seen").read_text() == "/tmp/x509up_u77"
