"""Optimization: the phase between a transfer's selection and its launch.

A transfer with ``optimization = "YES"``, no ``-p`` of its own, and a module that takes a
stream count is, once the task matrix selects it, handed to the EOS (the embedded one, or
the eos_server its `opt_server` names) on a thread of its own. Meanwhile the job stays IDLE
in the store with the wait reason OPTIMIZING (no attempt has started: `stork_q` and
`stork_status` show it as waiting for its optimization, not RUNNING), and it keeps its place
in the transfer matrix: sampling moves data between the same two hosts, so it counts toward
STORK_MAX_NUM_JOBS and the host penalties like the transfer will. Sampling runs themselves
are scheduled by the EOS's own task matrix (EOS_WORKERS, one run per equal task).

When the EOS answers, its choice is recorded on the job (`optimized_streams`,
`predicted_throughput_mbps`, `eos_*`, `optimization_source` and `optimization_reason`) and the
attempt is launched with it. An EOS that fails does not stop the transfer: it runs with the
default stream count and the job's `eos_error` says why. A job removed meanwhile gets nothing
recorded and never launches.

The request says it is a transfer's (its source's size bounds the sampling time) and that its
GridFTP samples may be written into the destination. When they were (`samples_in_destination`,
`sample_bytes_in_destination`), the attempt sends only the ranges left (`transfer_ranges`) and
the destination is checked whole at its end; when they were not, `scratch_reason` says why.
Nothing of this survives a restart of the daemon: an attempt planned again after one sends
the whole file (or samples again), so a destination with holes is never taken as done, and
the destination of a job removed after its samples wrote into it is removed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stork.eos.client import Estimator
from stork.eos.types import EstimateRequest, EstimateResult
from stork.job import JobSpec
from stork.server.attempt_ends import remove_partial
from stork.server.attempt_plan import Plan
from stork.store.base import JobStore
from stork.transfer import destination
from stork.transfer.base import remaining_ranges

log = logging.getLogger(__name__)

OPTIMIZING = "optimizing: EOS sampling"  # the wait reason (fits stork_q's progress column)

EstimatorFor = Callable[[JobSpec], Estimator]
# (the plan to launch, whether the job was removed meanwhile)
OnOptimized = Callable[[Plan, bool], None]


def job_attributes(result: EstimateResult) -> dict[str, Any]:
    """What an optimized transfer's result attributes record of the EOS's answer."""
    attributes: dict[str, Any] = {
        "optimized_streams": result.optimal_streams,
        "predicted_throughput_mbps": result.estimated_throughput_mbps,
        "eos_model": result.model,
        "eos_from_history": result.from_history,
        "eos_shared_run": result.shared_run,
        "eos_sampling_time_s": result.sampling_time_s}
    if result.samples_in_destination is not None:
        attributes.update(samples_in_destination=result.samples_in_destination,
                          scratch_reason=result.scratch_reason)
    if result.optimization_source:  # (each attempt's answer replaces the last one's)
        rest = rest_of(result)
        attributes.update(
            optimization_source=result.optimization_source,
            optimization_reason=result.optimization_reason,
            sample_bytes_in_destination=(sum(n for _, n in result.destination_ranges)
                                         if rest else 0),
            transfer_ranges=[list(r) for r in rest])  # [] : the whole file
    return attributes


def rest_of(result: EstimateResult) -> tuple[tuple[int, int], ...]:
    """The byte ranges the transfer still has to send after the samples the EOS wrote into
    its destination (empty: the whole file, as usual)."""
    if not result.destination_ranges or not result.size_bytes:
        return ()
    return remaining_ranges(result.size_bytes, result.destination_ranges)


def request_for(plan: Plan) -> EstimateRequest:
    """The EOS request for a planned attempt (its URLs and options, its owner's rights)."""
    spec = plan.job.spec
    return EstimateRequest(plan.src_url, plan.dest_url, spec.arguments, spec.size_bytes,
                           spec.use_history, spec.x509proxy, plan.run_as,
                           queued_since=plan.job.submitted_at, transfer=True,
                           in_place=plan.module.writes_ranges, tokens=spec.bearer_tokens)


class _NotSampled(Exception):
    """A destination no sample may be written into or beside (a device, a FIFO)."""

    def __init__(self, sink: destination.Destination) -> None:
        streams = "one stream, in order" if sink.ordered else "the default stream count"
        super().__init__(f"not sampled: the destination is a {sink.kind.value}, which takes "
                         f"no samples; {streams}")


class Optimizations:
    def __init__(self, store: JobStore, estimator_for: EstimatorFor | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.estimator_for = estimator_for
        self.clock = clock
        self._lock = threading.Lock()
        self._active: dict[int, str] = {}  # job id -> its phase, as shown to users
        self._cancelled: set[int] = set()

    def wants(self, plan: Plan) -> bool:
        """optimization = "YES" and no explicit -p, on a module that takes a stream count;
        not a dataset, whose chunks the optimizers of `stork.server.tuning` decide."""
        spec = plan.job.spec
        return (spec.optimization and not spec.is_dataset and spec.options.streams is None
                and plan.module.takes_streams and self.estimator_for is not None)

    def begin(self, plan: Plan, on_done: OnOptimized) -> None:
        """Ask the EOS on a thread of its own; `on_done(plan, removed)` runs on it after."""
        job_id = plan.job.id
        with self._lock:
            self._active[job_id] = OPTIMIZING
            self._cancelled.discard(job_id)
        threading.Thread(target=self._run, args=(plan, on_done), name=f"optimize-{job_id}",
                         daemon=True).start()

    def phase(self, job_id: int) -> str | None:
        """The job's phase while it is being optimized (no lock: one dictionary look-up)."""
        return self._active.get(job_id)

    def cancel(self, job_id: int) -> bool:
        """The job was removed: record nothing and launch nothing when the EOS answers.
        False when the job is not being optimized."""
        with self._lock:
            if job_id not in self._active:
                return False
            self._cancelled.add(job_id)
            return True

    def __len__(self) -> int:
        return len(self._active)

    def _run(self, plan: Plan, on_done: OnOptimized) -> None:
        job_id = plan.job.id
        chosen = plan
        wrote = False  # the EOS's samples wrote into the destination
        sink = destination.look(plan.dest_url, plan.run_as)
        try:
            assert self.estimator_for is not None
            if sink.is_sink:
                raise _NotSampled(sink)
            result = self.estimator_for(plan.job.spec).estimate(request_for(plan))
        except _NotSampled as exc:
            attributes: dict[str, Any] = {"optimization_source": "destination",
                                          "optimization_reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - any EOS failure falls back to the default
            log.warning("job %d: the EOS could not choose a stream count (%s); the transfer "
                        "runs with the default", job_id, exc)
            attributes = {"eos_error": str(exc)}
        else:
            chosen = plan.with_streams(result.optimal_streams)
            rest = rest_of(result)
            wrote = bool(result.destination_ranges)
            if rest and plan.module.writes_ranges:
                done = sum(n for _, n in result.destination_ranges)
                chosen = chosen.with_rest(rest, done)
            attributes = job_attributes(result)
        with self._lock:
            removed = job_id in self._cancelled
        try:
            if not removed:
                self.store.update_result(job_id, attributes)
            elif wrote:  # as for a removed running attempt: what the samples wrote goes
                remove_partial(plan.job, destination.written_by_samples(plan.dest_url))
        except Exception:
            log.exception("job %d: cannot record the EOS's answer", job_id)
        finally:
            with self._lock:
                self._active.pop(job_id, None)
                self._cancelled.discard(job_id)
            on_done(chosen, removed)
