"""Estimation jobs: answered by the EOS at once, never through the transfer queue.

Each estimation job is a queue row (so `stork_status` shows it and its result), moved
IDLE -> RUNNING -> COMPLETED/FAILED by this runner on its own threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from stork.eos.client import Estimator
from stork.eos.types import EstimateRequest
from stork.identity import RunAs
from stork.job import Job, JobSpec, JobState
from stork.store.base import JobStore, Transition
from stork.transfer.base import FailureKind

log = logging.getLogger(__name__)


class EstimationRunner:
    def __init__(self, store: JobStore, estimator_for: Callable[[JobSpec], Estimator],
                 workers: int, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.estimator_for = estimator_for
        self.clock = clock
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="estimation")

    def start(self, job_id: int) -> None:
        self._pool.submit(self._run, job_id)

    def _run(self, job_id: int) -> None:
        started = self.store.start_attempt(job_id, self.clock(), "", "", "eos")
        if started is None:
            return
        try:
            self._answer(started)
        except Exception:
            log.exception("estimation job %d", job_id)

    def _answer(self, job: Job) -> None:
        spec = job.spec
        try:
            request = EstimateRequest(spec.src_url, spec.dest_url, spec.arguments,
                                      spec.size_bytes, spec.use_history, spec.x509proxy,
                                      RunAs.for_owner(job.owner_uid),
                                      tokens=spec.bearer_tokens)
            result = self.estimator_for(spec).estimate(request)
        except Exception as exc:  # noqa: BLE001 - the sampler's or remote EOS's message fails the job
            self.store.finish_attempt(job.id, job.attempts, self.clock(), Transition(
                JobState.FAILED, "failed", "failed", exit_code=1, error=str(exc),
                failure_kind=FailureKind.PERMANENT.value))
            return
        self.store.finish_attempt(job.id, job.attempts, self.clock(), Transition(
            JobState.COMPLETED, "completed", "completed", exit_code=0, result=result.to_json(),
            detail={"optimal_streams": result.optimal_streams, "model": result.model}))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
