"""A dataset chunk sent through the transfer engine (`stork.engine`): calls of `cc` workers.

A chunk goes this way unless a probing optimizer tunes it or STORK_ENGINE = batch
(`stork.server.dataset_batches`): `cc` workers of the files' transfer module, each taking
its next call the moment its last ends (globus-url-copy over short lists; gfal2 for files
with a ``root://``, ``xroot://``, ``davs://``, ``dav://`` or ``https://`` end), each call's
files checked and committed by the worker that moved them while the others move on; with an
online optimizer (climb) a controller sets the engine while it runs
(`stork.server.flow_tuning`). A file of at least two ranges (`range_bytes`: 16 BDPs, at
least STORK_RANGE_MIN_MB) with GridFTP ends is sent as byte ranges written in place, unless
the destination is a sink or the job asks for checksums (of whole files): it is checked
when its last range lands, and a range that fails is sent again once, alone, a second
failure being its file's (its queued ranges withdrawn; FAILED, its partial destination
removed as its claim allows once none of its ranges is in flight). At the end of the queue
the engine cuts an item larger than its share (bytes queued over cc) into ranges (at least
STORK_PIECE_MIN_MB) as it is taken; a whole file cut so is claimed first, and is then a file
in ranges like the others. At the chunk's end each stretch of its flow at one setting and
load is a row of the transfer log. Everything per file (URLs, checks, the file sent alone,
the commit) is the pass's (`stork.server.dataset_run.DatasetRun`); this module only runs
engines and answers their calls.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Protocol

from stork.config import Settings
from stork.dataset.chunks import Chunk, Params
from stork.engine import Assembly, Engine, Flow, Taken, piece_bytes, plan_items, range_bytes
from stork.errors import RetryableTransferError
from stork.identity import RunAs
from stork.job import DatasetFileRow, FileState, Job
from stork.server.file_run import RANGE_RETRIES
from stork.server.flow_report import stretch_records
from stork.server.flow_tuning import HISTORY_ROWS, FlowTuner, Lead, climb_for
from stork.server.judge import judge_file
from stork.server.kept_ranges import KeptRanges
from stork.store.base import FileResult, JobStore
from stork.transfer import destination
from stork.transfer.base import TransferModule, TransferRequest
from stork.transfer.gfal import GfalModule
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.registry import through_gfal
from stork.transfer.worker import FileWork, Item, ItemResult, Setting, Worker, WorkerContext
from stork.tuning.base import DatasetDescription
from stork.urls import parse_url

if TYPE_CHECKING:
    from stork.tuning.online import Climb

log = logging.getLogger(__name__)


def of_file(index: int, item: Item) -> bool:
    return item.file.index == index


@dataclass
class Parts:
    """The byte ranges of an engine's large files: what landed (kept on the job as it
    lands), what was sent again, and the files judged in this pass (the engine's workers
    answer on their own threads)."""

    assembly: Assembly
    kept: KeptRanges
    retried: dict[tuple[int, int], int] = field(default_factory=dict)
    judged: set[int] = field(default_factory=set)  # their other ranges are not sent
    failed: dict[int, destination.Destination] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def land(self, item: Item) -> bool:
        """Record a landed range; True when its file is now whole."""
        index = item.file.index
        with self.lock:
            whole = self.assembly.land(item)
            self.kept.land(index, self.assembly.spans(index), whole)
            return whole

    def after_failure(self, item: Item) -> str:
        """What follows a failed range: "again" (sent again, once, alone), "judge" (a second
        failure: its file is judged, now and only once), "" (its file was already judged:
        its other ranges' answers change nothing)."""
        key, index = (item.file.index, item.offset), item.file.index
        with self.lock:
            if index in self.judged:
                return ""
            if self.retried.get(key, 0) < RANGE_RETRIES:
                self.retried[key] = self.retried.get(key, 0) + 1
                return "again"
            self.judged.add(index)
            return "judge"

    def add(self, file: FileWork, claim: destination.Destination) -> None:
        """A whole file cut into ranges at the end of the queue (`Engine`'s `on_split`),
        with its destination's claim: assembled and kept as a file planned in ranges."""
        with self.lock:
            if file.size_bytes is not None:
                self.assembly.sizes[file.index] = file.size_bytes
        self.kept.claim({file.index: claim})

    def fail(self, index: int) -> None:
        """A file FAILED on its ranges: its partial destination is removed once nothing of
        it is in flight (`claims`, when the engine has ended)."""
        if (kept := self.kept.get(index)) is not None:
            with self.lock:
                self.failed[index] = kept.claim


class FlowingPass(Protocol):
    """What a chunk's engines need of their pass (`stork.server.dataset_run.DatasetRun`).
    Named here, so that the pass imports this module and never the other way."""

    job: Job
    settings: Settings
    store: JobStore
    attempt_no: int
    run_as: RunAs | None
    rtt_s: float | None
    bdp: float
    kept: KeptRanges
    sink: destination.Destination | None
    module: GridFtpModule
    gfal: GfalModule
    meter: Flow
    out: BinaryIO | None
    err: BinaryIO | None

    @property
    def verify_checksum(self) -> bool: ...  # the job's, when its destination can be read back

    def clock(self) -> float: ...

    def stopped(self) -> bool: ...

    def sharing(self, src_url: str, dest_url: str) -> int: ...  # other jobs' transfers

    def known_load(self, src_url: str, dest_url: str) -> int: ...

    def chunks_share_path(self, chunk: Chunk) -> bool: ...

    def leads_path(self, chunk: Chunk) -> bool: ...

    def path_company(self, chunk: Chunk) -> list[Flow]: ...

    def file_urls(self, row: DatasetFileRow, attempt_no: int) -> tuple[str, str]: ...

    def request(self, src: str, dest: str, streams: int) -> TransferRequest: ...

    def add_engine(self, engine: Engine, chunk: Chunk) -> bool: ...

    def discard_engine(self, engine: Engine) -> None: ...

    def check(self, batch: list[int], rows: dict[int, DatasetFileRow],
              urls: dict[int, tuple[str, str]], clean: set[int], streams: int
              ) -> list[FileResult]: ...

    def release(self, indexes: list[int]) -> None: ...

    def abandon(self, taken: Taken, results: list[ItemResult], done: set[int] | None
                ) -> None: ...

    def commit(self, results: list[FileResult]) -> bool: ...

    def remove_partial(self, claim: destination.Destination) -> None: ...


class Flows:
    """A pass's chunks sent through the transfer engine; one per pass."""

    def __init__(self, run: FlowingPass) -> None:
        self.run = run
        self.job, self.settings, self.store = run.job, run.settings, run.store

    def flow(self, chunk: Chunk, rows: dict[int, DatasetFileRow], queue: list[int],
             params: Params, *, tuned: bool = False) -> None:
        """The chunk's files through the transfer engine (`stork.engine`): `params.cc`
        workers of the files' transfer module, each taking its next call the moment its
        last one ends, and each call's files checked and committed by the worker that moved
        them while the others move on (`_called`). Files with an XRootD or WebDAV end go to
        gfal2 workers, the others to globus-url-copy workers. `tuned`: an online optimizer
        sets the engine while it runs (`stork.server.flow_tuning`)."""
        run = self.run
        urls = {i: run.file_urls(rows[i], rows[i].attempts + 1) for i in queue}
        label = f"{chunk.size_class.value} {params.label()}"
        for gfal in (False, True):
            files = [FileWork(i, *urls[i], rows[i].size_bytes) for i in queue
                     if through_gfal(*urls[i]) is gfal]
            if files and not run.stopped():
                climb = self._climb(chunk, files, params) if tuned else None
                self._run_engine(run.gfal if gfal else run.module, files, params, rows, urls,
                                 label, chunk, climb)

    def _climb(self, chunk: Chunk, files: list[FileWork],
               params: Params) -> tuple[Climb, str]:
        """The chunk's controller, its prior from the path's history at the load of other
        jobs alone (it is stepped only once this pass's other chunks have ended)."""
        run = self.run
        src, dest = files[0].src_url, files[0].dest_url
        load = run.sharing(src, dest)
        known = [f.size_bytes for f in files if f.size_bytes is not None]
        dataset = DatasetDescription.of(
            sum(known) / len(known) if known else 0.0, len(files), rtt_s=run.rtt_s,
            bandwidth_bps=self.settings.link_mbps * 1e6,
            buffer_bytes=self.job.spec.options.tcp_buffer_bytes,
            src_host=parse_url(src).host or "localhost",
            dest_host=parse_url(dest).host or "localhost", known_load=load)
        return climb_for(self.store.transfers(limit=HISTORY_ROWS),
                         Setting(params.cc, params.p, params.pp), src_url=src, dest_url=dest,
                         cls=chunk.size_class, bdp_bytes=run.bdp, load=load, items=len(files),
                         name=self.job.spec.optimizer or self.settings.eos_optimizer,
                         dataset=dataset, settings=self.settings)

    def _run_engine(self, module: TransferModule, files: list[FileWork], params: Params,
                    rows: dict[int, DatasetFileRow], urls: dict[int, tuple[str, str]],
                    label: str, chunk: Chunk, climb: tuple[Climb, str] | None = None
                    ) -> None:
        """`files` through an engine of `module`'s workers, stopped with the pass; with
        `climb` (a controller and why its prior), started at its prior and tuned, holding
        `chunk`'s preset while another chunk shares the path (the pass's
        `chunks_share_path`), unless it leads the path then (`leads_path`: tuned on the
        job's total, `flow_tuning.Lead`)."""
        run = self.run
        spec = self.job.spec
        context = WorkerContext(
            run_as=run.run_as,
            env=module.environment(run.request(spec.src_url, spec.dest_url, 1)),
            fast=self.settings.dataset_fast, tcp_buffer_bytes=spec.options.tcp_buffer_bytes,
            block_size_bytes=spec.options.block_size_bytes,
            verify_checksum=run.verify_checksum, stdout=run.out, stderr=run.err)

        def new_worker() -> Worker:
            worker = module.worker(context)
            assert worker is not None, f"{module.name} has no engine worker"
            return worker

        def on_take(taken: Taken) -> None:
            indexes = [i.file.index for i in taken.items]
            self.store.start_files(self.job.id, run.attempt_no, indexes, label)

        setting = climb[0].prior if climb else Setting(params.cc, params.p, params.pp)
        items, parts = self._parts(files, module)
        pieces = self._piece_size(module)  # 0: this pass cuts nothing
        engine = Engine(items, new_worker, setting,
                        lambda taken, results: self._called(engine, results, rows, urls, parts,
                                                            taken),
                        on_take=on_take, meter=run.meter,
                        cut_stragglers=run.sink is None,  # a sink takes its bytes once
                        piece_bytes=pieces,
                        short_piece_bytes=pieces and self.settings.piece_min_mb << 20,
                        on_split=lambda item: parts.add(
                            item.file, destination.claim(item.file.dest_url, run.run_as)))
        if not run.add_engine(engine, chunk):
            return
        tuner = None if climb is None else FlowTuner(
            engine, climb[0], what=label.split(maxsplit=1)[0], prior_reason=climb[1],
            write_result=lambda d: self.store.update_result(self.job.id, d),
            shared=lambda: run.chunks_share_path(chunk),
            hold=Setting(params.cc, params.p, params.pp),
            lead=Lead(lambda: run.leads_path(chunk), lambda: run.path_company(chunk)))
        if tuner is not None:
            tuner.start()
        try:
            engine.run()
        finally:
            if tuner is not None:
                tuner.stop()
            run.discard_engine(engine)
            for claim in parts.failed.values():  # nothing of theirs is in flight now
                run.remove_partial(claim)
            self._log_flow(engine, files, tuner)

    def _parts(self, files: list[FileWork], module: TransferModule) -> tuple[list[Item], Parts]:
        """The engine's items (the ranges an earlier pass kept left out) and their record;
        each file newly sent as ranges claimed first (`destination.claim`), so that only
        what its ranges wrote is removed if it fails for good."""
        run = self.run
        landed = run.kept.landed()
        items = plan_items(files, self._range_size(module), landed)
        parts = Parts(Assembly.of(items, landed), run.kept)
        fresh = {i.file.index: i.file.dest_url for i in items
                 if i.is_range and i.file.index not in landed}
        run.kept.claim({index: destination.claim(url, run.run_as)
                        for index, url in fresh.items()})
        if parts.assembly.sizes:
            self.store.update_result(self.job.id, {"dataset_files_as_ranges": len(
                parts.assembly.sizes)})
        return items, parts

    def _log_flow(self, engine: Engine, files: list[FileWork],
                  tuner: FlowTuner | None = None) -> None:
        """The engine's flow into the transfer log (what optimizers learn from): one row
        per stretch at one setting and load, its mean rate over its whole span; of a tuned
        flow, what its tuner measured at each setting."""
        run = self.run
        known = [f.size_bytes for f in files if f.size_bytes is not None]
        now = time.monotonic()
        records = stretch_records(
            engine.flow.stretches(now) if tuner is None else tuner.stretches(),
            now_mono=now, now_wall=run.clock(),
            src_url=files[0].src_url, dest_url=files[0].dest_url, rtt_s=run.rtt_s,
            link_mbps=self.settings.link_mbps, buffer_bytes=self.job.spec.options.tcp_buffer_bytes,
            file_bytes=sum(known) / len(known) if known else 0.0, fast=self.settings.dataset_fast,
            job_id=self.job.id)
        try:
            self.store.add_transfers(records)
        except Exception:
            log.exception("job %d: cannot add the flow to the transfer log", self.job.id)

    def _range_size(self, module: TransferModule) -> int:
        """The range a large file of this pass is sent in (0: whole files): GridFTP ends
        write ranges in place; a sink takes its bytes in order, and a checksum the job asks
        for is of whole files."""
        run = self.run
        if not module.writes_ranges or run.sink is not None or self.job.spec.verify_checksum:
            return 0
        return run.kept.choose_size(range_bytes(run.bdp, self.settings.range_min_mb << 20))

    def _piece_size(self, module: TransferModule) -> int:
        """The least piece the engine cuts an item into at the end of the queue (0: none):
        where this pass sends ranges, 16 BDPs and at least STORK_PIECE_MIN_MB."""
        if not self._range_size(module):
            return 0
        return piece_bytes(self.run.bdp, self.settings.piece_min_mb)

    def _called(self, engine: Engine, results: list[ItemResult],
                rows: dict[int, DatasetFileRow], urls: dict[int, tuple[str, str]],
                parts: Parts, taken: Taken) -> None:
        """One engine call's files: checked (those not right sent again alone) and committed,
        as a batch's are; the flow's load brought up to date. A call of a byte range: the
        range kept as landed, its file checked when its last range lands; a range that
        failed is sent again once, alone, and a second failure is its file's."""
        run = self.run
        if run.stopped():
            run.release(list(dict.fromkeys(r.item.file.index for r in results)))
            run.abandon(taken, results, None)
            return
        whole = [r for r in results if not r.item.is_range]
        batch = [r.item.file.index for r in whole]
        clean = {r.item.file.index for r in whole if r.ok}
        for r in whole:
            if not r.ok:  # its error is said here: the file's own, sent alone, decides
                log.info("job %d: %s %s in its call (%s); checked, and sent again alone "
                         "unless it landed", self.job.id, urls[r.item.file.index][0],
                         "failed" if r.ok is False else "was not answered",
                         r.failure or "the worker ended")
        failed: list[FileResult] = []
        for r in results:
            index = r.item.file.index
            if not r.item.is_range:
                continue
            if r.ok and parts.land(r.item):
                batch.append(index)
                clean.add(index)
            elif r.ok is False and (then := parts.after_failure(r.item)) == "again":
                log.info("job %d: range %d+%s of %s failed (%s); sent again", self.job.id,
                         r.item.offset, r.item.length, urls[index][0], r.failure)
                engine.add([r.item])
            elif r.ok is False and then == "judge":
                verdict = judge_file(self.job, index, rows[index].failures,
                                     r.failure or RetryableTransferError(
                                         f"range {r.item.offset}+{r.item.length} of "
                                         f"{urls[index][0]} was not sent"),
                                     self.settings, run.clock())
                engine.withdraw(functools.partial(of_file, index))
                if verdict.state is FileState.FAILED:
                    parts.fail(index)
                failed.append(verdict)
        if failed:
            run.commit(failed)
        if not batch:
            return
        checked = run.check(batch, rows, urls, clean, engine.setting.p)
        if run.stopped():  # stopped during a file sent alone
            done = {r.index for r in checked if r.state is FileState.DONE}
            run.release([i for i in batch if i not in done])
            run.abandon(taken, results, done)
            checked = [r for r in checked if r.index in done]
        if not run.commit(checked):  # the job no longer runs this attempt (stork_rm
            # may have marked it REMOVED before the pass heard): nothing of it was recorded
            run.abandon(taken, results, None)
        engine.flow.set_load(time.monotonic(), run.known_load(*urls[batch[0]]))
