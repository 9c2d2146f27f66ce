"""The EOS service: answers estimation requests, shares equal requests in flight, remembers.

A request names a source and destination URL and the transfer options. Equal requests (same
host pair and options, either direction when EOS_SYMMETRIC_PAIRS) that arrive while one is
being sampled wait for that one sampling run instead of starting their own. A transfer job
that was already queued when an equal run ended takes that run's answer too (within
EOS_SHARE_WINDOW): the paper's Algorithm 6, where a finished EOS task's result goes to every
equal task in its row, applied to the optimizations of jobs waiting in the queue.

The sampling budget: when the size of what a transfer job moves is known (its source's,
else its `size`), sampling may take at most EOS_SAMPLING_BUDGET of the transfer's predicted
time. Before any sample that time is the size
at the best rate the history holds for the host pair (a finished transfer's achieved rate in
the transfer log, the one table of finished transfers, or an optimization's measured
optimum, within EOS_HISTORY_TTL), else at STORK_LINK_MBPS, the
path's nominal bandwidth: the fastest the transfer could go. Once samples have run it is the
size at the best rate they measured (what the transfer will at least reach): a slow path
allows more sampling, a fast one less. What a transfer's samples completed in its
destination (in place) is progress, not cost: sampling has spent its time less those bytes
at the best rate measured. One sample is expected to take EOS_SAMPLE_TIME, or for GridFTP
the sample size at that rate if sooner; later ones as long as the longest so far. Sampling
starts only when two samples are expected to fit (one alone compares nothing), and a budgeted
run samples from EOS_DEFAULT_STREAMS, the count it answers without samples, outwards (then
twice as many, then onwards in the direction that gains: `sampling.guided` with `first`),
so the samples a tight budget allows are short ones at counts that move the data fast. When
two samples do not fit, the answer comes from the history (the pair's last optimization,
else the stream count of its fastest transfer) or is EOS_DEFAULT_STREAMS, without sampling;
otherwise sampling stops when the next sample would pass the budget, and the answer is
decided from the samples taken. `optimization_source`
says which: sampled, budget (stopped early), history or default.

An estimation job is asked for measured figures, so no budget turns it into a guess: whatever
its `size`, it samples (at least once), and no sample starts that would pass
EOS_ESTIMATION_MAX_S (`EstimationLimit`); when every sample moved nothing it fails saying so,
never answering with a configured rate.

A transfer job's GridFTP samples are written into its destination as byte ranges of the
transfer when both ends are file:// or ftp:// (`samplers.InPlaceSampler`); the answer lists
the ranges they completed, and the daemon then sends only the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from stork.config import LiveSettings, Settings
from stork.eos.samplers import InPlaceSampler, Sampler, in_place_refusal, make_sampler
from stork.eos.types import EstimateRequest, EstimateResult, SampleDetail, Source
from stork.errors import EosError
from stork.sched import Task, TaskMatrix
from stork.store.base import HistoryEntry, JobStore
from stork.transfer import verify
from stork.transfer.base import Range
from stork.transfer.remote import RemoteEnds
from stork.translog import COMPLETED, TransferRecord
from stork.tuning.probing import Probing
from stork.tuning.sampling import (
    HISTORY_RUNS,
    Decision,
    History,
    Measure,
    Sample,
    decide,
)
from stork.tuning.strategies import STRATEGIES, SamplingLimits
from stork.urls import parse_url

log = logging.getLogger(__name__)

TRANSFER_ROWS = 200  # the newest transfer log rows of a pair (each way) the EOS reads


@dataclass(frozen=True)
class Optimization:
    samples: tuple[Sample, ...]
    decision: Decision
    sampling_time_s: float
    sampler: str
    source: str = Source.SAMPLED
    note: str = ""  # why sampling ended early, or how the answer was found without it
    # the run's own request only (an equal request sharing the run moved nothing of its own)
    samples_in_destination: bool | None = None
    scratch_reason: str = ""
    destination_ranges: tuple[Range, ...] = ()


@dataclass(frozen=True)
class Budget:
    """The sampling time a transfer of known size may spend (EOS_SAMPLING_BUDGET)."""

    name = "the budget"

    size_bytes: int
    rate_mbps: float  # predicted before any sample
    basis: str  # where the rate comes from
    fraction: float  # EOS_SAMPLING_BUDGET
    first_sample_s: float  # what one sample is expected to take

    @property
    def predicted_s(self) -> float:
        return self.size_bytes * 8 / 1e6 / self.rate_mbps

    @property
    def seconds(self) -> float:
        return self.fraction * self.predicted_s

    def allows_two(self) -> bool:
        """Whether two samples are expected to fit: one sample alone compares nothing (and
        a budgeted run's first sample is the count the EOS answers without any), so a
        budget that allows only one is not worth starting."""
        return 2 * self.first_sample_s <= self.seconds

    def measured(self, samples: Sequence[Sample]) -> Budget:
        """The budget once samples have measured the path: the transfer's predicted time is
        the size at the best rate measured (the rate it will at least reach), not the guess
        made before any sample (the link's nominal rate or the history's best)."""
        best = max((x.mbps for x in samples), default=0.0)
        if best <= 0:
            return self
        return dataclasses.replace(self, rate_mbps=best,
                                   basis=f"the best of {len(samples)} sample(s) measured")

    def spent(self, elapsed_s: float, kept_bytes: int, samples: Sequence[Sample]) -> float:
        """What `elapsed_s` of sampling has cost the transfer: the time, less what the bytes
        the samples left in the destination would take at the best rate measured (the
        transfer does not send them again, so that share of the samples was progress)."""
        best = max((x.mbps for x in samples), default=0.0)
        credit = kept_bytes * 8 / 1e6 / best if best > 0 else 0.0
        return max(elapsed_s - credit, 0.0)

    def describe(self) -> str:
        return (f"predicted transfer {self.predicted_s:.3g} s ({self.size_bytes} bytes at "
                f"{self.rate_mbps:.4g} Mbit/s, {self.basis}), of which EOS_SAMPLING_BUDGET "
                f"{self.fraction:g} allows {self.seconds:.3g} s of sampling")


@dataclass(frozen=True)
class EstimationLimit:
    """The sampling time an estimation may spend (EOS_ESTIMATION_MAX_S): an estimation is
    asked for measured figures, so it always samples (its first sample runs whatever the
    limit), and no transfer's predicted time bounds it."""

    seconds: float
    first_sample_s: float
    name = "EOS_ESTIMATION_MAX_S"

    def allows_two(self) -> bool:
        return True

    def measured(self, samples: Sequence[Sample]) -> EstimationLimit:
        return self

    def spent(self, elapsed_s: float, kept_bytes: int, samples: Sequence[Sample]) -> float:
        return elapsed_s

    def describe(self) -> str:
        return f"an estimation samples for at most {self.seconds:g} s"


Limit = Budget | EstimationLimit


def _source_size(request: EstimateRequest) -> int | None:
    """The source's size as the job's owner sees it (None: it cannot be had)."""
    try:
        return verify.size_of(request.src_url, _ends(request))
    except verify.VerifyError:
        return None


class BudgetSpent(EosError):
    """The next sample would pass the sampling budget (caught inside the service)."""


SamplerFactory = Callable[[EstimateRequest], Sampler]

__all__ = ["Budget", "EosService", "EstimateRequest", "EstimateResult", "Optimization",
           "SamplerFactory"]


class EosService:
    def __init__(self, settings: Settings | LiveSettings, store: JobStore | None,
                 sampler_factory: SamplerFactory | None = None,
                 clock: Callable[[], float] = time.time,
                 source_size: Callable[[EstimateRequest], int | None] | None = None) -> None:
        self._live = LiveSettings.of(settings)
        settings = self._live.current
        self.store = store
        self.clock = clock
        self._factory = sampler_factory or self._default_sampler
        self._source_size = source_size or _source_size
        self._pool = ThreadPoolExecutor(settings.eos_workers, thread_name_prefix="eos")
        self._lock = threading.Lock()
        # optimization tasks wait in the task matrix: equal ones share a run, approximate
        # ones (same pair, other options) run one after another, hosts stay within limits
        self.matrix = TaskMatrix(settings.eos_alpha, settings.eos_beta)
        self._waiting: dict[Task, tuple[EstimateRequest, Limit | None,
                                        Future[tuple[Optimization, bool]]]] = {}
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
        in_place = request.size_bytes if self._in_place_refusal(request) is None else None
        return make_sampler(s.eos_sampler, request.src_url, request.dest_url,
                            sample_bytes=self._sample_bytes(request),
                            seconds=s.eos_sample_time_s, iperf_port=s.eos_iperf_port,
                            globus_url_copy=s.globus_url_copy,
                            tcp_buffer_bytes=options.tcp_buffer_bytes,
                            x509proxy=request.x509proxy, run_as=request.run_as,
                            in_place_size=in_place, tokens=request.tokens)

    def _sample_bytes(self, request: EstimateRequest) -> int:
        return request.options.sample_size_bytes or self.settings.eos_sample_size

    def _in_place_refusal(self, request: EstimateRequest) -> str | None:
        """Why the request's samples cannot go into its destination (None: they can)."""
        if not request.in_place:
            return "the request is not a transfer's"
        if self.settings.eos_sampler != "gridftp":
            return f"EOS_SAMPLER is {self.settings.eos_sampler}, which moves no file data"
        if not request.size_bytes:
            return "the source's size is unknown"
        return in_place_refusal(request.src_url, request.dest_url)

    # -- the request path -----------------------------------------------------------------

    def estimate(self, request: EstimateRequest) -> EstimateResult:
        """Answer one request (blocking): history hit, an answer without sampling when not
        even one sample fits the budget, shared run, or a new sampling run."""
        request = self._sized(request)
        if request.use_history:
            hit = self._history_hit(request)
            if hit is not None:
                hit = dataclasses.replace(hit, source=Source.HISTORY,
                                          note="use_history: the pair's last optimization")
                return self._answer(request, hit, from_history=True, shared=False)
        budget = self._budget(request)
        if isinstance(budget, Budget) and not budget.allows_two():
            return self._unsampled(request, budget)
        task = self.task_for(request)
        future: Future[tuple[Optimization, bool]] = Future()
        with self._lock:
            earlier = self._run_while_queued(request, task)
            if earlier is not None:
                future.set_result((earlier, True))
            else:
                self.matrix.add(task)
                self._waiting[task] = (request, budget, future)
                self._pump()
        optimization, shared = future.result()
        return self._answer(request, optimization, from_history=False, shared=shared)

    # -- the sampling budget ------------------------------------------------------------------

    def _sized(self, request: EstimateRequest) -> EstimateRequest:
        """A transfer's request with its source's own size (else the job's `size`)."""
        if not request.transfer:
            return request
        size = self._source_size(request)
        return dataclasses.replace(request, size_bytes=size) if size else request

    def _budget(self, request: EstimateRequest) -> Limit | None:
        """The sampling budget of a transfer whose size is known (None: unbounded); an
        estimation's own limit (it is asked to measure: a size never turns it into a
        guess)."""
        s = self.settings
        if not request.transfer:
            return EstimationLimit(s.eos_estimation_max_s, s.eos_sample_time_s) \
                if s.eos_estimation_max_s > 0 else None
        if s.eos_sampling_budget <= 0 or not request.size_bytes:
            return None
        rate, basis = self._predicted_rate(request)
        first = s.eos_sample_time_s
        if s.eos_sampler == "gridftp":
            first = min(first, self._sample_bytes(request) * 8 / 1e6 / rate)
        return Budget(request.size_bytes, rate, basis, s.eos_sampling_budget, first)

    def _predicted_rate(self, request: EstimateRequest) -> tuple[float, str]:
        """The rate a transfer is expected to reach before any sample, and whence."""
        s = self.settings
        if self.store is not None:
            src, dest = request.hosts()
            found: list[tuple[float, str, int]] = [
                (r.throughput_mbps, "optimization", r.streams)
                for r in self.store.history(src, dest, symmetric=s.eos_symmetric_pairs,
                                            kind="optimization",
                                            since=self.clock() - s.eos_history_ttl_s, limit=20)
                if r.throughput_mbps > 0]
            found += [(r.throughput_mbps, "transfer", r.streams)
                      for r in self._transfers(request)]
            if found:
                rate, kind, streams = max(found)
                return rate, f"the pair's best {kind} in the history ({streams} streams)"
        return s.link_mbps, "STORK_LINK_MBPS: no history for the pair"

    def _budgeted(self, sampler: Sampler, budget: Limit, taken: list[Sample]) -> Measure:
        """The sampler's `measure`, raising BudgetSpent instead of starting a sample that
        would pass the budget (the first always runs: `estimate` checked that two fit). What
        sampling has spent is its time less the bytes it left in the destination
        (`Budget.spent`); the next sample is expected to take as long as the longest so far,
        and counted whole (it may be a slow count, stopped before its range is complete)."""
        start = time.monotonic()
        durations: list[float] = []

        def bounded(streams: int) -> Sample:
            expected = max(durations, default=budget.first_sample_s)
            elapsed = time.monotonic() - start
            kept = sampler.kept_bytes()
            spent = budget.spent(elapsed, kept, taken)
            now = budget.measured(taken)
            if taken and spent + expected > now.seconds:
                progress = (f", {spent:.3g} s of it a cost ({kept} bytes went into the "
                            f"destination)" if kept else "")
                raise BudgetSpent(f"sampling stopped by {budget.name} after {len(taken)} "
                                  f"sample(s) in {elapsed:.3g} s{progress}: another "
                                  f"(~{expected:.2g} s) would pass it; {now.describe()}")
            began = time.monotonic()
            sample = sampler.measure(streams)
            durations.append(time.monotonic() - began)
            taken.append(sample)
            return sample

        return bounded

    def _unsampled(self, request: EstimateRequest, budget: Budget) -> EstimateResult:
        """The answer when two samples do not fit the budget: the pair's last optimization,
        else the stream count of its fastest transfer, else EOS_DEFAULT_STREAMS."""
        why = (f"not sampled: two samples (~{budget.first_sample_s:.2g} s each) would pass "
               f"the budget; {budget.describe()}")
        hit = self._history_hit(request)
        if hit is not None:
            hit = dataclasses.replace(hit, source=Source.HISTORY,
                                      note=f"{why}; the pair's last optimization")
            return self._answer(request, hit, from_history=True, shared=False)
        streams, model, source = self.settings.eos_default_streams, "none", Source.DEFAULT
        note = f"{why}; EOS_DEFAULT_STREAMS"
        fastest = self._fastest_transfer(request)
        if fastest is not None:
            streams, model, source = fastest.streams, "best_transfer", Source.HISTORY
            whose = "an imported row" if fastest.job_id is None else f"job {fastest.job_id}"
            note = (f"{why}; the pair's fastest transfer in the history ({whose}, "
                    f"{fastest.throughput_mbps:.4g} Mbit/s)")
        decision = Decision(streams, budget.rate_mbps, model, note, {})
        return self._answer(request, Optimization((), decision, 0.0, "none", source, note),
                            from_history=source == Source.HISTORY, shared=False)

    def _fastest_transfer(self, request: EstimateRequest) -> TransferRecord | None:
        """The pair's fastest single-file transfer in the transfer log (`_transfers`)."""
        return max((r for r in self._transfers(request) if r.file_count == 1),
                   key=lambda r: r.throughput_mbps, default=None)

    def _transfers(self, request: EstimateRequest) -> list[TransferRecord]:
        """The pair's finished transfers within EOS_HISTORY_TTL, from the transfer log (the
        one table every optimizer learns from; the daemon writes each finished transfer
        there, and only there): between the two hosts, either way with
        EOS_SYMMETRIC_PAIRS, at the request's TCP buffer (of the options that make a task,
        the one the log records), each having moved data."""
        if self.store is None:
            return []
        s = self.settings
        src, dest = (parse_url(url).host or "localhost"
                     for url in (request.src_url, request.dest_url))
        since = self.clock() - s.eos_history_ttl_s
        rows = self.store.transfers(src, dest, since=since, limit=TRANSFER_ROWS)
        if s.eos_symmetric_pairs and src != dest:
            rows += self.store.transfers(dest, src, since=since, limit=TRANSFER_ROWS)
        buffer = request.options.tcp_buffer_bytes
        return [r for r in rows if r.outcome == COMPLETED and r.throughput_mbps > 0
                and r.buffer_bytes == buffer]

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
        request, budget, _ = self._waiting[task]
        try:
            # nodes sharing a store never sample one pair at once (a no-op for one node)
            with (self.store.pair_lock(*request.hosts()) if self.store is not None
                  else contextlib.nullcontext()):
                outcome: Optimization | BaseException = self._optimize(request, budget)
        except Exception as exc:  # noqa: BLE001 - every waiter gets the sampler's error
            outcome = exc
        with self._lock:
            if not isinstance(outcome, BaseException):
                self._last_run[self._equal_key(task)] = (self.clock(), outcome)
            served = self.matrix.complete(task)
            for member in [task, *served]:
                future = self._waiting.pop(member)[2]
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result((outcome, member is not task))
            self._pump()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self.matrix.snapshot()

    def _optimize(self, request: EstimateRequest, budget: Limit | None = None) -> Optimization:
        s = self.settings
        sampler = self._factory(request)
        start = time.monotonic()
        taken: list[Sample] = []
        measure: Measure = sampler.measure
        if budget is not None:
            measure = self._budgeted(sampler, budget, taken)
        source, note = Source.SAMPLED, ""
        path = self._path_history(request) if request.use_history else None
        probed: Probing | None = None
        strategy = STRATEGIES[s.eos_sampling]
        limits = SamplingLimits(s.eos_max_streams, s.eos_tolerance, s.eos_max_samples,
                        s.eos_slope_threshold, s.dw_depth, s.dw_width)
        try:
            sampled = strategy(measure, limits, path,
                               s.eos_default_streams if isinstance(budget, Budget) else None)
            samples, probed = sampled.samples, sampled.probed
        except BudgetSpent as spent:
            samples, source, note = taken, Source.BUDGET, str(spent)
        except BaseException:
            if isinstance(sampler, InPlaceSampler):
                sampler.abandon()  # the whole file will be sent: leave no holes behind
            raise
        if not request.transfer and not any(x.mbps > 0 for x in samples):
            raise EosError(f"nothing was measured from {request.src_url} to "
                           f"{request.dest_url}: {len(samples)} sample(s) moved no data"
                           + (f" ({note})" if note else ""))
        if probed is not None and source is Source.SAMPLED:  # d-w's own choice, not decide's
            decision = Decision(probed.chosen, probed.mean_mbps, "dw",
                                f"d-w probing (d={s.dw_depth}, w={s.dw_width}): "
                                f"{probed.reason}", {})
        else:
            decision = decide(samples, s.eos_max_streams, s.eos_tolerance, history=path)
        elapsed = time.monotonic() - start
        if not note:
            note = f"{len(samples)} samples in {elapsed:.3g} s" + (
                f" within {budget.name} ({budget.describe()})" if budget is not None else "")
        optimization = Optimization(tuple(samples), decision, elapsed, sampler.name, source,
                                    note, *self._placement(request, sampler))
        log.info("EOS %s -> %s: %d streams, %.1f Mbit/s (%s) from %d samples in %.1f s (%s)",
                 request.src_url, request.dest_url, decision.streams, decision.throughput_mbps,
                 decision.model, len(samples), elapsed, note)
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

    def _path_history(self, request: EstimateRequest) -> History | None:
        """The samples of the pair's earlier optimizations (oldest first, within
        EOS_HISTORY_TTL), for `guided` and `decide` to learn the path's shape from (a job
        with use_history = "YES" whose remembered answer is gone samples with this)."""
        if self.store is None:
            return None
        s = self.settings
        src, dest = request.hosts()
        rows = self.store.history(src, dest, symmetric=s.eos_symmetric_pairs,
                                  kind="optimization", since=self.clock() - s.eos_history_ttl_s,
                                  limit=HISTORY_RUNS)
        runs = [[Sample(int(x[0]), float(x[1])) for x in row.samples if len(x) >= 2]
                for row in reversed(rows)]
        return [run for run in runs if run] or None

    def _placement(self, request: EstimateRequest,
                   sampler: Sampler) -> tuple[bool | None, str, tuple[Range, ...]]:
        """Whether a transfer's samples went into its destination, why not, and the ranges
        they completed there (None: not a transfer's request, nothing to say)."""
        if isinstance(sampler, InPlaceSampler):
            ranges = tuple(sampler.written)
            reason = sampler.scratch_reason
            if not ranges:
                sampler.abandon()  # only ranges in doubt: the whole file will be sent
                reason = reason or ("every sample was stopped after EOS_SAMPLE_TIME before its "
                                    "range was complete, so the whole file is sent")
            return bool(ranges), reason, ranges
        if not request.in_place:
            return None, "", ()
        refusal = self._in_place_refusal(request)
        return False, refusal or f"the {sampler.name} sampler writes no part of the file", ()

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
        return Optimization(samples, decision, 0.0, "history", Source.HISTORY)

    def _answer(self, request: EstimateRequest, opt: Optimization, from_history: bool,
                shared: bool) -> EstimateResult:
        d = opt.decision
        size = request.size_bytes
        if size is None:
            try:
                size = verify.size_of(request.src_url, _ends(request))
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
            shared_run=shared,
            optimization_source=opt.source,
            optimization_reason=(f"an equal transfer's sampling run: {opt.note}" if shared
                                 else opt.note))
        if not shared and not from_history and opt.samples_in_destination is not None:
            result = dataclasses.replace(result, samples_in_destination=opt.samples_in_destination,
                                         scratch_reason=opt.scratch_reason,
                                         destination_ranges=opt.destination_ranges)
        if not size:
            return result
        if not opt.samples:  # answered without samples: the size at the predicted rate
            seconds = size * 8 / 1e6 / max(d.throughput_mbps, 1e-9)
            return dataclasses.replace(result, size_bytes=size, estimated_time_s=round(seconds, 3),
                                       steady_throughput_mbps=result.estimated_throughput_mbps)
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

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _ends(request: EstimateRequest) -> RemoteEnds:
    """The ends as the request's owner sees them, with the job's proxy and token files."""
    return RemoteEnds(x509proxy=request.x509proxy, run_as=request.run_as,
                      tokens=request.tokens, src_url=request.src_url,
                      dest_url=request.dest_url)
