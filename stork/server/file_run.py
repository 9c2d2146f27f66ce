"""One attempt of a large single file through the transfer engine: its byte ranges in flight.

A file of at least two ranges (`stork.engine.items.range_bytes`: 16 bandwidth-delay products
of the path, at least STORK_RANGE_MIN_MB) whose module has an engine worker that writes
ranges in place (GridFTP: ``-partial-offset``/``-partial-length``) is sent as ranges by `cc`
workers, each taking the next range the moment its last one lands, so the flow never drains
between pieces. Without ``-cc`` on the job, RANGE_WORKERS (4) ranges are kept in flight and the
job's streams are split between them (``-p 32``: four ranges of 8 streams; never more ranges than
streams); with ``-cc C``, C ranges of ``-p`` streams each, as for a dataset.

Why four: in the (cc, p) grids of files of 1 to 3 GB in ../shared/data/transfer-logs/harp-grids
(Stampede-Gordon 40 ms, Blacklight-Trestles 80 ms), with the total of streams held at 16, 32 or
64, four transfers in flight beat two in 14 of 15 comparisons and eight in 12 of 15
(`bench/bench_layout.py`). Those grids chose it; the testbed's runs only report it
(docs/BENCHMARKS.md 15.14).

Each range that lands is kept on the job (`ranges_landed`, merged spans, with the range
size), so an attempt after a daemon that died (kill -9) sends only what had not landed: the
ranges in flight then are sent again, nothing else. A range that fails is sent again once,
alone; a second failure ends the attempt with that range's error (the job's retry rules then
apply to the whole file). When every byte has landed the attempt ends as a tool that exited
0 would, and the destination is verified whole (size, and the checksum the job asks for).

A file that turns out smaller than two ranges (or whose size the source does not tell) runs
as before: one run of the module's command (`AttemptProcess`).

The interface is `AttemptProcess`'s (`start`, `kill`, `pid`, `start_time`, `on_progress`,
`on_exit`), so `Attempts` launches, stops and judges both alike.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from stork.config import Settings
from stork.dataset.chunks import SizeClass, default_params, streams_to_fill
from stork.engine import Assembly, Engine, piece_bytes, plan_items, range_bytes, series_flow
from stork.engine.items import Span, covered, merged
from stork.errors import IdentityError, RetryableTransferError, TransferError
from stork.identity import RunAs
from stork.server.flow_report import FlowReport, stretch_records
from stork.server.flow_tuning import FlowTuner, climb_for, shortest_tuned_s, untuned_setting
from stork.server.runner import AttemptProcess, AttemptResult, StopReason, open_output
from stork.transfer import verify
from stork.transfer.base import Progress, TransferModule, TransferRequest
from stork.transfer.remote import RemoteEnds
from stork.transfer.worker import FileWork, Item, ItemResult, Setting, Worker, WorkerContext
from stork.translog import TransferRecord
from stork.tuning.base import DatasetDescription
from stork.urls import parse_url

log = logging.getLogger(__name__)

LANDED_KEY = "ranges_landed"  # the job's result: merged [start, end) spans of the file
RANGE_KEY = "range_bytes"  # the range size they were sent in
RANGE_WORKERS = 4  # ranges in flight for a job without -cc (chosen on the harp grids)
RANGE_RETRIES = 1  # a failed range is sent again this many times, alone


def landed_of(result: dict[str, Any]) -> tuple[list[Span], int | None]:
    """The spans a job's result says landed and their range size (none when it says nothing
    readable)."""
    spans, size = result.get(LANDED_KEY), result.get(RANGE_KEY)
    if not isinstance(spans, list) or not isinstance(size, int):
        return [], None
    try:
        return merged((int(s), int(e)) for s, e in spans), size
    except (TypeError, ValueError):
        return [], None


def file_preset(size: int | None, range_size: int, bdp_bytes: float) -> Setting:
    """The large-file preset a tuned single file starts from when the job gives no -p or -cc:
    a file of two ranges or more (`split`) as `default_params(LARGE, range_size)`'s cc ranges
    of p streams each; a smaller one (or of unknown size) sent whole with as many streams
    (cc x p of the preset for its size: what its ranges would have started with), but no
    more than fill the path (`streams_to_fill`: a range in flight keeps a stream of its own,
    one file sent whole does not need them)."""
    if size is not None and range_size > 0 and size >= 2 * range_size:
        p = default_params(SizeClass.LARGE, range_size, bdp_bytes)
        return Setting(p.cc, p.p, p.pp)
    p = default_params(SizeClass.LARGE, float(size) if size else 4 * bdp_bytes, bdp_bytes)
    return Setting(1, min(p.cc * p.p, streams_to_fill(bdp_bytes) or p.cc * p.p), 1)


def range_setting(streams: int, concurrency: int | None) -> Setting:
    """The engine's setting for a file sent as ranges: with the job's -cc, that many ranges
    of `streams` each; without, RANGE_WORKERS ranges sharing `streams`."""
    if concurrency:
        return Setting(concurrency, streams, 1)
    cc = max(1, min(RANGE_WORKERS, streams))
    return Setting(cc, math.ceil(streams / cc), 1)


class FileRun:
    def __init__(self, job_id: int, request: TransferRequest, module: TransferModule, *,
                 settings: Settings, run_as: RunAs | None, landed: list[Span],
                 range_size: int | None,
                 output: str | None, err: str | None,
                 write_result: Callable[[dict[str, Any]], None],
                 rtt_s: Callable[[], float | None],
                 on_progress: Callable[[Progress], None],
                 on_exit: Callable[[AttemptResult], None],
                 on_pid: Callable[[int], None] | None = None,
                 add_transfers: Callable[[list[TransferRecord]], object] | None = None,
                 history: Callable[[], list[TransferRecord]] | None = None,
                 controller: str = "climb") -> None:
        self.job_id = job_id
        self.request = request
        self.module = module
        self.settings = settings
        self.run_as = run_as
        self.landed = landed  # spans an attempt before this one landed
        self.range_size = range_size  # the range size they were sent in
        self.output, self.err = output, err
        self._write_result = write_result
        self._rtt_s = rtt_s
        self._on_progress = on_progress
        self._on_exit = on_exit
        self._on_pid = on_pid
        self._add_transfers = add_transfers  # the flow's stretches into the transfer log
        self._history = history  # given: the job is tuned online (`flow_tuning`)
        self.controller = controller  # which (`stork.tuning.CONTROLLERS`)
        self.logged_flow = False
        self._lock = threading.Lock()
        self._landing = threading.Lock()  # a landed range and its record, one at a time
        self._stop: StopReason | None = None
        self._engine: Engine | None = None
        self._whole: AttemptProcess | None = None  # a file too small for ranges
        self._failure: TransferError | None = None
        self._retried: dict[int, int] = {}  # range offset -> times sent again
        self.meter = series_flow(time.monotonic())
        self.start_time = time.monotonic()

    # -- the interface of an attempt's process --------------------------------------------

    @property
    def pid(self) -> int | None:
        whole = self._whole
        return whole.pid if whole is not None else None

    def start(self) -> None:
        self.start_time = time.monotonic()
        threading.Thread(target=self._run, name=f"file-{self.job_id}", daemon=True).start()

    def kill(self, reason: StopReason) -> None:
        with self._lock:
            if self._stop is None:
                self._stop = reason
            engine, whole = self._engine, self._whole
        if engine is not None:
            engine.stop()
        if whole is not None:
            whole.kill(reason)

    def stopped(self) -> bool:
        with self._lock:
            return self._stop is not None

    # -- the attempt ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            result = self._attempt()
        except Exception as exc:  # never leave the attempt without an end (its slot)
            log.exception("job %d: the ranges failed inside stork_server", self.job_id)
            result = AttemptResult(1, f"stork_server could not run the attempt: {exc}", 0,
                                   time.monotonic() - self.start_time)
        if result is not None:
            self._on_exit(result)

    def _attempt(self) -> AttemptResult | None:
        """The attempt's end (None: it went to a whole-file run, which ends by itself)."""
        src, dest = self.request.src_url, self.request.dest_url
        size = verify.size_asked_twice(src, RemoteEnds(
            x509proxy=self.request.x509proxy, run_as=self.run_as,
            tokens=self.request.tokens, src_url=src, dest_url=dest))
        range_size = self.range_size if self.landed and self.range_size else \
            range_bytes(self._bdp(), self.settings.range_min_mb << 20)
        items = plan_items([FileWork(0, src, dest, size)], range_size, {0: self.landed})
        if size is None or (not any(i.is_range for i in items) and not self.landed):
            self._run_whole(size)
            return None
        self._write_result({RANGE_KEY: range_size})
        with ExitStack() as files:
            try:
                context = self._context(files)
            except IdentityError as exc:
                return AttemptResult(1, str(exc), 0, 0.0)
            return self._ranges(items, size, range_size, context)

    def _run_whole(self, size: int | None) -> None:
        request = self.request
        if self._history is not None and request.options.streams is None:
            request = self._whole_tuned(size)
        argv = self.module.command(request)
        log.info("job %d: smaller than two ranges, sent whole: %s", self.job_id, " ".join(argv))
        whole = AttemptProcess(argv, output=self.output,
                               err=self.err, env=self.module.environment(request),
                               run_as=self.run_as, on_progress=self._on_progress,
                               on_exit=self._on_exit, on_pid=self._on_pid)
        with self._lock:
            self._whole = whole
            stop = self._stop
        if stop is not None:
            whole.kill(stop)  # stopped before it started: it never runs
        whole.start()

    def _whole_tuned(self, size: int | None) -> TransferRequest:
        """A tuned file too small for two ranges has no flow to tune: it is sent whole with
        the large-file preset's streams (cc x p: what its ranges would have started with;
        the EOS's answer for a file too short to sample was its default of as many), and the
        job's ad says so."""
        streams = file_preset(size, 0, self._bdp()).p
        what = f"smaller than two ranges ({size} bytes)" if size is not None else \
            "its size not told by the source"
        self._untuned(Setting(1, streams, 1), f"{what}: sent whole, with the large-file "
                                              f"preset's {streams} streams (cc x p)")
        return dataclasses.replace(self.request, default_streams=streams)

    def _untuned(self, setting: Setting, why: str) -> None:
        """The record of a file its optimizer does not tune (as a tuned one's, no change)."""
        label = setting.label()
        self._write_result({"optimizer_file": {
            "optimizer": self.controller, "prior": label, "start": label, "setting": label,
            "changes": [], "change_count": 0, "holding": True, "prior_reason": why}})

    def _context(self, files: ExitStack) -> WorkerContext:
        options = self.request.options
        return WorkerContext(
            run_as=self.run_as, env=self.module.environment(self.request),
            tcp_buffer_bytes=options.tcp_buffer_bytes, block_size_bytes=options.block_size_bytes,
            stdout=open_output(self.run_as, self.output, files),
            stderr=open_output(self.run_as, self.err, files))

    def _ranges(self, items: list[Item], size: int, range_size: int,
                context: WorkerContext) -> AttemptResult:
        options = self.request.options
        setting = range_setting(options.streams or self.request.default_streams,
                                options.concurrency)
        assembly = Assembly.of(items, {0: self.landed})
        before = assembly.bytes_landed(0)
        log.info("job %d: %d bytes as %d ranges of %d bytes (%d landed before), %s",
                 self.job_id, size, len(items), range_size, before, setting.label())

        def new_worker() -> Worker:
            worker = self.module.worker(context)
            assert worker is not None and worker.writes_ranges, f"{self.module.name}: no ranges"
            return worker

        climb = None
        if self._history is not None:
            bdp = self._bdp()
            preset = setting  # the job's own -p / -cc; without them the large-file preset
            if options.streams is None and options.concurrency is None:
                preset = file_preset(size, range_size, bdp)
            src, dest = self.request.src_url, self.request.dest_url
            dataset = DatasetDescription.of(
                float(size), 1, rtt_s=self._rtt_s(), bandwidth_bps=self.settings.link_mbps * 1e6,
                buffer_bytes=options.tcp_buffer_bytes,
                src_host=parse_url(src).host or "localhost",
                dest_host=parse_url(dest).host or "localhost")
            climb = climb_for(self._history(), preset, src_url=src, dest_url=dest,
                              cls=SizeClass.LARGE, bdp_bytes=bdp, load=0, items=len(items),
                              name=self.controller, dataset=dataset, settings=self.settings)
            setting = climb[0].prior
            # a file too short to repay a try is not tuned (the EOS does not sample one
            # either): its time at the best rate the path's history holds, else at
            # STORK_LINK_MBPS
            rate = max((m.mean for m in climb[0].known.values()),
                       default=self.settings.link_mbps)
            predicted_s = (size - before) * 8 / 1e6 / rate if rate > 0 else math.inf
            shortest_s = shortest_tuned_s(self.settings.eos_sampling_budget)
            if predicted_s < shortest_s:
                setting, why = untuned_setting(climb[0], preset)
                self._untuned(setting, (
                    f"not tuned: {predicted_s:.0f} s at {rate:.0f} Mbit/s is shorter than "
                    f"{shortest_s:.0f} s, where one try would pass EOS_SAMPLING_BUDGET "
                    f"({self.settings.eos_sampling_budget:g}) of it; {why}"))
                climb = None
        engine = Engine(items, new_worker, setting,
                        lambda taken, results: self._landed(engine, assembly, results),
                        meter=self.meter,
                        piece_bytes=piece_bytes(self._bdp(), self.settings.piece_min_mb),
                        short_piece_bytes=self.settings.piece_min_mb << 20)
        with self._lock:
            if self._stop is not None:
                return self._stopped(before)
            self._engine = engine
        report = FlowReport(self.meter, self._write_result,
                            on_report=lambda: self._progress(assembly, before)).start()
        tuner = None if climb is None else FlowTuner(
            engine, climb[0], what="file", prior_reason=climb[1],
            write_result=self._write_result).start()
        try:
            engine.run()
        finally:
            report.stop()
            if tuner is not None:
                tuner.stop()
            self._log_flow(engine, size, tuner)
        done = assembly.bytes_landed(0)
        seconds = time.monotonic() - self.start_time
        if self.stopped():
            return self._stopped(done)
        failure = self._failure
        if failure is None and not covered(assembly.spans(0), 0, size):  # never a hole
            failure = RetryableTransferError(
                f"{size - done} bytes of the file were not sent (no range answered for "
                f"them)")
        ran = engine.setting.cc * engine.setting.p  # the ranges in flight at the end, each p
        if failure is not None:
            return AttemptResult(1, str(failure), done - before, seconds, failure=failure,
                                 streams=ran)
        return AttemptResult(0, "", done - before, seconds, streams=ran)

    def _bdp(self) -> float:
        return self.settings.link_mbps * 1e6 / 8 * (self._rtt_s() or 0.0)

    def _log_flow(self, engine: Engine, size: int, tuner: FlowTuner | None) -> None:
        """The ranges' flow into the transfer log: one row per stretch at one setting (of a
        tuned flow, what its tuner measured at each)."""
        if self._add_transfers is None:
            return
        now = time.monotonic()
        records = stretch_records(
            engine.flow.stretches(now) if tuner is None else tuner.stretches(),
            now_mono=now, now_wall=time.time(),
            src_url=self.request.src_url, dest_url=self.request.dest_url, rtt_s=self._rtt_s(),
            link_mbps=self.settings.link_mbps,
            buffer_bytes=self.request.options.tcp_buffer_bytes, file_bytes=float(size),
            fast=False, job_id=self.job_id)
        try:
            self._add_transfers(records)
            self.logged_flow = True
        except Exception:
            log.exception("job %d: cannot add the flow to the transfer log", self.job_id)

    def _stopped(self, done: int) -> AttemptResult:
        assert self._stop is not None
        return AttemptResult(143, f"stopped: {self._stop.value}", done,
                             time.monotonic() - self.start_time, self._stop)

    def _landed(self, engine: Engine, assembly: Assembly, results: list[ItemResult]) -> None:
        """A call's answer: a landed range kept on the job; a failed one sent again once,
        alone, then the attempt's end."""
        for result in results:
            item = result.item
            if result.ok:
                with self._landing:  # the workers answer on their own threads: the spans
                    assembly.land(item)  # written last are the most that landed
                    self._write_result({LANDED_KEY: [list(s) for s in assembly.spans(0)]})
            elif result.ok is False:
                tries = self._retried.get(item.offset, 0)
                if tries < RANGE_RETRIES and not self.stopped():
                    self._retried[item.offset] = tries + 1
                    log.info("job %d: range %d+%s failed (%s); sent again", self.job_id,
                             item.offset, item.length, result.failure)
                    engine.add([item])
                else:
                    self._failure = result.failure or RetryableTransferError(
                        f"range {item.offset}+{item.length} was not sent")
                    engine.stop()

    def _progress(self, assembly: Assembly, before: int) -> None:
        """The bytes moved (landed before this attempt, and what the tools said since) and
        the rate of the last few windows."""
        recent = self.meter.windows()[-3:]
        seconds = sum(w.seconds for w in recent)
        rate = sum(w.bytes for w in recent) * 8 / 1e6 / seconds if seconds > 0 else 0.0
        size = assembly.sizes.get(0, 0)
        self._on_progress(Progress(min(before + int(self.meter.total_bytes), size), rate))
