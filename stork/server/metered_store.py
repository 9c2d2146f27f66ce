"""A JobStore that forwards every call to the real one, timed, and tells `Metrics` what the
calls mean: an attempt started (how long the job waited), an attempt or a dataset's file
ended (and its failure kind), bytes and files moved per host pair (the transfer log's rows),
an optimization (sampling time, predicted throughput).

The daemon wraps its store in one of these, so every part that writes (the dispatcher's
attempts, dataset passes, the EOS) is measured without code of its own. The forwarding is
built from the interface's public methods, so a call added to `JobStore` is forwarded (and
timed) without a change here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from stork.errors import JobNotFound
from stork.job import FileState, Job
from stork.server.admission import host_of
from stork.server.metrics import Metrics
from stork.store.base import (
    FileResult,
    HistoryEntry,
    HostLimit,
    JobStore,
    Listener,
    Outage,
    Transition,
)
from stork.translog import COMPLETED, TransferRecord

T = TypeVar("T")


class MeteredStore(JobStore):
    def __init__(self, inner: JobStore, metrics: Metrics) -> None:
        super().__init__(inner.node)
        self.inner = inner
        self.metrics = metrics
        self.shared = inner.shared  # a node of a shared queue stays one

    def timed(self, operation: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.metrics.store_call(operation, time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        """Anything else a store offers (not part of the interface) comes from the real one."""
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- the same listeners and health as the real store --------------------------------------

    def add_listener(self, callback: Listener) -> None:
        self.inner.add_listener(callback)

    def remove_listener(self, callback: Listener) -> None:
        self.inner.remove_listener(callback)

    @property
    def outage(self) -> Outage | None:
        return self.inner.outage

    def count_by_state(self) -> dict[str, int]:
        return self.timed("count_by_state", self.inner.count_by_state)

    # -- calls whose meaning is measured ------------------------------------------------------

    def start_attempt(self, job_id: int, now: float, src_url: str, dest_url: str,
                      module: str, limit: HostLimit | None = None) -> Job | None:
        job = self.timed("start_attempt", self.inner.start_attempt, job_id, now, src_url,
                         dest_url, module, limit)
        if job is not None:
            self.metrics.attempt_started(now - max(job.submitted_at, job.next_attempt_at))
        return job

    def finish_attempt(self, job_id: int, attempt: int, now: float,
                       transition: Transition) -> Job | None:
        job = self.timed("finish_attempt", self.inner.finish_attempt, job_id, attempt, now,
                         transition)
        if job is not None:
            self.metrics.attempt_ended(
                transition.event, transition.failure_kind, failed=transition.outcome == "failed",
                job_id=job_id, when=now, error=transition.error or transition.event,
                attempt=attempt)
        return job

    def finish_files(self, job_id: int, attempt: int, results: Sequence[FileResult],
                     rate_mbps: float | None = None) -> bool:
        done = self.timed("finish_files", self.inner.finish_files, job_id, attempt, results,
                          rate_mbps)
        if done:
            now = time.time()
            for r in results:
                if r.state is not FileState.DONE and (r.count_failure or r.failure_kind):
                    self.metrics.file_failed(r.failure_kind, job_id=job_id, when=now,
                                             error=r.error or "", index=r.index)
        return done

    def add_transfers(self, records: Sequence[TransferRecord]) -> int:
        added = self.timed("add_transfers", self.inner.add_transfers, records)
        for r in records:
            files = r.file_count if r.outcome == COMPLETED else (
                min(r.file_count, round(r.bytes_moved / r.file_size_bytes))
                if r.file_size_bytes > 0 else 0)
            self.metrics.moved(r.src_host, r.dest_host, r.bytes_moved, files, r.throughput_mbps)
        return added

    def add_history(self, entry: HistoryEntry) -> None:
        self.timed("add_history", self.inner.add_history, entry)
        if entry.kind == "optimization":  # the EOS keys its history by host:port
            self.metrics.optimized(entry.src_host, entry.dest_host)
            src, dest = host_only(entry.src_host), host_only(entry.dest_host)
            self.metrics.predicted(src, dest, entry.throughput_mbps)
            if entry.samples:  # a run that sampled (an answer from history samples nothing)
                self.metrics.sampling_run(src, dest, entry.duration_s)

    def update_result(self, job_id: int, values: dict[str, Any]) -> None:
        self.timed("update_result", self.inner.update_result, job_id, values)
        predicted = _predicted_mbps(values)
        if predicted is not None:
            try:
                job = self.inner.get(job_id)
            except JobNotFound:
                return
            self.metrics.predicted(host_of(job.src_url), host_of(job.dest_url), predicted)


def host_only(endpoint: str) -> str:
    """`host` of an EOS history's `host:port` (`[v6]:port` too), as the transfer log names
    machines: the metrics label a pair the same way whatever reported it."""
    if endpoint.startswith("[") and "]" in endpoint:
        return endpoint[1:endpoint.index("]")]
    host, sep, port = endpoint.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else endpoint


def _predicted_mbps(values: dict[str, Any]) -> float | None:
    """The throughput an optimizer predicted, in a job's new result attributes: the EOS's
    (`predicted_throughput_mbps`) or a dataset chunk's optimizer's (`optimizer_<class>`)."""
    if isinstance(values.get("predicted_throughput_mbps"), (int, float)):
        return float(values["predicted_throughput_mbps"])
    for key, info in values.items():
        if key.startswith("optimizer_") and isinstance(info, dict):
            predicted = info.get("predicted_mbps")
            if isinstance(predicted, (int, float)):
                return float(predicted)
    return None


def _forward(name: str) -> Callable[..., Any]:
    def call(self: MeteredStore, *args: Any, **kwargs: Any) -> Any:
        return self.timed(name, getattr(self.inner, name), *args, **kwargs)

    call.__name__ = name
    call.__doc__ = getattr(JobStore, name).__doc__
    return call


# every public method of the interface, abstract or with a single-node default (a node's
# heartbeat, leases, host load, pair lock: the real store's own must run, not the default)
for _name, _member in sorted(vars(JobStore).items()):
    if (callable(_member) and not _name.startswith("_")
            and _name not in MeteredStore.__dict__):
        setattr(MeteredStore, _name, _forward(_name))
MeteredStore.__abstractmethods__ = frozenset()


def metered(store: JobStore, metrics: Metrics) -> JobStore:
    """`store` with its calls measured into `metrics`."""
    return MeteredStore(store, metrics)  # type: ignore[abstract]  # forwarders added above
