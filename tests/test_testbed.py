"""The emulated WAN testbed: the link emulator's shaping (pure), topologies, and a smoke run
of two real sites with the real daemon inside one of them (skipped, with the reason, where the
machine cannot host namespaces and TUN devices)."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
from tests.testbed.linkemu import Shaper
from tests.testbed.measure import check_link
from tests.testbed.netns import CC_SYSCTL

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
                      f'optimization = "{"YES" if i == 0 else "NO"}"; ]\n'
                      for i, f in enumerate(files))
        ids = server.submit(ads)
        est = work / "est.dap"
        est.write_text(f'[ dap_type = estimation; src_url = "{bed.url("a", files[2])}"; '
                       f'dest_url = "{bed.url("b", dst_dir / "est.dat")}"; ]')
        answer = server.cli("stork_submit", str(est), check=True).stdout
        jobs = [server.wait_state(i, timeout_s=90) for i in ids]
    assert [j["state"] for j in jobs] == ["COMPLETED"] * 3
    for f in files:
        assert md5(dst_dir / f.name) == md5(f)
    assert jobs[0]["result"]["optimized_streams"] >= 1
    assert "optimal_streams" in answer and "samples" in answer
    # the data crossed the emulated link, not loopback
    assert "198.18." in (work / "state" / "stork_server.log").read_text()


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
    import json

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
