"""A dataset chunk sent the older way: a sequence of runs over batches of its files.

A chunk goes this way with a probing optimizer (EOS, HARP, ASM, d-w: `stork.server.tuning`,
which probes with real batches of the chunk and may change the parameters between
batches) or with STORK_ENGINE = batch (for comparison with the engine). Each batch is one
globus-url-copy run (`-c -cd -cc -p [-pp] [-fast] -f -`) over its files, and one gfal2 copy
(`GfalModule.list_command`) over those with an XRootD or WebDAV end; the pass then checks
its files, sends those not right again alone, commits them in one transaction and adds the
batch's row to the transfer log. A daemon killed mid-dataset resends at most the batches
that were running. Everything per file (URLs, checks, the file sent alone, the commit) is
the pass's (`stork.server.dataset_run.DatasetRun`); this module only batches.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from stork.config import ONLINE_OPTIMIZERS, Settings
from stork.dataset.chunks import Chunk, Params, batches
from stork.job import DatasetFileRow, FileState, Job
from stork.store.base import FileResult, JobStore
from stork.transfer.base import TransferModule
from stork.transfer.gfal import GfalModule
from stork.transfer.gridftp import MAX_LIST_URL, GridFtpModule, list_input
from stork.transfer.registry import through_gfal
from stork.translog import COMPLETED, TransferRecord
from stork.urls import parse_url

if TYPE_CHECKING:
    from stork.server.tuning import SharedConcurrency, Tuning

log = logging.getLogger(__name__)


class BatchedPass(Protocol):
    """What batches need of their pass (`stork.server.dataset_run.DatasetRun`). Named
    here, so that the pass imports this module and never the other way."""

    job: Job
    settings: Settings
    store: JobStore
    attempt_no: int
    rtt_s: float | None
    module: GridFtpModule
    gfal: GfalModule

    @property
    def verify_checksum(self) -> bool: ...  # the job's, when its destination can be read back

    def clock(self) -> float: ...

    def stopped(self) -> bool: ...

    def ordered(self) -> bool: ...

    def known_load(self, src_url: str, dest_url: str) -> int: ...

    def file_urls(self, row: DatasetFileRow, attempt_no: int) -> tuple[str, str]: ...

    def checksum_type(self, src: str, dest: str) -> str: ...

    def run_child(self, argv: list[str], stdin: bytes | None = None, *,
                  module: TransferModule | None = None,
                  on_stdout: Callable[[bytes], None] | None = None) -> tuple[int, str]: ...

    def check(self, batch: list[int], rows: dict[int, DatasetFileRow],
              urls: dict[int, tuple[str, str]], clean: set[int], streams: int
              ) -> list[FileResult]: ...

    def release(self, indexes: list[int]) -> None: ...

    def commit(self, results: list[FileResult]) -> bool: ...


class Batches:
    """A pass's chunks sent in batches; one per pass (its tuned chunks share their
    concurrency: `stork.server.tuning.SharedConcurrency`). It is also what a probing
    optimizer's probe runs on (`stork.server.tuning.ChunkRun`)."""

    def __init__(self, run: BatchedPass) -> None:
        self.run = run
        self.job, self.settings, self.store = run.job, run.settings, run.store
        self._lock = threading.Lock()
        self._shared_cc: SharedConcurrency | None = None

    @property
    def rtt_s(self) -> float | None:
        return self.run.rtt_s

    def stopped(self) -> bool:
        return self.run.stopped()

    def known_load(self, src_url: str, dest_url: str) -> int:
        return self.run.known_load(src_url, dest_url)

    def tuning(self, chunk: Chunk, rows: dict[int, DatasetFileRow],
               queue: list[int]) -> Tuning | None:
        """The chunk's probing optimizer, when the job asks for one (`optimization`).
        Imported here: the optimizers load scikit-learn, which only datasets that ask
        need."""
        if not self.job.spec.optimization or self.run.ordered():
            return None
        name = self.job.spec.optimizer or self.settings.eos_optimizer
        if name in ONLINE_OPTIMIZERS:  # a controller of a flow, with STORK_ENGINE = batch
            self.store.update_result(self.job.id, {f"optimizer_{chunk.size_class.value}": {
                "optimizer": name, "failure": f"{name} tunes a running flow and "
                f"STORK_ENGINE is {self.settings.engine}: the chunk ran with its preset"}})
            return None
        from stork.server.tuning import SharedConcurrency, Tuning

        with self._lock:
            if self._shared_cc is None:
                self._shared_cc = SharedConcurrency()
        return Tuning.start(self, chunk, rows, queue, self._shared_cc)

    def send(self, chunk: Chunk, rows: dict[int, DatasetFileRow], queue: list[int],
             params: Params, tuning: Tuning | None = None) -> None:
        """The chunk's `queue`, batch after batch at `params` (with `tuning`, at what it
        decides, asked again as batches leave its band)."""
        sizes = {i: rows[i].size_bytes for i in chunk.indexes}
        while queue and not self.stopped():
            run_params = params
            if tuning is not None:
                run_params = tuning.batch_params(params, sum(sizes[i] or 0 for i in queue))
            batch = batches(queue, sizes, run_params.cc)[0]
            del queue[:len(batch)]
            achieved = self.run_batch(batch, rows, run_params, chunk.size_class.value)
            if tuning is not None and achieved is not None:
                params = tuning.after_batch(params, achieved)

    def run_batch(self, batch: list[int], rows: dict[int, DatasetFileRow], params: Params,
                  what: str) -> float | None:
        """One globus-url-copy run over `batch`, its files checked (those not right sent
        again alone) and committed, and its row in the transfer log. Returns the batch's
        throughput in Mbit/s (None when it was stopped)."""
        run = self.run
        label = f"{what} {params.label()}"
        self.store.start_files(self.job.id, run.attempt_no, batch, label)
        urls = {i: run.file_urls(rows[i], rows[i].attempts + 1) for i in batch}
        gfal = [i for i in batch if through_gfal(*urls[i])]
        listed = [i for i in batch if max(len(u) for u in urls[i]) <= MAX_LIST_URL
                  and i not in gfal]
        clean: set[int] = set()
        began, began_wall = time.monotonic(), run.clock()
        sharing = self.known_load(*urls[batch[0]])
        if listed:
            argv = run.module.list_command(
                cc=params.cc, p=params.p, pipelining=params.pipelining,
                fast=self.settings.dataset_fast, verify_checksum=run.verify_checksum,
                tcp_buffer_bytes=self.job.spec.options.tcp_buffer_bytes,
                block_size_bytes=self.job.spec.options.block_size_bytes)
            code, _ = run.run_child(argv, list_input([urls[i] for i in listed]))
            if code == 0 and len(listed) + len(gfal) == len(batch):
                clean.update(listed)
        if gfal and not self.stopped():
            clean.update(self._gfal_batch(gfal, urls, params))
        if self.stopped():
            run.release(batch)
            return None
        results = run.check(batch, rows, urls, clean, params.p)
        if self.stopped():  # stopped during a file sent alone
            done = {r.index for r in results if r.state is FileState.DONE}
            run.release([i for i in batch if i not in done])
            results = [r for r in results if r.index in done]
        run.commit(results)
        duration = time.monotonic() - began
        moved = self._log_batch(batch, rows, urls, results, params, began_wall, duration,
                                sharing)
        return moved * 8 / 1e6 / duration if duration > 0 else 0.0

    def _gfal_batch(self, batch: list[int], urls: dict[int, tuple[str, str]],
                    params: Params) -> set[int]:
        """The files of `batch` through gfal2's copy (`cc` at a time, `p` streams): those it
        answered as copied."""
        run = self.run
        answers = bytearray()
        pairs = "".join(f"{urls[i][0]} {urls[i][1]} {run.checksum_type(*urls[i])}\n"
                        for i in batch).encode()
        code, stderr = run.run_child(run.gfal.list_command(cc=params.cc, p=params.p),
                                     pairs, module=run.gfal, on_stdout=answers.extend)
        copied: set[int] = set()
        for line in bytes(answers).decode(errors="replace").splitlines():
            try:
                answer = json.loads(line)
                index = batch[int(answer["line"]) - 1]
            except (ValueError, KeyError, IndexError, TypeError):
                continue
            if "error" in answer:
                log.info("job %d: %s -> %s: %s", self.job.id, *urls[index], answer["error"])
            else:
                copied.add(index)
        if code != 0:
            log.warning("job %d: gfal2's copy of a batch ended with status %d: %s",
                        self.job.id, code, stderr)
        return copied

    def _log_batch(self, batch: list[int], rows: dict[int, DatasetFileRow],
                   urls: dict[int, tuple[str, str]], results: list[FileResult], params: Params,
                   began: float, duration_s: float, sharing: int) -> int:
        """One batch's run into the transfer log (what optimizers learn from); returns the
        bytes of the batch's files that are done."""
        done = [r for r in results if r.state is FileState.DONE]
        moved = sum(r.bytes_done for r in done)
        known = [size for i in batch if (size := rows[i].size_bytes) is not None]
        mean = sum(known) / len(known) if known else (moved / len(done) if done else 0.0)
        src, dest = urls[batch[0]]
        record = TransferRecord(
            time=began, src_host=parse_url(src).host or "localhost",
            dest_host=parse_url(dest).host or "localhost", rtt_s=self.rtt_s,
            bandwidth_bps=self.settings.link_mbps * 1e6,
            buffer_bytes=self.job.spec.options.tcp_buffer_bytes, file_size_bytes=float(mean),
            file_count=len(batch), cc=params.cc, p=params.p, pp=params.pp,
            fast=self.settings.dataset_fast, bytes_moved=moved, duration_s=round(duration_s, 6),
            throughput_mbps=round(moved * 8 / 1e6 / duration_s, 3) if duration_s > 0 else 0.0,
            sharing=sharing,
            outcome=COMPLETED if len(done) == len(batch) else "partial", job_id=self.job.id)
        try:
            self.store.add_transfers([record])
        except Exception:
            log.exception("job %d: cannot add a batch to the transfer log", self.job.id)
        return moved
