"""The EOS service: answers estimation requests, shares equal requests in flight, remembers.

A request names a source and destination URL and the transfer options. Equal requests (same
host pair and options, either direction when EOS_SYMMETRIC_PAIRS) that arrive while one is
being sampled wait for that one sampling run instead of starting their own. A transfer job
that was already queued when an equal run ended takes that run's answer too (within
EOS_SHARE_WINDOW): the paper's Algorithm 6, where a finished EOS task's result goes to every
equal task in its row, applied to the optimizations of jobs waiting in the queue.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from stork.config import LiveSettings, Settings
from stork.eos.samplers import Sampler, make_sampler
from stork.eos.sampling import Decision, Sample, decide, doubling, guided
from stork.eos.types import EstimateRequest, EstimateResult, SampleDetail
from stork.sched import Task, TaskMatrix
from stork.store.base import HistoryEntry, JobStore
from stork.transfer import verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Optimization:
    samples: tuple[Sample, ...]
    decision: Decision
    sampling_time_s: float
    sampler: str


SamplerFactory = Callable[[EstimateRequest], Sampler]

__all__ = ["EosService", "EstimateRequest", "EstimateResult", "Optimization", "SamplerFactory"]


class EosService:
    def __init__(self, settings: Settings | LiveSettings, store: JobStore | None,
                 sampler_factory: SamplerFactory | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._live = LiveSettings.of(settings)
        settings = self._live.current
        self.store = store
        self.clock = clock
        self._factory = sampler_factory or self._default_sampler
        self._pool = ThreadPoolExecutor(settings.eos_workers, thread_name_prefix="eos")
        self._lock = threading.Lock()
        # optimization tasks wait in the task matrix: equal ones share a run, approximate
        # ones (same pair, other options) run one after another, hosts stay within limits
        self.matrix = TaskMatrix(settings.eos_alpha, settings.eos_beta)
        self._waiting: dict[Task, tuple[EstimateRequest, Future[tuple[Optimization, bool]]]] = {}
        self._ids = itertools.count(1)
        # equal-task key -> (when its last sampling run ended, what it found)
        self._last_run: dict[tuple[object, ...], tuple[float, Optimization]] = {}
        self.sampling_runs = 0  # optimizations actually sampled (not shared, not from history)

    @property
    def settings(self) -> Settings:
        return self._live.current

    def _default_sampler(self, request: EstimateRequest) -> Sampler:
        s = self.settings
        options = request.options
        return make_sampler(s.eos_sampler, request.src_url, request.dest_url,
                            sample_bytes=options.sample_size_bytes or s.eos_sample_size,
                            seconds=s.eos_sample_time_s, iperf_port=s.eos_iperf_port,
                            globus_url_copy=s.globus_url_copy,
                            tcp_buffer_bytes=options.tcp_buffer_bytes,
                            x509proxy=request.x509proxy, run_as=request.run_as)

    # -- the request path -----------------------------------------------------------------

    def estimate(self, request: EstimateRequest) -> EstimateResult:
        """Answer one request (blocking): history hit, shared run, or a new sampling run."""
        if request.use_history:
            hit = self._history_hit(request)
            if hit is not None:
                return self._answer(request, hit, from_history=True, shared=False)
        task = self.task_for(request)
        future: Future[tuple[Optimization, bool]] = Future()
        with self._lock:
            earlier = self._run_while_queued(request, task)
            if earlier is not None:
                future.set_result((earlier, True))
            else:
                self.matrix.add(task)
                self._waiting[task] = (request, future)
                self._pump()
        optimization, shared = future.result()
        return self._answer(request, optimization, from_history=False, shared=shared)

    def task_for(self, request: EstimateRequest) -> Task:
        """The request as a matrix task <source host, destination host, options>. Without
        EOS_SYMMETRIC_PAIRS the direction is part of the options, so A -> B and B -> A are
        approximate (run one after another) rather than equal."""
        src, dest = request.hosts()
        args = request.triple_arguments
        if not self.settings.eos_symmetric_pairs:
            args = f"{args} [{src} -> {dest}]"
        return Task(src, dest, args, f"eos-{next(self._ids)}")

    @staticmethod
    def _equal_key(task: Task) -> tuple[object, ...]:
        return (task.pair, task.args)

    def _run_while_queued(self, request: EstimateRequest, task: Task) -> Optimization | None:
        """The last equal run, if it ended after the request's job was queued and less than
        EOS_SHARE_WINDOW ago (call with the lock held)."""
        last = self._last_run.get(self._equal_key(task))
        if last is None or request.queued_since is None:
            return None
        ended, optimization = last
        fresh = self.clock() - ended < self.settings.eos_share_window_s
        return optimization if fresh and request.queued_since <= ended else None

    def _pump(self) -> None:
        """Start the tasks the matrix selects (call with the lock held)."""
        s = self.settings
        for task in self.matrix.select(s.eos_workers, s.eos_penalty_limit, int(s.eos_selection)):
            self.sampling_runs += 1
            self._pool.submit(self._run, task)

    def _run(self, task: Task) -> None:
        request = self._waiting[task][0]
        try:
            outcome: Optimization | BaseException = self._optimize(request)
        except Exception as exc:  # noqa: BLE001 - every waiter gets the sampler's error
            outcome = exc
        with self._lock:
            if not isinstance(outcome, BaseException):
                self._last_run[self._equal_key(task)] = (self.clock(), outcome)
            served = self.matrix.complete(task)
            for member in [task, *served]:
                _, future = self._waiting.pop(member)
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result((outcome, member is not task))
            self._pump()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.matrix.snapshot()

    def _optimize(self, request: EstimateRequest) -> Optimization:
        s = self.settings
        sampler = self._factory(request)
        start = time.monotonic()
        if s.eos_sampling == "doubling":
            samples = doubling(sampler.measure, s.eos_max_streams, s.eos_slope_threshold)
        else:
            samples = guided(sampler.measure, s.eos_max_streams, s.eos_tolerance,
                             s.eos_max_samples)
        decision = decide(samples, s.eos_max_streams, s.eos_tolerance)
        elapsed = time.monotonic() - start
        optimization = Optimization(tuple(samples), decision, elapsed, sampler.name)
        log.info("EOS %s -> %s: %d streams, %.1f Mbit/s (%s) from %d samples in %.1f s",
                 request.src_url, request.dest_url, decision.streams, decision.throughput_mbps,
                 decision.model, len(samples), elapsed)
        if self.store is not None:
            src, dest = request.hosts()
            self.store.add_history(HistoryEntry(
                time=self.clock(), src_host=src, dest_host=dest,
                arguments=request.triple_arguments, kind="optimization",
                streams=decision.streams, throughput_mbps=decision.throughput_mbps,
                duration_s=elapsed, model=decision.model,
                samples=[[x.streams, x.mbps, x.setup_s, x.startup_s, x.startup_bytes,
                          x.finish_s] for x in samples]))
        return optimization

    def _history_hit(self, request: EstimateRequest) -> Optimization | None:
        if self.store is None:
            return None
        src, dest = request.hosts()
        rows = self.store.history(src, dest, symmetric=self.settings.eos_symmetric_pairs,
                                  arguments=request.triple_arguments, kind="optimization",
                                  since=self.clock() - self.settings.eos_history_ttl_s, limit=1)
        if not rows:
            return None
        row = rows[0]
        samples = tuple(Sample(int(x[0]), float(x[1]),
                               setup_s=float(x[2]) if len(x) > 2 else 0.0,
                               startup_s=float(x[3]) if len(x) > 3 else 0.0,
                               startup_bytes=int(x[4]) if len(x) > 4 else 0,
                               finish_s=float(x[5]) if len(x) > 5 else 0.0)
                        for x in row.samples)
        decision = Decision(row.streams, row.throughput_mbps, row.model, "from history", {})
        return Optimization(samples, decision, 0.0, "history")

    def _answer(self, request: EstimateRequest, opt: Optimization, from_history: bool,
                shared: bool) -> EstimateResult:
        d = opt.decision
        size = request.size_bytes
        if size is None:
            try:
                size = verify.size_of(request.src_url)
            except verify.VerifyError:
                size = None
        result = EstimateResult(
            optimal_streams=d.streams,
            estimated_throughput_mbps=round(d.throughput_mbps, 3),
            model=d.model,
            reason=d.reason,
            model_params=d.params,
            samples=tuple((s.streams, round(s.mbps, 3)) for s in opt.samples),
            sample_details=tuple(SampleDetail(s.streams, round(s.mbps, 3), round(s.duration_s, 3),
                                              s.bytes_moved, str(s.raw.get("method", "")))
                                 for s in opt.samples),
            sampling_time_s=round(opt.sampling_time_s, 3),
            sampler=opt.sampler,
            from_history=from_history,
            shared_run=shared)
        if not size:
            return result
        # set-up (control and data channels) and TCP start-up as in the sample nearest in
        # stream count, then the steady rate: what a transfer of this size will see
        nearest = min(opt.samples, key=lambda x: abs(math.log(x.streams / d.streams)))
        seconds = nearest.seconds_for(size, d.throughput_mbps)
        return dataclasses.replace(
            result, size_bytes=size, setup_time_s=round(nearest.setup_s, 3),
            startup_time_s=round(nearest.startup_s, 3),
            steady_throughput_mbps=result.estimated_throughput_mbps,
            estimated_time_s=round(seconds, 3),
            estimated_throughput_mbps=round(size * 8 / 1e6 / seconds, 3))

    def record_transfer(self, src_url: str, dest_url: str, arguments: str, streams: int,
                        bytes_moved: int, duration_s: float, job_id: int) -> None:
        """Remember what a finished transfer really achieved."""
        if self.store is None or duration_s <= 0:
            return
        request = EstimateRequest(src_url, dest_url, arguments)
        src, dest = request.hosts()
        self.store.add_history(HistoryEntry(
            time=self.clock(), src_host=src, dest_host=dest,
            arguments=request.triple_arguments, kind="transfer", streams=streams,
            throughput_mbps=bytes_moved * 8 / 1e6 / duration_s, bytes_moved=bytes_moved,
            duration_s=duration_s, job_id=job_id))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
