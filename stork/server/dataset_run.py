"""One attempt of a dataset job: its due files sent in chunks, each file's end recorded.

The attempt (a *pass*) runs on its own thread:

1. A dataset that was not listed at submission (a remote directory or glob) is listed now,
   by the daemon for the job's owner (`stork.dataset.list_dataset`, the job's proxy for
   gsiftp), and its files stored.
2. Files left *in doubt* by a daemon that died while they were being sent are looked at
   before anything is resent: a destination of the source's size whose MD5 matches the
   source's is done; anything else is sent again (from the start: never left short). A
   large file whose ranges an earlier pass kept on the job (`stork.server.kept_ranges`,
   after a kill -9 or on the node that took the job over) sends only the ranges that had
   not landed, when its destination is still the file they landed in.
3. The due files (PENDING, retry time come) are split into chunks by size class
   (`stork.dataset.chunks`); chunks run at the same time, each through the transfer engine
   (`stork.engine`: `cc` workers of the files' module, each taking its next call the moment
   its last ends; globus-url-copy over short lists, gfal2 for files with a ``root://``,
   ``xroot://``, ``davs://``, ``dav://`` or ``https://`` end), as the job's owner with its
   proxy; a large file with GridFTP ends goes as byte ranges written in place, and the
   engine cuts what is left at the end of the queue into ranges (`stork.server.dataset_flow`).
   With a probing optimizer, or STORK_ENGINE = batch, a chunk is sent in batches instead,
   one run of the tools per batch (`stork.server.dataset_batches`).
4. After each call (or run) its files are checked: a destination of the source's size
   is done (sizes from the listing; destinations stat'ed, or listed once per directory on
   FTP and GridFTP servers, the latter through gfal2 as the owner with the job's proxy;
   XRootD and WebDAV ones stat'ed through gfal2 in one child);
   when sizes cannot be had, the tool's exit status speaks for the batch (gfal2's copy:
   each file's own answer). A
   file that is not done is sent again *alone* at once, with its own command line: its own
   error decides (`GridFtpModule.judge`), and the job's retry rules apply to the file
   (retried in a later pass after STORK_RETRY_DELAY, or FAILED). Its partial destination is
   removed with the owner's rights.
5. The batch's results are committed in one transaction (`JobStore.finish_files`), so a
   daemon killed mid-dataset resends at most the batches that were running.

When it is stopped (stork_rm, shutdown, STORK_MAXDELAY_INMINUTES) the running children
get SIGTERM, the running batch's files go back to PENDING, and no further batch starts. On
stork_rm what the engine's calls in flight wrote is removed once every chunk has ended, as a
single file's partial destination is (`_remove_abandoned`): their local files written since
the call began, and the files sent as ranges that are not whole, by their claims; files DONE
stay, and so does a remote destination of a whole file (it has no claim).
`DatasetOutcome` tells `judge.judge_dataset` what happened; the job's state then follows
from its files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import BinaryIO

from stork.config import Settings
from stork.dataset import DatasetError, DatasetUnreachable
from stork.dataset.chunks import Chunk, plan_chunks
from stork.dataset.expand import list_dataset
from stork.dataset.sizes import dest_sizes
from stork.engine import Engine, Taken, series_flow
from stork.engine.flow import Flow
from stork.errors import (
    IdentityError,
    PermanentTransferError,
    RetryableTransferError,
    TransferError,
)
from stork.identity import RunAs, open_as
from stork.job import DatasetFileRow, FileState, Job
from stork.process import Child
from stork.server.dataset_batches import Batches
from stork.server.dataset_flow import Flows
from stork.server.flow_report import FlowReport
from stork.server.flow_tuning import shares_path, tunes_online
from stork.server.judge import DatasetOutcome, judge_file
from stork.server.kept_ranges import KeptRanges, worth_keeping
from stork.server.runner import StopReason
from stork.store.base import FileResult, JobStore
from stork.transfer import destination, verify
from stork.transfer.base import TransferModule, TransferRequest
from stork.transfer.gfal import GfalModule
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.localfacts import local_facts
from stork.transfer.registry import through_gfal
from stork.transfer.remote import RemoteEnds, common_checksum
from stork.transfer.rtt import network_end, path_rtt_s
from stork.transfer.tokens import NO_TOKENS, TokenFacts
from stork.transfer.worker import ItemResult, Marks
from stork.urls import parse_url, with_scheme

log = logging.getLogger(__name__)

# what size classes assume when a server cannot be reached to time a connect (the transfer
# log then records the RTT as unknown)
RTT_UNKNOWN_S = 0.05


def file_urls(src_url: str, dest_url: str, alt_protocols: tuple[tuple[str, str], ...],
              attempt_no: int) -> tuple[str, str]:
    """A file's URLs for its attempt `attempt_no` (1-based): alt_protocols cycle after the
    original, as for single-file jobs."""
    index = (attempt_no - 1) % (len(alt_protocols) + 1)
    if index == 0:
        return src_url, dest_url
    a, b = alt_protocols[index - 1]
    return with_scheme(src_url, a), with_scheme(dest_url, b)


def round_trip_s(urls: list[str]) -> float | None:
    """The path's round trip (`stork.transfer.rtt.path_rtt_s`: the longer leg's shortest of
    a few TCP connects, so that one connect delayed by a lost SYN or by the scheduler is not
    taken for the path: a single connect read 1046 ms on the 20 ms lossy20 path, and
    10.3-11.1 ms on lan10, where 256 KiB files sit at the bandwidth-delay product and
    changed size class from job to job; docs/BENCHMARKS.md 15.37); 1e-4 for a pass with no
    server at all (both ends on this machine), None when a server did not answer (the
    longer leg may be the one missing)."""
    if all(network_end(url) is None for url in urls):
        return 1e-4  # both ends on this machine
    seconds = path_rtt_s(urls)
    return None if seconds is None else max(seconds, 1e-4)


class DatasetRun:
    """One pass of a dataset job; the interface `Attempts` expects of an attempt's process
    (`start`, `kill`, `start_time`, `pid`)."""

    def __init__(self, job: Job, attempt_no: int, *, store: JobStore, settings: Settings,
                 module: GridFtpModule, run_as: RunAs | None,
                 on_exit: Callable[[DatasetOutcome], None],
                 clock: Callable[[], float] = time.time,
                 sharing: Callable[[str, str], int] | None = None,
                 tokens: TokenFacts = NO_TOKENS) -> None:
        self.job = job
        self.tokens = tokens  # the job's bearer tokens, read when the pass was planned
        self.attempt_no = attempt_no
        self.store = store
        self.settings = settings
        self.module = module
        self.gfal = GfalModule()  # files with an XRootD or WebDAV end
        self.run_as = run_as
        # remote ends as the job's owner with its proxy and tokens (sizes, checksums, clean-up)
        self.ends = RemoteEnds(x509proxy=job.spec.x509proxy, run_as=run_as,
                               tokens=job.spec.bearer_tokens, src_url=job.spec.src_url,
                               dest_url=job.spec.dest_url)
        self._on_exit = on_exit
        self.clock = clock
        self.sharing = sharing or (lambda src, dest: 0)
        self.rtt_s: float | None = None
        self.bdp = 0.0  # the path's bandwidth-delay product at the pass's start
        # what of its large files earlier passes landed as ranges (kept on the job)
        self.kept = KeptRanges.of(job.result, lambda d: store.update_result(job.id, d))
        # a dataset into a device or a FIFO: every file goes into it (`_sink`, each pass)
        self.sink: destination.Destination | None = None
        self._running: list[Chunk] = []  # the chunks of this pass running now
        self.start_time = time.monotonic()
        self.pid: int | None = None
        self._lock = threading.Lock()
        self.batches = Batches(self)  # chunks sent the older way (probing optimizers)
        self.flows = Flows(self)  # chunks through the transfer engine
        self._children: set[Child] = set()
        self._engines: dict[Engine, Chunk] = {}  # this pass's engines running, and their chunks
        self.meter = series_flow(time.monotonic())  # the pass's flow over all its engines and runs
        self._stop: StopReason | None = None
        self._abandoned: list[tuple[str, float]] = []  # stork_rm: (destination, call began)
        self._moved = 0
        self._done = 0
        self._files: ExitStack = ExitStack()
        self.out: BinaryIO | None = None
        self.err: BinaryIO | None = None

    # -- the interface of an attempt's process --------------------------------------------

    def start(self) -> None:
        self.start_time = time.monotonic()
        threading.Thread(target=self._run, name=f"dataset-{self.job.id}", daemon=True).start()

    def kill(self, reason: StopReason) -> None:
        with self._lock:
            if self._stop is None:
                self._stop = reason
            children = list(self._children)
            engines = list(self._engines)
        for engine in engines:
            engine.stop()
        for child in children:
            child.stop(reason.value)

    def stopped(self) -> bool:
        with self._lock:
            return self._stop is not None

    # -- the pass -------------------------------------------------------------------------

    def _run(self) -> None:
        outcome = DatasetOutcome()
        try:
            with self._files:
                self._open_outputs()
                report = FlowReport(self.meter, lambda d: self.store.update_result(
                    self.job.id, d)).start()
                try:
                    outcome = self._pass()
                    if self._stop is StopReason.REMOVED:
                        self._remove_abandoned()
                finally:
                    report.stop()
        except Exception as exc:
            log.exception("job %d: the dataset pass failed inside stork_server", self.job.id)
            outcome = DatasetOutcome(internal_error=f"stork_server could not run the "
                                                    f"dataset: {exc}")
        outcome.stopped = self._stop
        outcome.duration_s = time.monotonic() - self.start_time
        outcome.bytes_moved = self._moved
        outcome.files_done = self._done
        self._on_exit(outcome)

    def _open_outputs(self) -> None:
        spec = self.job.spec
        try:
            for path, name in ((spec.output, "out"), (spec.err, "err")):
                if path:
                    fd = open_as(self.run_as, path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                    setattr(self, name, self._files.enter_context(os.fdopen(fd, "ab")))
        except IdentityError as exc:
            log.warning("job %d: %s", self.job.id, exc)

    def _pass(self) -> DatasetOutcome:
        job, spec = self.job, self.job.spec
        outcome = DatasetOutcome()
        if job.files_total == 0:
            try:
                dataset = list_dataset(spec.src_url, spec.dest_url, recursive=spec.recursive,
                                       url_list=spec.url_list,
                                       max_files=self.settings.max_files_per_job,
                                       x509proxy=spec.x509proxy, run_as=self.run_as,
                                       token_file=self.tokens.src_file)
            except DatasetError as exc:  # a refusal explained by the token, else as it was
                failure: TransferError = (RetryableTransferError(str(exc))
                                          if isinstance(exc, DatasetUnreachable)
                                          else PermanentTransferError(str(exc)))
                outcome.listing_error = self.tokens.explain(failure, spec.src_url,
                                                            spec.dest_url)
                return outcome
            self.store.add_files(job.id, dataset.files)
        now = self.clock()
        rows = {r.index: r for r in self.store.files(job.id, [FileState.PENDING])
                if r.next_attempt_at <= now}
        self.sink = self._sink()
        resumed = self._resumed(rows)
        settled = self._settle_in_doubt([r for r in rows.values()
                                         if r.in_doubt and r.index not in resumed])
        for index in settled:
            rows.pop(index)
        if not rows:
            return outcome
        opts = spec.options
        self.rtt_s = round_trip_s([rows[min(rows)].src_url, rows[min(rows)].dest_url])
        rtt = RTT_UNKNOWN_S if self.rtt_s is None else self.rtt_s
        bdp = self.bdp = self.settings.link_mbps * 1e6 / 8 * rtt
        ordered = self.ordered()
        chunks = plan_chunks([(i, r.size_bytes) for i, r in rows.items()], bdp,
                             cc=1 if ordered else opts.concurrency,
                             p=1 if ordered else opts.streams, pp=opts.pipelining)
        outcome.chunks = [f"{c.label()}: {len(c.indexes)} files, {c.total_bytes} bytes"
                          for c in chunks]
        known = "" if self.rtt_s is not None else " assumed (a server did not answer a connect)"
        log.info("job %d pass %d: %d files, RTT %.1f ms%s, BDP %.0f bytes; %s", job.id,
                 self.attempt_no, len(rows), rtt * 1000, known, bdp, "; ".join(outcome.chunks))
        rtt_key = "dataset_rtt_ms" if self.rtt_s is not None else "dataset_rtt_assumed_ms"
        facts = {} if self.sink is None else self.sink.facts()
        self.store.update_result(job.id, {"dataset_chunks": outcome.chunks,
                                          "dataset_bdp_bytes": int(bdp),
                                          rtt_key: round(rtt * 1000, 3), **facts})
        if ordered:  # the chunks one after another: the sink takes its bytes in order
            for chunk in chunks:
                with self._lock:
                    self._running.append(chunk)
                self._chunk_guarded(chunk, rows)
            return outcome
        threads = [threading.Thread(target=self._chunk_guarded, args=(c, rows),
                                    name=f"chunk-{self.job.id}-{c.size_class.value}",
                                    daemon=True) for c in chunks]
        with self._lock:
            self._running += chunks
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outcome

    def _sink(self) -> destination.Destination | None:
        """The device or FIFO the job's dest_url names (as the owner), when it is one: a
        dataset into /dev/null (a throughput test) or a FIFO writes every file into it. The
        files keep their names below it for the listing."""
        spec = self.job.spec
        if spec.url_list or not spec.dest_url:
            return None
        found = destination.look(spec.dest_url.rstrip("/"), self.run_as)
        return found if found.is_sink else None

    def file_urls(self, row: DatasetFileRow, attempt_no: int) -> tuple[str, str]:
        """The file's URLs for its attempt `attempt_no` (`file_urls`), into the sink when
        the dataset has one."""
        src, dest = file_urls(row.src_url, row.dest_url, self.job.spec.alt_protocols,
                              attempt_no)
        return (src, self.sink.url) if self.sink is not None else (src, dest)

    def _chunk_guarded(self, chunk: Chunk, rows: dict[int, DatasetFileRow]) -> None:
        """The chunk, counted among the running ones from before the call (by `_pass`,
        before any chunk starts, so that none sees itself alone at its start)."""
        try:
            self._chunk(chunk, rows)
        except Exception:
            log.exception("job %d: chunk %s failed inside stork_server", self.job.id,
                          chunk.label())
        finally:
            with self._lock:
                self._running.remove(chunk)

    def _chunk(self, chunk: Chunk, rows: dict[int, DatasetFileRow]) -> None:
        """The chunk's files through the engine (an online optimizer, when the job asks for
        one, tuning it as it runs); with a probing optimizer, or STORK_ENGINE = batch, in
        batches (`stork.server.dataset_batches`), its probes (real files of the chunk)
        first."""
        queue = list(chunk.indexes)
        params = chunk.params
        if tunes_online(self.job.spec, self.settings) and not self.ordered():
            self.flows.flow(chunk, rows, queue, params, tuned=True)
            return
        tuning = self.batches.tuning(chunk, rows, queue)
        if tuning is None and self.settings.engine == "flow":
            self.flows.flow(chunk, rows, queue, params)
            return
        if tuning is None:  # STORK_ENGINE = batch: the older way, for comparison
            self.batches.send(chunk, rows, queue, params)
            return
        try:
            self.batches.send(chunk, rows, queue, tuning.decide(params), tuning)
        finally:
            tuning.finish()

    def _resumed(self, rows: dict[int, DatasetFileRow]) -> set[int]:
        """The due files whose ranges an earlier pass (this node's before a kill -9, or a
        dead node's) kept and which still stand at the destination: only the rest of them
        is sent. The others' records are dropped: they are looked at (in doubt) or sent
        whole."""
        resumed, stale = set(), []
        for index, spans in self.kept.landed().items():
            kept, row = self.kept.get(index), rows.get(index)
            if row is None or kept is None:
                continue
            dest = self.file_urls(row, row.attempts + 1)[1]
            if (kept.claim.url == dest and self._same_file(kept.claim)
                    and worth_keeping(kept, self._size(dest), row.size_bytes)):
                resumed.add(index)
                log.info("job %d: %d bytes of %s landed as ranges in an earlier pass: kept, "
                         "the rest is sent", self.job.id, sum(e - s for s, e in spans), dest)
            else:
                stale.append(index)
        self.kept.drop(stale)
        return resumed

    def _same_file(self, claim: destination.Destination) -> bool:
        """Whether the file a claim names still stands at its URL: a local one by its device
        and inode (as the owner), an FTP server's by its ``Unique`` fact. Other remote ends
        cannot name a file; there the destination's size speaks (`worth_keeping`)."""
        if claim.file is None:
            return True
        found = destination.look(claim.url, self.run_as).file
        return found is not None and found.key == claim.file.key

    def ordered(self) -> bool:
        """A sink that takes its bytes in order (a FIFO): one file, one stream at a time."""
        return self.sink is not None and self.sink.ordered

    def chunks_share_path(self, chunk: Chunk) -> bool:
        """Whether another chunk of this pass than `chunk` is still moving and shares the
        path (`shares_path`; a tuned chunk holds its preset meanwhile, or leads: `FlowTuner`)."""
        return bool(self._sharing(chunk))

    def _sharing(self, chunk: Chunk) -> list[Chunk]:
        """The chunks of this pass other than `chunk` still moving that share the path."""
        with self._lock:
            others = [c for c in self._running if c is not chunk]
        return [c for c in others if shares_path(c, self.settings.link_mbps)]

    def leads_path(self, chunk: Chunk) -> bool:
        """Whether `chunk` leads the path it shares (`flow_tuning.Lead`): of the chunks
        moving that share it, the one of the most bytes (the first of them in the pass's
        order), which is likely to move longest."""
        sharing = self._sharing(chunk)
        with self._lock:
            rivals = [c for c in self._running if c is chunk or any(c is s for s in sharing)]
        return bool(sharing) and max(rivals, key=lambda c: c.total_bytes) is chunk

    def path_company(self, chunk: Chunk) -> list[Flow]:
        """The flows of the engines running now for the other chunks that share the path
        with `chunk` (`_sharing`)."""
        sharing = self._sharing(chunk)
        with self._lock:
            return [e.flow for e, c in self._engines.items()
                    if any(c is s for s in sharing)]

    def known_load(self, src_url: str, dest_url: str) -> int:
        """Other transfers the daemon runs now on this link (other attempts on either host,
        and this pass's other chunks): the `sharing` its transfer log rows record."""
        return max(self.sharing(src_url, dest_url) + len(self._running) - 1, 0)

    @property
    def verify_checksum(self) -> bool:
        """Whether the files' checksums are compared: when the job asks for it, and the
        destination is not a sink (a device or a FIFO cannot be read back)."""
        return self.job.spec.verify_checksum and self.sink is None

    def checksum_type(self, src: str, dest: str) -> str:
        """The checksum gfal2 compares for a file with `verify_checksum` (the strongest
        type both ends answer); "" for none."""
        if not self.verify_checksum:
            return ""
        return common_checksum(parse_url(src).scheme, parse_url(dest).scheme) or ""

    def run_child(self, argv: list[str], stdin: bytes | None = None, *,
                   module: TransferModule | None = None,
                   on_stdout: Callable[[bytes], None] | None = None) -> tuple[int, str]:
        """Run one child to its end: (exit status, the tail of its stderr). Its stdout goes
        to `on_stdout` when given, else to the job's output."""
        spec = self.job.spec  # the tokens' files chosen by the dataset's own directories
        env = (module or self.module).environment(self.request(spec.src_url, spec.dest_url, 1))
        marks = Marks(time.monotonic())  # its -vb markers into the pass's flow
        child = Child(argv, env=env, run_as=self.run_as,
                      stdout=self.out if on_stdout is None else None, stderr=self.err,
                      stdin=stdin, on_stdout=on_stdout,
                      on_progress=lambda p: marks.reach(p.bytes_done, time.monotonic(),
                                                        self.meter.add))
        with self._lock:
            if self._stop is not None:
                return 1, ""
            self._children.add(child)
        try:
            try:
                child.start()
            except OSError as exc:
                log.warning("job %d: cannot run %s: %s", self.job.id, argv[0], exc.strerror)
                return 127, f"cannot run {argv[0]}: {exc.strerror}"
            ended = child.wait()
            return ended.code, ended.stderr_tail
        finally:
            with self._lock:
                self._children.discard(child)

    def add_engine(self, engine: Engine, chunk: Chunk) -> bool:
        """An engine of this pass for `chunk`, stopped with it from now on; False (not
        added) when the pass is stopped already: the engine is not to run."""
        with self._lock:
            if self._stop is not None:
                return False
            self._engines[engine] = chunk
        return True

    def discard_engine(self, engine: Engine) -> None:
        """An engine of this pass that has ended."""
        with self._lock:
            self._engines.pop(engine, None)

    def request(self, src: str, dest: str, streams: int) -> TransferRequest:
        spec = self.job.spec
        options = spec.options
        return TransferRequest(src, dest, replace(options, streams=streams, concurrency=None,
                                                  pipelining=None),
                               self.settings.default_streams, spec.verify_checksum,
                               spec.x509proxy, tokens=spec.bearer_tokens)

    # -- after a run ----------------------------------------------------------------------

    def check(self, batch: list[int], rows: dict[int, DatasetFileRow],
               urls: dict[int, tuple[str, str]], clean: set[int], streams: int
               ) -> list[FileResult]:
        """Each file of a batch: done, or sent again alone (its own error decides). `clean`:
        the files whose tool ended without an error for them."""
        sizes = {} if self.sink is not None else \
            dest_sizes([urls[i][1] for i in batch], self.run_as, self.job.spec.x509proxy,
                       self.ends)
        results: list[FileResult] = []
        for i in batch:
            src, dest = urls[i]
            want = rows[i].size_bytes
            have = sizes.get(dest, -1)  # -1: cannot be known cheaply
            if have is not None and have >= 0 and want is not None and have == want:
                results.append(self._done_result(i, have))
            elif i in clean and (want is None or have == -1):
                results.append(self._done_result(i, want if want is not None
                                                 else (have if have and have > 0 else 0)))
            elif not self.stopped():
                results.append(self._alone(rows[i], src, dest, streams))
        return results

    def _done_result(self, index: int, size: int) -> FileResult:
        with self._lock:
            self._moved += size
            self._done += 1
        return FileResult(index, FileState.DONE, bytes_done=size)

    def _alone(self, row: DatasetFileRow, src: str, dest: str, streams: int) -> FileResult:
        """Send one file by itself; its own exit decides. Its destination is claimed first
        (`destination.claim`): after a failure only what this send wrote is removed."""
        request = self.request(src, dest, streams)
        module: TransferModule = self.gfal if through_gfal(src, dest) else self.module
        argv = module.command(request)
        if module is self.gfal and (kind := self.checksum_type(src, dest)):
            argv[-2:-2] = ["--checksum", kind]  # before SRC DEST
        claim = self.sink or destination.claim(dest, self.run_as)
        code, stderr = self.run_child(argv, module=module)
        if self.stopped():
            return FileResult(row.index, FileState.PENDING)
        if code == 0 and self.sink is not None:  # nothing to read back
            return self._done_result(row.index, row.size_bytes or 0)
        if code == 0:
            size = row.size_bytes
            have = self._size(dest)
            if size is None or have is None or have == size:
                return self._done_result(row.index, have if have is not None else size or 0)
            failure: TransferError = RetryableTransferError(
                f"destination size {have} differs from source size {size}")
        else:
            failure = self.tokens.explain(module.judge(code, stderr), src, dest)
        self.remove_partial(claim)
        return judge_file(self.job, row.index, row.failures, failure, self.settings,
                          self.clock())

    def abandon(self, taken: Taken, results: list[ItemResult], done: set[int] | None) -> None:
        """A call's whole files that are not DONE (`done`: those that are; None: none) when
        the pass stops: when the job was removed, what the call wrote of them goes
        (`_remove_abandoned`, at the pass's end, when the reason is known: stork_rm marks
        the job REMOVED in the store before it stops the pass)."""
        began = time.time() - (time.monotonic() - taken.started_s)
        with self._lock:
            self._abandoned += [(r.item.file.dest_url, began) for r in results
                                if not r.item.is_range and r.item.file.index not in (done or ())]

    def _remove_abandoned(self) -> None:
        """stork_rm: what the pass's calls in flight wrote goes, as a single file's partial
        destination does, once every chunk has ended. A whole file they had taken is removed
        when it was written since its call began (`destination.remove_written_since`: it
        has no claim; a file the call had not reached yet stays as it was); a file sent as
        ranges that is not whole, by its claim. Files DONE stay."""
        with self._lock:
            abandoned, self._abandoned = self._abandoned, []
        first: dict[str, float] = {}  # a file abandoned twice: since its first call began
        for url, began in abandoned:
            first[url] = min(began, first.get(url, began))
        for url, began in first.items():
            log.info("job %d: %s", self.job.id,
                     destination.remove_written_since(url, began, self.run_as))
        for kept in self.kept.drop(list(self.kept.landed())):
            self.remove_partial(kept.claim)

    def remove_partial(self, claim: destination.Destination) -> None:
        try:
            log.info("job %d: %s", self.job.id, destination.remove(claim, self.run_as, self.ends))
        except Exception:  # noqa: BLE001 - best effort: a leftover is retried or reported
            log.warning("job %d: cannot remove the partial file %s", self.job.id, claim.url)

    def _settle_in_doubt(self, rows: list[DatasetFileRow]) -> set[int]:
        """Files a dead daemon was sending: done when the destination has the source's size
        and MD5 (nothing resent); the others are sent again."""
        if self.sink is not None:  # a device or a FIFO cannot be read back: sent again
            return set()
        results = []
        for row in rows:
            src, dest = self.file_urls(row, max(row.attempts, 1))
            (src_size, src_md5), (dest_size, dest_md5) = self._facts(src), self._facts(dest)
            if (src_size is not None and src_size == dest_size and src_md5 is not None
                    and src_md5 == dest_md5):
                results.append(FileResult(row.index, FileState.DONE, bytes_done=src_size,
                                          checksum=src_md5))
        if results:
            self.commit(results)
            log.info("job %d: %d file(s) in doubt were complete at the destination: not "
                     "resent", self.job.id, len(results))
        return {r.index for r in results}

    def _size(self, url: str) -> int | None:
        """A destination's size after a file sent alone (local files as the owner)."""
        if parse_url(url).scheme == "file":
            return local_facts([parse_url(url).path], self.run_as)[0][0]
        try:
            return verify.size_of(url, self.ends)
        except verify.VerifyError:
            return None

    def _facts(self, url: str) -> tuple[int | None, str | None]:
        """(size, MD5) of one end of a file in doubt; local files as the owner."""
        if parse_url(url).scheme == "file":
            return local_facts([parse_url(url).path], self.run_as, md5=True)[0]
        try:
            return verify.size_of(url, self.ends), verify.md5_of(url, self.ends)
        except verify.VerifyError:
            return None, None

    def release(self, indexes: list[int]) -> None:
        """A stopped batch: its files wait again, with no failure counted."""
        if indexes:
            self.store.finish_files(self.job.id, self.attempt_no,
                                    [FileResult(i, FileState.PENDING) for i in indexes])

    def commit(self, results: list[FileResult]) -> bool:
        """The files' ends into the store; False when it refused them (the job no longer
        runs this attempt)."""
        self.kept.drop([r.index for r in results
                        if r.state in (FileState.DONE, FileState.FAILED)])
        elapsed = max(time.monotonic() - self.start_time, 1e-6)
        rate = round(self._moved * 8 / 1e6 / elapsed, 3)
        return self.store.finish_files(self.job.id, self.attempt_no, results, rate_mbps=rate)

