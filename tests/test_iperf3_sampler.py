"""The iperf3 sampler against a server between two tests: refused, then tried again (a fake
iperf3 that answers as the real one does; tests/test_eos.py runs the real one)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from stork.eos import samplers
from stork.eos.samplers import Iperf3Sampler, SamplingError

REPORT = {"end": {"sum_received": {"bits_per_second": 42e6, "bytes": 15_750_000}}}


def fake_iperf3(tmp_path: Path, answers: list[str]) -> Path:
    """An `iperf3` that prints the next of `answers` ("refused", "busy", "ok", "broken")
    each time it runs, as the real one does (JSON, exit 1 on an error)."""
    (tmp_path / "answers").write_text("\n".join(answers) + "\n")
    script = tmp_path / "iperf3"
    script.write_text(f"""#!/usr/bin/env python3
import json, sys
from pathlib import Path
queue = Path({str(tmp_path / "answers")!r})
answers = queue.read_text().split()
queue.write_text("\\n".join(answers[1:]) + "\\n")
Path({str(tmp_path / "runs")!r}).open("a").write(" ".join(sys.argv[1:]) + "\\n")
errors = {{"refused": "unable to connect to server: Connection refused",
           "busy": "the server is busy running a test. try again later",
           "broken": "unable to receive results: Bad file descriptor"}}
if answers[0] == "ok":
    print(json.dumps({json.dumps(REPORT)}))
    sys.exit(0)
print(json.dumps({{"start": {{}}, "error": errors[answers[0]]}}))
sys.exit(1)
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text().splitlines())


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samplers, "IPERF_RETRY_WAIT_S", 0.01)


def test_a_refused_or_busy_server_is_tried_again(tmp_path: Path) -> None:
    tool = fake_iperf3(tmp_path, ["refused", "busy", "ok"])
    sample = Iperf3Sampler("198.18.0.3", 5201, seconds=1, executable=str(tool)).measure(8)
    assert sample.streams == 8 and sample.mbps == 42.0 and sample.bytes_moved == 15_750_000
    assert runs(tmp_path) == 3
    assert (tmp_path / "runs").read_text().splitlines()[0] == \
        "-c 198.18.0.3 -p 5201 -P 8 -t 1 -O 1 -J"


def test_a_server_that_keeps_refusing_fails_the_sample(tmp_path: Path) -> None:
    tool = fake_iperf3(tmp_path, ["refused"] * 5)
    with pytest.raises(SamplingError, match="Connection refused \\(3 tries\\)"):
        Iperf3Sampler("198.18.0.3", 5201, seconds=1, executable=str(tool)).measure(1)
    assert runs(tmp_path) == samplers.IPERF_TRIES == 3


def test_other_errors_are_not_tried_again(tmp_path: Path) -> None:
    tool = fake_iperf3(tmp_path, ["broken", "ok"])
    with pytest.raises(SamplingError, match="Bad file descriptor") as caught:
        Iperf3Sampler("198.18.0.3", 5201, seconds=1, executable=str(tool)).measure(1)
    assert runs(tmp_path) == 1 and "tries" not in str(caught.value)
