"""An optimizer at work on one chunk of a dataset pass (`stork.server.dataset_run`).

The optimizer (`stork.optimizers`, named by the job's `optimization` or EOS_OPTIMIZER) gets
the transfer log (the newest HISTORY_ROWS rows), the chunk's description (mean file size,
count, the RTT measured at the pass's start, STORK_LINK_MBPS, the TCP buffer), the limits,
and a probe that sends real files of the chunk, not sent before, through the pass's own batch
machinery (so a probed file is done and never sent again). Its decision runs the rest of the
chunk; when a batch's throughput leaves the decision's band it is asked again (at most
MAX_RETUNES times). What it did goes on the job's ad as `optimizer_<size class>`: the
optimizer, the parameters, its reason, its probes, the predicted and the achieved
throughput. An optimizer that fails leaves the chunk to the defaults and says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from stork import optimizers
from stork.dataset.chunks import Chunk, Params
from stork.job import DatasetFileRow
from stork.optimizers.base import DatasetDescription, Limits, ProbeResult
from stork.transfer.options import MAX_CONCURRENCY
from stork.translog import TransferRecord
from stork.urls import parse_url

if TYPE_CHECKING:
    from stork.server.dataset_run import DatasetRun

log = logging.getLogger(__name__)

HISTORY_ROWS = 100_000  # newest transfer log rows an optimizer learns from
MAX_RETUNES = 2  # new decisions per chunk when batches leave the predicted band
MAX_TUNED_STREAMS = 32  # limits of an optimizer's choice: streams per file,
MAX_TUNED_PIPELINING = 32  # pipelining depth,
MAX_TUNED_TOTAL_STREAMS = 256  # and cc * p


class Tuning:
    """One chunk's optimizer at work: its decision (from history and probes with real files
    of the chunk), a new decision when a batch's throughput leaves the predicted band (at
    most MAX_RETUNES times), and what it did, on the job's ad."""

    @classmethod
    def start(cls, run: DatasetRun, chunk: Chunk, rows: dict[int, DatasetFileRow],
              queue: list[int]) -> Tuning:
        """The chunk's tuning; its probes take files from the head of `queue`."""
        optimizer = optimizers.get(run.job.spec.optimizer or run.settings.eos_optimizer,
                                   run.settings)
        known = [size for i in chunk.indexes if (size := rows[i].size_bytes) is not None]
        mean = sum(known) / len(known) if known else 0.0
        first = rows[chunk.indexes[0]]
        dataset = DatasetDescription.of(
            mean, len(chunk.indexes), rtt_s=run.rtt_s,
            bandwidth_bps=run.settings.link_mbps * 1e6,
            buffer_bytes=run.job.spec.options.tcp_buffer_bytes,
            src_host=parse_url(first.src_url).host or "localhost",
            dest_host=parse_url(first.dest_url).host or "localhost")

        def probe(params: Params, size_bytes: int) -> ProbeResult:
            """Real files of the chunk, not sent before, about `size_bytes` of them."""
            take: list[int] = []
            total = 0
            while queue and (total < size_bytes or len(take) < params.cc):
                index = queue.pop(0)
                take.append(index)
                total += rows[index].size_bytes or 0
            if not take or run.stopped():
                return ProbeResult(params, 0.0)
            began = time.monotonic()
            achieved = run.run_batch(take, rows, params, f"{chunk.size_class.value} probe")
            return ProbeResult(params, achieved or 0.0, total, time.monotonic() - began,
                               len(take))

        history = list(reversed(run.store.transfers(limit=HISTORY_ROWS)))  # oldest first
        return cls(run, chunk, optimizer, history, dataset, probe)

    def __init__(self, run: DatasetRun, chunk: Chunk, optimizer: optimizers.Optimizer,
                 history: list[TransferRecord], dataset: DatasetDescription,
                 probe: Callable[[Params, int], ProbeResult]) -> None:
        self.run = run
        self.chunk = chunk
        self.optimizer = optimizer
        self.history = history
        self.dataset = dataset
        self.probe = probe
        self.limits = Limits(max_cc=MAX_CONCURRENCY, max_p=MAX_TUNED_STREAMS,
                             max_pp=MAX_TUNED_PIPELINING, max_streams=MAX_TUNED_TOTAL_STREAMS)
        self.decisions: list[optimizers.Decision] = []
        self.failure: str | None = None
        self.achieved: list[float] = []
        self.retunes = 0

    def decide(self, fallback: Params) -> Params:
        try:
            decision = self.optimizer.optimize(self.history, self.dataset, self.limits,
                                               self.probe)
        except Exception as exc:  # noqa: BLE001 - an optimizer's failure never stops the transfer
            log.warning("job %d: optimizer %s failed for the %s chunk: %s; using %s",
                        self.run.job.id, self.optimizer.name, self.chunk.size_class.value,
                        exc, fallback.label())
            self.failure = f"{type(exc).__name__}: {exc}"
            return fallback
        self.decisions.append(decision)
        log.info("job %d: %s chose %s for the %s chunk (%s)", self.run.job.id,
                 self.optimizer.name, decision.params.label(), self.chunk.size_class.value,
                 decision.reason)
        return decision.params

    def after_batch(self, params: Params, achieved_mbps: float) -> Params:
        self.achieved.append(achieved_mbps)
        if not self.decisions or self.retunes >= MAX_RETUNES:
            return params
        if not self.optimizer.retune(self.decisions[-1], achieved_mbps):
            return params
        self.retunes += 1
        return self.decide(params)

    def record(self) -> None:
        """The chunk's optimization on the job's ad (`optimizer_<size class>`)."""
        key = f"optimizer_{self.chunk.size_class.value}"
        info: dict[str, object] = {"optimizer": self.optimizer.name}
        if self.decisions:
            last = self.decisions[-1]
            info.update({
                "params": last.params.label(), "reason": last.reason,
                "predicted_mbps": None if last.predicted_mbps is None
                else round(last.predicted_mbps, 3),
                "probes": [f"{p.params.label()}: {p.throughput_mbps:.1f} Mbit/s over "
                           f"{p.files} files" for d in self.decisions for p in d.probes],
                "retunes": self.retunes})
        if self.achieved:
            info["achieved_mbps"] = round(sum(self.achieved) / len(self.achieved), 3)
        if self.failure:
            info["failure"] = self.failure
        self.run.store.update_result(self.run.job.id, {key: info})
