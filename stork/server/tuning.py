"""An optimizer at work on one chunk of a dataset pass sent in batches
(`stork.server.dataset_batches`).

The optimizer (`stork.tuning`, named by the job's `optimization` or EOS_OPTIMIZER) gets
the transfer log (the newest HISTORY_ROWS rows), the chunk's description (mean file size,
count, the RTT measured at the pass's start, STORK_LINK_MBPS, the TCP buffer), the limits,
and a probe that sends real files of the chunk, not sent before, through the pass's own batch
machinery (so a probed file is done and never sent again). Its decision runs the rest of the
chunk; when RETUNE_AFTER batches in a row leave the decision's band it is asked again (at
least RETUNE_GAP_S after its last decision, at most MAX_RETUNES times). What it did goes on
the job's ad as `optimizer_<size class>`: the optimizer, the parameters, its reason, its
probes, the predicted and the achieved throughput, how many times the parameters changed,
and the known load (other transfers the daemon runs on the same link,
`DatasetDescription.known_load`). An optimizer that fails leaves the chunk to the defaults
and says why. "asm" gets the model of its scheduled offline analysis (`stork.asm.state`) and
then no history rows (it needs none).

Chunks of several size classes tuned in one pass run together and share the concurrency
(HARP's multi-chunk scheduling, `SharedConcurrency`): before each batch a chunk takes its
share of the largest concurrency any of them was given, by weight = bytes left x TT / UT
(`stork.tuning.harp.share_concurrency`); a chunk that finishes leaves its channels to the
others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from stork import tuning as optimizers
from stork.config import Settings
from stork.dataset.chunks import Chunk, Params
from stork.job import DatasetFileRow, Job
from stork.server.flow_tuning import HISTORY_ROWS, tuning_limits
from stork.store.base import JobStore
from stork.translog import TransferRecord
from stork.tuning.base import DatasetDescription, ProbeResult
from stork.tuning.harp import share_concurrency
from stork.urls import parse_url

log = logging.getLogger(__name__)


class ChunkRun(Protocol):
    """What tuning needs of the pass it tunes (`stork.server.dataset_batches.Batches`): the
    job, the settings, the store, the path's round trip and load, and a batch of real files
    sent (a probe). Named here, so the batches import tuning and never the other way."""

    job: Job
    settings: Settings
    store: JobStore

    @property
    def rtt_s(self) -> float | None: ...

    def known_load(self, src_url: str, dest_url: str) -> int: ...

    def stopped(self) -> bool: ...

    def run_batch(self, batch: list[int], rows: dict[int, DatasetFileRow], params: Params,
                  what: str) -> float | None: ...

MAX_RETUNES = 6  # new decisions per chunk when batches leave the predicted band, at most
RETUNE_AFTER = 2  # batches in a row outside the band: a drift, not one noisy batch
RETUNE_GAP_S = 10.0  # least time between two decisions of a chunk (each change of parameters
# costs new processes and a new slow start)


class SharedConcurrency:
    """The concurrency of the tuned chunks of one pass, which run together (one thread each):
    each chunk says what it has left, the concurrency its optimizer chose and its unit
    throughput (at cc = 1), and takes its share before each batch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: dict[str, tuple[float, int, float]] = {}

    def update(self, name: str, bytes_left: float, cc: int, unit_mbps: float) -> None:
        with self._lock:
            self._chunks[name] = (max(bytes_left, 1.0), max(cc, 1), max(unit_mbps, 1e-9))

    def leave(self, name: str) -> None:
        with self._lock:
            self._chunks.pop(name, None)

    def cc(self, name: str, asked: int) -> int:
        """`name`'s share now (what it asked, when it is alone or not registered)."""
        with self._lock:
            if name not in self._chunks or len(self._chunks) == 1:
                return asked
            names = list(self._chunks)
            return share_concurrency([self._chunks[n] for n in names])[names.index(name)]


def optimizer_named(name: str, settings: Settings) -> tuple[optimizers.Optimizer, bool]:
    """The probing optimizer `name` with its knobs, and whether it learns from the transfer
    log: "asm" with the model its scheduled analysis kept in the state directory (none
    yet: it analyses the log itself)."""
    optimizer = optimizers.get(name, settings)
    if optimizer.name != "asm":
        return optimizer, True
    from stork.asm.state import asm_optimizer

    asm = asm_optimizer(settings.state_dir)
    return asm, asm.model is None


class Tuning:
    """One chunk's optimizer at work: its decision (from history and probes with real files
    of the chunk), a new decision when the throughput of RETUNE_AFTER batches in a row
    leaves the predicted band (RETUNE_GAP_S apart, at most MAX_RETUNES times), and what it
    did, on the job's ad."""

    @classmethod
    def start(cls, run: ChunkRun, chunk: Chunk, rows: dict[int, DatasetFileRow],
              queue: list[int], shared: SharedConcurrency) -> Tuning:
        """The chunk's tuning; its probes take files from the head of `queue`."""
        optimizer, needs_history = optimizer_named(
            run.job.spec.optimizer or run.settings.eos_optimizer, run.settings)
        known = [size for i in chunk.indexes if (size := rows[i].size_bytes) is not None]
        mean = sum(known) / len(known) if known else 0.0
        first = rows[chunk.indexes[0]]
        dataset = DatasetDescription.of(
            mean, len(chunk.indexes), rtt_s=run.rtt_s,
            bandwidth_bps=run.settings.link_mbps * 1e6,
            buffer_bytes=run.job.spec.options.tcp_buffer_bytes,
            src_host=parse_url(first.src_url).host or "localhost",
            dest_host=parse_url(first.dest_url).host or "localhost",
            known_load=run.known_load(first.src_url, first.dest_url))

        def probe(params: Params, size_bytes: int) -> ProbeResult:
            """Real files of the chunk, not sent before, about `size_bytes` of them."""
            take: list[int] = []
            total = 0
            while queue and (total < size_bytes or len(take) < params.cc):
                index = queue.pop(0)
                take.append(index)
                total += rows[index].size_bytes or 0
            if not take or run.stopped():  # nothing sent: the optimizer stops probing
                queue[:0] = take
                return ProbeResult(params, 0.0)
            began = time.monotonic()
            achieved = run.run_batch(take, rows, params, f"{chunk.size_class.value} probe")
            return ProbeResult(params, achieved or 0.0, total, time.monotonic() - began,
                               len(take))

        history = (list(reversed(run.store.transfers(limit=HISTORY_ROWS)))  # oldest first
                   if needs_history else [])
        return cls(run, chunk, optimizer, history, dataset, probe, shared,
                   files_left=lambda: len(queue))

    def __init__(self, run: ChunkRun, chunk: Chunk, optimizer: optimizers.Optimizer,
                 history: list[TransferRecord], dataset: DatasetDescription,
                 probe: Callable[[Params, int], ProbeResult],
                 shared: SharedConcurrency | None = None,
                 files_left: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.chunk = chunk
        self.optimizer = optimizer
        self.history = history
        self.dataset = dataset
        self.probe = probe
        self.limits = tuning_limits()
        self.decisions: list[optimizers.Decision] = []
        self.failure: str | None = None
        self.achieved: list[float] = []
        self.retunes = 0
        self.outside = 0  # batches in a row outside the last decision's band
        self.clock = clock
        self.decided_at = float("-inf")
        self.shared = shared or SharedConcurrency()
        self.shared_cc: list[int] = []  # the concurrency each batch ran with, when shared
        self.files_left = files_left or (lambda: 1)  # files of the chunk not sent yet

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
        self.decided_at, self.outside = self.clock(), 0
        log.info("job %d: %s chose %s for the %s chunk (%s)", self.run.job.id,
                 self.optimizer.name, decision.params.label(), self.chunk.size_class.value,
                 decision.reason)
        return decision.params

    def batch_params(self, params: Params, bytes_left: float) -> Params:
        """The parameters of the next batch: the decision's, with this chunk's share of the
        concurrency of the tuned chunks running beside it."""
        name = self.chunk.size_class.value
        self.shared.update(name, bytes_left, params.cc, self._unit_mbps(params))
        cc = self.shared.cc(name, params.cc)
        if cc != params.cc or self.shared_cc:
            self.shared_cc.append(cc)
        return Params(cc, params.p, params.pp)

    def _unit_mbps(self, params: Params) -> float:
        """Throughput at cc = 1: the decision's model, else the last batch per channel."""
        if self.decisions and self.decisions[-1].unit_mbps:
            return self.decisions[-1].unit_mbps
        if self.decisions and self.decisions[-1].predicted_mbps:
            return self.decisions[-1].predicted_mbps / max(params.cc, 1)
        return self.achieved[-1] / max(params.cc, 1) if self.achieved else 1.0

    def finish(self) -> None:
        """The chunk is done: its channels go to the chunks still running."""
        self.shared.leave(self.chunk.size_class.value)
        self.record()

    def after_batch(self, params: Params, achieved_mbps: float) -> Params:
        self.achieved.append(achieved_mbps)
        if not self.decisions:
            return params
        drifted = self.optimizer.retune(self.decisions[-1], achieved_mbps)
        self.outside = self.outside + 1 if drifted else 0
        if (self.outside < RETUNE_AFTER or self.retunes >= MAX_RETUNES
                or self.clock() - self.decided_at < RETUNE_GAP_S or not self.files_left()):
            return params  # (with no file left there is nothing to retune for, nor to probe)
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
                           f"{p.files} files" for d in self.decisions for p in d.probes
                           if not p.empty],
                "retunes": self.retunes,
                # each change of parameters costs new processes and a new slow start
                "param_changes": sum(a.params != b.params for a, b in
                                     zip(self.decisions, self.decisions[1:], strict=False))})
            if self.dataset.known_load:
                info["known_load"] = self.dataset.known_load
        if self.achieved:
            info["achieved_mbps"] = round(sum(self.achieved) / len(self.achieved), 3)
        if self.failure:
            info["failure"] = self.failure
        if self.shared_cc:
            info["shared_cc"] = self.shared_cc
        self.run.store.update_result(self.run.job.id, {key: info})
