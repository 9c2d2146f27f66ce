"""The daemon's Prometheus metrics (`GET /metrics`, text format through prometheus_client).

One `Metrics` per daemon holds its own registry (no process-wide state). The daemon's parts
report through a few small calls (`attempt_started`, `attempt_ended`, `transfers_logged`,
`optimization`, `tick`, `store_call`, ...); most of them are made by `MeteredStore`
(stork/server/metered_store.py), which sees every store call the daemon makes, so the
dispatcher, the attempts and the dataset passes need no code of their own for metrics. What
is a matter of state (jobs by state, transfers running) is read from the store and the
dispatcher when a scraper asks.

Every series carries the label `node`: `node_name()`, the one place that names this daemon
(the host name; a multi-node set-up sharing one database tells its nodes apart by it).
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# the Content-Type of the Prometheus text format that generate_latest writes
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

QUEUE_WAIT_BUCKETS_S = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400)
TICK_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
STORE_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0)
RECENT_FAILURES = 50  # failed attempts and files kept for the status page
RECENT_PAIRS = 8  # endpoint pairs of the last optimizations, for the status page


def node_name() -> str:
    """This daemon's name when STORK_NODE_NAME is empty: the host name (as the store)."""
    return socket.gethostname() or "localhost"


@dataclass(frozen=True)
class Failure:
    """One failed attempt (or file of a dataset) as the status page lists it."""

    time: float
    job_id: int
    kind: str  # the stored failure_kind ("transient", "permanent", ...), "unknown" if none
    error: str
    what: str  # "attempt 2" or the file's index "file 17"


class _StateCollector(Collector):
    """Jobs by state and transfers running, read when a scraper asks."""

    def __init__(self, node: str, counts: Callable[[], Mapping[str, int]],
                 running: Callable[[], int]) -> None:
        self._node = node
        self._counts = counts
        self._running = running

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("stork_jobs", "Jobs in the queue by state",
                                 labels=["node", "state"])
        for state, count in sorted(self._counts().items()):
            jobs.add_metric([self._node, state], count)
        yield jobs
        running = GaugeMetricFamily("stork_transfers_running",
                                    "Transfer attempts whose tool runs now", labels=["node"])
        running.add_metric([self._node], self._running())
        yield running


class Metrics:
    """The series of one daemon and the calls that feed them (thread-safe)."""

    def __init__(self, node: str | None = None) -> None:
        self.node = node or node_name()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        pair = ["node", "src", "dest"]
        self._started = Counter("stork_attempts_started", "Transfer attempts started",
                                ["node"], registry=r)
        self._ended = Counter("stork_attempts_ended",
                              "Transfer attempts ended, by their event (completed, attempt_failed: "
                              "to be retried, failed, requeue, pass_ended: files left)",
                              ["node", "event"], registry=r)
        self._failures = Counter("stork_failures",
                                 "Failed attempts and dataset files, by failure kind",
                                 ["node", "kind", "scope"], registry=r)
        self._bytes = Counter("stork_bytes_moved", "Bytes moved, by host pair",
                              pair, registry=r)
        self._files = Counter("stork_files_moved", "Files moved, by host pair", pair, registry=r)
        self._achieved = Gauge("stork_throughput_achieved_mbps",
                               "Throughput of the last transfer (or dataset batch) of the host "
                               "pair, Mbit/s", pair, registry=r)
        self._predicted = Gauge("stork_throughput_predicted_mbps",
                                "Throughput the last optimization of the host pair predicted, "
                                "Mbit/s", pair, registry=r)
        self._runs = Counter("stork_sampling_runs", "EOS sampling runs, by host pair", pair,
                             registry=r)
        self._sampling_s = Counter("stork_sampling_seconds", "Seconds spent sampling, by host pair",
                                   pair, registry=r)
        self._wait = Histogram("stork_queue_wait_seconds",
                               "From a job becoming runnable (submitted, or its retry due) to "
                               "its attempt's start", ["node"], buckets=QUEUE_WAIT_BUCKETS_S,
                               registry=r)
        self._tick = Histogram("stork_dispatch_tick_seconds", "Duration of one dispatcher tick",
                               ["node"], buckets=TICK_BUCKETS_S, registry=r)
        self._store = Histogram("stork_store_seconds", "Latency of job store calls, by call",
                                ["node", "operation"], buckets=STORE_BUCKETS_S, registry=r)
        self._lock = threading.Lock()
        self._failed: deque[Failure] = deque(maxlen=RECENT_FAILURES)
        self._optimized: deque[tuple[str, str]] = deque(maxlen=RECENT_PAIRS)

    def watch_state(self, counts: Callable[[], Mapping[str, int]],
                    running: Callable[[], int]) -> None:
        """Read jobs by state and running transfers from these at each scrape."""
        self.registry.register(_StateCollector(self.node, counts, running))

    def exposition(self) -> bytes:
        """Every series in the Prometheus text format."""
        return generate_latest(self.registry)

    # -- what the daemon's parts report -------------------------------------------------------

    def attempt_started(self, waited_s: float) -> None:
        self._started.labels(self.node).inc()
        self._wait.labels(self.node).observe(max(waited_s, 0.0))

    def attempt_ended(self, event: str, failure_kind: str | None, *, failed: bool,
                      job_id: int, when: float, error: str, attempt: int) -> None:
        self._ended.labels(self.node, event).inc()
        if failed:
            kind = failure_kind or "unknown"
            self._failures.labels(self.node, kind, "attempt").inc()
            self._remember(Failure(when, job_id, kind, error, f"attempt {attempt}"))

    def file_failed(self, failure_kind: str | None, *, job_id: int, when: float, error: str,
                    index: int) -> None:
        kind = failure_kind or "unknown"
        self._failures.labels(self.node, kind, "file").inc()
        self._remember(Failure(when, job_id, kind, error, f"file {index}"))

    def moved(self, src: str, dest: str, bytes_moved: int, files: int,
              throughput_mbps: float) -> None:
        self._bytes.labels(self.node, src, dest).inc(max(bytes_moved, 0))
        self._files.labels(self.node, src, dest).inc(max(files, 0))
        self._achieved.labels(self.node, src, dest).set(throughput_mbps)

    def predicted(self, src: str, dest: str, throughput_mbps: float) -> None:
        self._predicted.labels(self.node, src, dest).set(throughput_mbps)

    def sampling_run(self, src: str, dest: str, seconds: float) -> None:
        self._runs.labels(self.node, src, dest).inc()
        self._sampling_s.labels(self.node, src, dest).inc(max(seconds, 0.0))

    def optimized(self, src_endpoint: str, dest_endpoint: str) -> None:
        """An optimization of this pair (as the EOS's history names it) was stored."""
        with self._lock:
            pair = (src_endpoint, dest_endpoint)
            if pair in self._optimized:
                self._optimized.remove(pair)
            self._optimized.append(pair)

    def optimized_pairs(self) -> list[tuple[str, str]]:
        """The pairs of the last optimizations since the daemon started, newest first."""
        with self._lock:
            return list(reversed(self._optimized))

    def tick(self, seconds: float) -> None:
        self._tick.labels(self.node).observe(seconds)

    def store_call(self, operation: str, seconds: float) -> None:
        self._store.labels(self.node, operation).observe(seconds)

    # -- for the status page ------------------------------------------------------------------

    def _remember(self, failure: Failure) -> None:
        with self._lock:
            self._failed.append(failure)

    def recent_failures(self) -> list[Failure]:
        """Failures since the daemon started, newest first."""
        with self._lock:
            return sorted(self._failed, key=lambda f: f.time, reverse=True)


def samples(text: bytes | str, name: str) -> Iterable[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` in a text exposition (for tests and
    the benchmark)."""
    from prometheus_client.parser import text_string_to_metric_families

    body = text.decode() if isinstance(text, bytes) else text
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name:
                yield dict(sample.labels), float(sample.value)


def value(text: bytes | str, name: str, **labels: Any) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when none)."""
    return sum(v for found, v in samples(text, name)
               if all(found.get(k) == str(want) for k, want in labels.items()))
