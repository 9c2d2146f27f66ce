"""Planning an attempt and what the optimization phase records, without processes."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from stork import config
from stork.eos.types import EstimateResult
from stork.errors import NoTransferModule
from stork.job import DapType, Job, JobSpec, JobState
from stork.server.attempt_plan import NotLaunchable, Plan, plan_attempt
from stork.server.optimization import OPTIMIZING, Optimizations, job_attributes, request_for
from stork.transfer.registry import Registry

SRC = "gsiftp://a.example:2811/in.dat"
DEST = "gsiftp://b.example:2811/out.dat"


def job(src: str = SRC, dest: str = DEST, attempts: int = 0, **spec: Any) -> Job:
    s = JobSpec(DapType.TRANSFER, src, dest, **spec)
    return Job(3, os.geteuid(), "me", JobState.IDLE, s.to_json(), "transfer", src, dest, 100.0,
               100.0, attempts=attempts)


SETTINGS = dataclasses.replace(config.load(None, env={"HOME": "/nonexistent"}), default_streams=2)
REGISTRY = Registry.default()


def test_plan_uses_the_attempts_urls_module_and_streams() -> None:
    plan = plan_attempt(job(arguments="-b 1M"), REGISTRY, SETTINGS)
    assert plan.attempt_no == 1 and (plan.src_url, plan.dest_url) == (SRC, DEST)
    assert plan.module.takes_streams and plan.streams == 2  # STORK_DEFAULT_STREAMS
    assert plan.request.options.tcp_buffer_bytes == 1 << 20 and not plan.optimized
    second = plan_attempt(job(attempts=1, alt_protocols=(("ftp", "ftp"),)), REGISTRY, SETTINGS)
    assert second.attempt_no == 2 and second.src_url.startswith("ftp://")
    assert plan_attempt(job(arguments="-p 5"), REGISTRY, SETTINGS).streams == 5
    files = plan_attempt(job("file:///a", "file:///b"), REGISTRY, SETTINGS)
    assert files.streams is None  # a module without -p


def test_with_streams_is_the_eos_choice() -> None:
    plan = plan_attempt(job(arguments="-bs 4K"), REGISTRY, SETTINGS).with_streams(7)
    assert plan.streams == 7 and plan.optimized
    assert plan.request.options.block_size_bytes == 4096
    assert "-p" in (argv := plan.module.command(plan.request)) and argv[argv.index("-p") + 1] == "7"


def test_no_module_is_not_launchable() -> None:
    with pytest.raises(NotLaunchable) as info:
        plan_attempt(job("http://a/x", "ftp://b/y"), REGISTRY, SETTINGS)
    assert isinstance(info.value.failure, NoTransferModule) and info.value.exit_code == 127
    assert info.value.dest_url == "ftp://b/y"


def test_what_optimization_asks_and_records() -> None:
    plan = plan_attempt(job(arguments="-b 1M", use_history=True), REGISTRY, SETTINGS)
    request = request_for(plan)
    assert (request.src_url, request.dest_url, request.arguments) == (SRC, DEST, "-b 1M")
    assert request.use_history and request.queued_since == 100.0 and request.size_bytes is None
    result = EstimateResult(6, 512.0, "dynamic_order", sampling_time_s=3.5, shared_run=True)
    assert job_attributes(result) == {
        "optimized_streams": 6, "predicted_throughput_mbps": 512.0,
        "eos_model": "dynamic_order", "eos_from_history": False, "eos_shared_run": True,
        "eos_sampling_time_s": 3.5}


def test_which_jobs_are_optimized() -> None:
    optimizations = Optimizations(None, lambda spec: None)  # type: ignore[arg-type,return-value]  # wants() uses neither
    wants = [optimizations.wants(plan_attempt(j, REGISTRY, SETTINGS)) for j in (
        job(optimization=True), job(optimization=True, arguments="-p 3"),
        job("file:///a", "file:///b", optimization=True), job())]
    assert wants == [True, False, False, False]
    # a dataset's chunks are tuned by its optimizer; the EOS of one file would be asked about
    # the directory, fail, and leave an eos_error on the job
    datasets = [job("gsiftp://a.example:2811/in/", "gsiftp://b.example:2811/out/", **spec)
                for spec in ({"optimization": True}, {"optimization": True, "optimizer": "eos"},
                             {"optimization": True, "optimizer": "harp"})]
    assert [optimizations.wants(plan_attempt(j, REGISTRY, SETTINGS)) for j in datasets] \
        == [False, False, False]
    no_eos = Optimizations(store=None, estimator_for=None)  # type: ignore[arg-type]  # wants() never reads the store
    assert not no_eos.wants(plan_attempt(job(optimization=True), REGISTRY, SETTINGS))
    assert optimizations.phase(3) is None and OPTIMIZING == "optimizing: EOS sampling"
    assert len(OPTIMIZING) <= 26  # stork_q's progress column



class FakeStore:
    def __init__(self) -> None:
        self.results: list[tuple[int, dict]] = []

    def update_result(self, job_id: int, values: dict) -> None:
        self.results.append((job_id, values))


class GatedEos:
    """An EOS that answers when told to (or fails)."""

    def __init__(self, streams: int | None) -> None:
        import threading

        self.streams = streams
        self.gate = threading.Event()

    def estimate(self, request: object) -> EstimateResult:
        self.gate.wait(10)
        if self.streams is None:
            raise RuntimeError("sample with 1 streams failed: connection refused")
        return EstimateResult(self.streams, 100.0, "second_order")


def run_phase(eos: GatedEos, cancel: bool = False) -> tuple[Plan, bool, FakeStore, str | None]:
    import queue

    store = FakeStore()
    optimizations = Optimizations(store, lambda spec: eos)  # type: ignore[arg-type]  # duck-typed fakes
    done: queue.Queue[tuple[Plan, bool]] = queue.Queue()
    plan = plan_attempt(job(optimization=True), REGISTRY, SETTINGS)
    optimizations.begin(plan, lambda p, removed: done.put((p, removed)))
    during = optimizations.phase(3)
    if cancel:
        assert optimizations.cancel(3)
    eos.gate.set()
    chosen, removed = done.get(timeout=10)
    assert optimizations.phase(3) is None and len(optimizations) == 0
    assert not optimizations.cancel(3)  # over
    return chosen, removed, store, during


def test_the_phase_launches_with_the_eos_choice() -> None:
    chosen, removed, store, during = run_phase(GatedEos(9))
    assert during == OPTIMIZING and not removed
    assert chosen.streams == 9 and chosen.optimized
    assert store.results == [(3, job_attributes(EstimateResult(9, 100.0, "second_order")))]


def test_a_removed_job_records_nothing() -> None:
    _, removed, store, _ = run_phase(GatedEos(9), cancel=True)
    assert removed and store.results == []


def test_an_eos_failure_falls_back_to_the_default_streams() -> None:
    chosen, removed, store, _ = run_phase(GatedEos(None))
    assert not removed
    assert chosen.streams == 2 and not chosen.optimized
    assert store.results == [(3, {"eos_error": "sample with 1 streams failed: connection refused"})]
