"""Pure parts of dataset jobs: size classes and defaults, batches, the wire format, and the
verdict on a pass."""

from __future__ import annotations

import dataclasses

import pytest

from stork.config import load
from stork.dataset.chunks import (
    Params,
    SizeClass,
    batches,
    default_params,
    pipelining_flag,
    plan_chunks,
    size_class,
    streams_to_fill,
)
from stork.dataset.expand import Dataset, DatasetFile
from stork.dataset.wire import from_wire, to_wire
from stork.errors import DatasetError
from stork.job import DapType, Job, JobSpec, JobState
from stork.server.judge import DatasetFacts, DatasetOutcome, judge_dataset
from stork.server.runner import StopReason

BDP = 1_000_000  # 200 Mbit/s x 40 ms


def test_size_classes_are_relative_to_the_bdp() -> None:
    assert size_class(256 << 10, BDP) is SizeClass.SMALL
    assert size_class(2 << 20, BDP) is SizeClass.MEDIUM
    assert size_class(64 << 20, BDP) is SizeClass.LARGE
    assert size_class(None, BDP) is SizeClass.MEDIUM
    assert size_class(256 << 10, 100_000) is SizeClass.MEDIUM  # a LAN: the same file is bigger


def test_chunks_have_their_own_defaults_and_arguments_override_them() -> None:
    sizes = [(0, 256 << 10), (1, 64 << 20), (2, 300 << 10)]
    small, large = plan_chunks(sizes, BDP)
    assert (small.size_class, small.indexes) == (SizeClass.SMALL, (0, 2))
    assert small.params.pp > 1 and small.params.p == 1 and small.params.pipelining
    assert large.params.p > 1 and large.params.pp == 1 and not large.params.pipelining
    assert small.params.cc > large.params.cc
    # a small file takes its streams as concurrency alone: as many as a large file's chunk
    assert small.params.cc * small.params.p == large.params.cc * large.params.p == 32
    fixed = plan_chunks(sizes, BDP, cc=3, p=2, pp=1)
    assert {(c.params.cc, c.params.p, c.params.pp) for c in fixed} == {(3, 2, 1)}
    assert "pp=1 (off)" in fixed[0].label()


def test_a_path_of_a_short_round_trip_starts_with_the_streams_that_fill_it() -> None:
    """Mathis's bound at 1% loss: a stream fills about 17.9 KB of the BDP. Where the chunk's
    files in flight already carry that many, each takes one stream; long paths keep the
    caps (the BDP is many times that)."""
    short = 200e6 * 0.002 / 8  # 2 ms at 200 Mbit/s: 50 KB
    assert streams_to_fill(short) == 3
    assert streams_to_fill(1.0) == 1
    assert streams_to_fill(0.0) is None  # a round trip not measured: no bound
    assert default_params(SizeClass.LARGE, 64 << 20, 0.0) == Params(8, 4, 1)
    assert streams_to_fill(250_000) == 14  # 10 ms at 200 Mbit/s
    assert default_params(SizeClass.LARGE, 64 << 20, short) == Params(8, 1, 1)
    assert default_params(SizeClass.MEDIUM, 400_000, short) == Params(8, 1, 2)
    assert default_params(SizeClass.LARGE, 64 << 20, 250_000) == Params(8, 2, 1)
    # wan40's BDP takes 56 streams to fill: the 4 streams a file of the cap, as before
    assert streams_to_fill(BDP) == 56
    assert default_params(SizeClass.LARGE, 64 << 20, BDP) == Params(8, 4, 1)
    assert default_params(SizeClass.MEDIUM, 2 << 20, BDP) == Params(8, 3, 2)


def test_pipelining_depth_maps_to_on_from_two() -> None:
    assert [pipelining_flag(d) for d in (1, 2, 16)] == [False, True, True]


def test_batches_bound_what_a_kill_can_cost() -> None:
    sizes: dict[int, int | None] = dict.fromkeys(range(2000), 256 << 10)
    runs = batches(list(range(2000)), sizes, cc=8)
    assert sum(len(r) for r in runs) == 2000 and [i for r in runs for i in r] == list(range(2000))
    assert max(len(r) for r in runs) == 256  # 64 MiB of 256 KiB files
    assert [len(r) for r in batches(list(range(3)), {}, cc=8)] == [3]


def test_the_wire_format_round_trips_and_is_checked_again() -> None:
    files = (DatasetFile("ftp://h/d/a%20b", "file:///o/a%20b", "a b", 5),
             DatasetFile("ftp://h/d/s/c", "file:///o/s/c", "s/c", None))
    wire = to_wire(Dataset(files), url_list=False)
    assert from_wire("ftp://h/d/", "file:///o/", None, wire, max_files=10).files == files
    with pytest.raises(DatasetError, match="STORK_MAX_FILES_PER_JOB = 1"):
        from_wire("ftp://h/d/", "file:///o/", None, wire, max_files=1)
    for bad in ({"rel": [["../etc/passwd", 1]]}, {"rel": [["a", -1]]}, {"rel": []},
                {"rel": [["a", 1], ["a", 2]]}, {"pairs": []}):
        with pytest.raises(DatasetError):
            from_wire("ftp://h/d/", "file:///o/", None, bad, max_files=10)
    pairs = {"pairs": [["ftp://h/a", "file:///o/x"], ["ftp://h/b", "file:///o/x"]]}
    with pytest.raises(DatasetError, match="two sources go to one destination"):
        from_wire("", "", "/l.txt", pairs, max_files=10)


def _job(**counts: int) -> Job:
    spec = JobSpec(DapType.TRANSFER, "ftp://h/d/", "file:///o/", ad_text="[]")
    return Job(1, 0, "root", JobState.RUNNING, spec.to_json(), "transfer", spec.src_url,
               spec.dest_url, 0.0, 0.0, attempts=1, bytes_done=100, **counts)


SETTINGS = load(None)


def test_a_pass_completes_fails_naming_files_or_waits_for_retries() -> None:
    outcome = DatasetOutcome(bytes_moved=100, duration_s=1.0)
    done = judge_dataset(_job(files_total=3, files_done=3), DatasetFacts(outcome, 1, None),
                         SETTINGS, 10.0)
    assert done.transition is not None and done.transition.state is JobState.COMPLETED
    assert "3 of 3 files done" in done.userlog[-1].text
    failed = judge_dataset(_job(files_total=3, files_done=2, files_failed=1),
                           DatasetFacts(outcome, 1, None, (("x.dat", "500 Permission denied"),),
                                        "permanent"), SETTINGS, 10.0)
    assert failed.transition is not None and failed.transition.state is JobState.FAILED
    assert "1 of 3 files failed: x.dat" in (failed.transition.error or "")
    assert failed.transition.failure_kind == "permanent"
    waiting = judge_dataset(_job(files_total=3, files_done=1), DatasetFacts(outcome, 1, 42.0),
                            SETTINGS, 10.0)
    assert waiting.transition is not None and waiting.transition.state is JobState.IDLE
    assert waiting.retry_at == 42.0 and not waiting.transition.count_failure
    removed = judge_dataset(_job(files_total=3), DatasetFacts(
        dataclasses.replace(outcome, stopped=StopReason.REMOVED), 1, None), SETTINGS, 10.0)
    assert removed.transition is None


def test_the_streams_only_eos_probes_streams_with_cc_and_pp_at_one() -> None:
    from stork.tuning import get
    from stork.tuning.base import DatasetDescription, Limits, ProbeResult

    seen: list[tuple[int, int, int]] = []

    def probe(params: Params, size: int) -> ProbeResult:
        seen.append((params.cc, params.p, params.pp))
        mbps = 100 * params.p / (1 + (params.p / 8) ** 2) ** 0.5  # flattens past 8
        return ProbeResult(params, mbps, size, 1.0, 4)

    decision = get("eos").optimize([], DatasetDescription.of(64 << 20, 20, rtt_s=0.04,
                                                             bandwidth_bps=2e8),
                                   Limits(max_p=32), probe)
    assert {(cc, pp) for cc, _, pp in seen} == {(1, 1)} and len(seen) <= 4
    assert decision.optimizer == "eos" and decision.params.cc == 1
    assert decision.params.p in {p for _, p, _ in seen} and decision.params.p >= 8
    assert len(decision.probes) == len(seen)
