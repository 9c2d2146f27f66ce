"""What the status page shows (`GET /v1/overview`), read from the store, the dispatcher, the
EOS and the metrics in one call, and the page itself (`GET /`, status_page.html beside this
file: one self-contained HTML file, no resource from elsewhere).

The page asks for the overview every few seconds with the bearer token the operator gave it;
the HTML carries no data, so it is served to anyone who reaches the TCP API.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from importlib import resources
from typing import Any

from stork import __version__
from stork.eos.plot import Curve, fitted_curves
from stork.errors import JobNotFound, StorkError
from stork.job import FLOW_RESULT_KEY, Job, JobState
from stork.server.metrics import Metrics
from stork.server.service import Service
from stork.store.base import HistoryEntry, JobStore
from stork.transfer import verify
from stork.urls import parse_url

FLOW_SHOWN = 120  # windows of a running job's flow drawn (its last two minutes)
QUEUE_SHOWN = 50  # waiting jobs listed (the counts cover them all)
FAILURES_SHOWN = 20
OPTIMIZATIONS_SHOWN = 4
PAIRS_SEARCHED = 8  # host pairs whose optimizations are looked up
CHART_ROWS = 5000  # transfer log rows drawn at most
CURVE_POINTS = 60
DEFAULT_HOURS = 6.0
_SIZES_KEPT = 1024


def page() -> bytes:
    """The status page (static: the data comes from /v1/overview)."""
    return resources.files("stork.server").joinpath("status_page.html").read_bytes()


class Overview:
    """Builds the overview; keeps the source sizes of single-file jobs it looked up."""

    def __init__(self, service: Service, metrics: Metrics | None) -> None:
        self.service = service
        self.metrics = metrics
        self._sizes: dict[int, int | None] = {}
        self._lock = threading.Lock()

    @property
    def store(self) -> JobStore:
        return self.service.store

    def build(self, hours: float = DEFAULT_HOURS) -> dict[str, Any]:
        now = time.time()
        counts = self.store.count_by_state()
        running = self.store.list_jobs([JobState.RUNNING])
        waiting = self._first_waiting()
        since = now - hours * 3600
        rows = self.store.transfers(since=since, limit=CHART_ROWS)
        return {
            "node": self.metrics.node if self.metrics is not None else "",
            "time": now,
            "server": {**self.service.ping(), "version": __version__},
            "counts": counts,
            "running": [self._running(job) for job in running],
            "waiting": [self._waiting(job) for job in waiting],
            "waiting_total": counts.get(JobState.IDLE.value, 0),
            "hours": hours,
            "links": _links(rows),
            "optimizations": self._optimizations([*running, *waiting], since),
            "matrix": self.service.matrix(),
            "failures": self._failures(),
        }

    # -- parts --------------------------------------------------------------------------------

    def _first_waiting(self) -> list[Job]:
        """The first QUEUE_SHOWN waiting transfers in id order, read one by one: a queue of
        100,000 jobs is not read whole at every refresh."""
        ids = sorted(job_id for job_id, _ in self.store.waiting_transfers())[:QUEUE_SHOWN]
        jobs = []
        for job_id in ids:
            try:
                job = self.store.get(job_id)
            except JobNotFound:
                continue  # removed meanwhile
            if job.state is JobState.IDLE:
                jobs.append(job)
        return jobs

    def _running(self, job: Job) -> dict[str, Any]:
        dataset = job.files_total > 0
        total = job.bytes_total if dataset else self._size(job)
        return {"id": job.id, "owner": job.owner, "src_url": job.src_url,
                "dest_url": job.dest_url, "started_at": job.started_at,
                "attempts": job.attempts, "dataset": dataset, "bytes_done": job.bytes_done,
                "bytes_total": total, "files_total": job.files_total,
                "files_done": job.files_done, "files_failed": job.files_failed,
                "rate_mbps": job.rate_mbps,
                "flow": (job.result.get(FLOW_RESULT_KEY) or {}).get("mbps", [])[-FLOW_SHOWN:]}

    def _waiting(self, job: Job) -> dict[str, Any]:
        return {"id": job.id, "owner": job.owner, "src_url": job.src_url,
                "dest_url": job.dest_url, "submitted_at": job.submitted_at,
                "attempts": job.attempts, "failures": job.failures,
                "wait_reason": self.service.dispatcher.wait_reason(job),
                "last_error": job.last_error, "failure_kind": job.failure_kind}

    def _size(self, job: Job) -> int | None:
        """A single-file job's size: its `size` attribute, else its source's, looked up once."""
        if job.spec.size_bytes is not None:
            return job.spec.size_bytes
        with self._lock:
            if job.id in self._sizes:
                return self._sizes[job.id]
        try:
            size = verify.size_of(job.src_url)
        except (StorkError, OSError):
            size = None
        with self._lock:
            if len(self._sizes) >= _SIZES_KEPT:
                self._sizes.clear()
            self._sizes[job.id] = size
        return size

    def _optimizations(self, jobs: list[Job], since: float) -> list[dict[str, Any]]:
        """The newest optimizations of the pairs optimized lately and those the queue's jobs
        touch (the EOS's history names machines host:port)."""
        pairs = self.metrics.optimized_pairs() if self.metrics is not None else []
        for job in jobs:
            pair = (_endpoint(job.src_url), _endpoint(job.dest_url))
            if pair not in pairs:
                pairs.append(pair)
        found: list[HistoryEntry] = []
        for src, dest in pairs[:PAIRS_SEARCHED]:
            found += self.store.history(src, dest, symmetric=False, kind="optimization",
                                        since=since, limit=OPTIMIZATIONS_SHOWN)
        found.sort(key=lambda e: e.time, reverse=True)
        return [_optimization(e) for e in found[:OPTIMIZATIONS_SHOWN]]

    def _failures(self) -> list[dict[str, Any]]:
        """Failed attempts and files since the daemon started, and failed jobs in the store."""
        seen: list[dict[str, Any]] = []
        if self.metrics is not None:
            seen = [asdict(f) for f in self.metrics.recent_failures()]
        failed = sorted(self.store.list_jobs([JobState.FAILED]),
                        key=lambda j: j.finished_at or 0.0, reverse=True)[:FAILURES_SHOWN]
        noted = {(f["job_id"], round(f["time"], 3)) for f in seen}
        for job in failed:
            if (job.id, round(job.finished_at or 0.0, 3)) not in noted:
                seen.append({"time": job.finished_at or job.updated_at, "job_id": job.id,
                             "kind": job.failure_kind or "unknown",
                             "error": job.last_error or "", "what": "job FAILED"})
        seen.sort(key=lambda f: f["time"], reverse=True)
        return seen[:FAILURES_SHOWN]


def _endpoint(url: str) -> str:
    try:
        return parse_url(url).endpoint
    except ValueError:
        return url


def _links(rows: list[Any]) -> list[dict[str, Any]]:
    """Per host pair, the throughput of each transfer (or dataset batch) over time."""
    links: dict[str, list[list[float]]] = {}
    for r in sorted(rows, key=lambda r: r.time):
        links.setdefault(f"{r.src_host} -> {r.dest_host}", []).append(
            [round(r.time + r.duration_s, 3), r.throughput_mbps, r.bytes_moved])
    return [{"pair": pair, "points": points} for pair, points in sorted(links.items())]


def _optimization(entry: HistoryEntry) -> dict[str, Any]:
    """An optimization with the figure `--plot` draws: samples, fitted curves, optimum."""
    samples = [[float(s[0]), float(s[1])] for s in entry.samples]
    grid: list[float] = []
    curves: list[Curve] = []
    if samples:
        xs, curves = fitted_curves(samples, entry.model, entry.streams, CURVE_POINTS,
                                    log_spaced=True)
        grid = [round(float(x), 3) for x in xs]
    return {"time": entry.time, "src": entry.src_host, "dest": entry.dest_host,
            "arguments": entry.arguments, "streams": entry.streams,
            "throughput_mbps": entry.throughput_mbps, "model": entry.model,
            "duration_s": entry.duration_s, "samples": samples,
            "grid": grid,
            "curves": [{"name": c.name, "chosen": c.chosen, "style": c.style,
                        "throughput_mbps": [round(float(y), 3) for y in c.throughput_mbps]}
                       for c in curves]}
