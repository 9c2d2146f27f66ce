"""globus-url-copy as an engine worker.

globus-url-copy reads its whole ``-f`` list before it moves a byte (measured: a list fed
line by line through a pipe starts only at its end), so no process can be fed items while
it runs. A call is therefore one process: a byte range alone (``-partial-offset O
-partial-length L``, written in place), or a short list of whole files (``-f -`` with ``-cc
1``: the engine's workers are the concurrency) that keeps one control and data channel
across its files (``-fast``, ``-pp``). The engine sizes lists so a call lasts a few seconds,
so a worker sets up its session once per call, and the workers' calls end at different
times: the flow never stops as a whole.

Its stdout is a pipe, where the C library holds globus-url-copy's lines until the call
ends; coreutils' ``stdbuf -o0`` makes it write each as it comes, so a list call tells each
file's end as it lands (the ``Source:`` line of the next) and the engine's windows are
final within a file's time, not a call's.

Those lines also let a list call be cut short (`Worker.cut`: the engine cuts a straggler at
the end of the queue, `stork.engine.engine`): globus-url-copy sends a list's files one after
the other (``-pp`` queues nothing ahead of a list's next file: measured, docs/BENCHMARKS.md
12.4), and names each at its first marker, which a small file sends at its end. So when a
call is cut, the files before the last it named have landed, and the rest are sent again
(`cut_short`: the one or two it may have begun, written over whole).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence

from stork.process import Child
from stork.transfer.base import TransferRequest
from stork.transfer.gridftp import MAX_LIST_URL, GridFtpModule, list_input, partial
from stork.transfer.options import TransferOptions
from stork.transfer.worker import (
    ChildWorker,
    Item,
    ItemResult,
    Marks,
    Report,
    Setting,
    WorkerContext,
    cut_short,
)

STDBUF = shutil.which("stdbuf")  # coreutils: without it, a call's lines come at its end


class GridFtpWorker(ChildWorker):
    takes_lists = True
    sets_up_per_call = True  # a globus-url-copy a call
    cuts = STDBUF is not None  # the files of a list call are told as they land

    def __init__(self, module: GridFtpModule, context: WorkerContext) -> None:
        super().__init__()
        self.module = module
        self.context = context

    def argv(self, items: Sequence[Item], setting: Setting) -> tuple[list[str], bytes | None]:
        """The command line of a call, and its stdin (the list, for whole files)."""
        c = self.context
        length = items[0].length if len(items) == 1 else None
        if length is not None:
            item = items[0]
            # -cd: a dataset's file may be the first of its directory to land
            argv = [self.module.executable, "-vb", "-cd", "-p", str(setting.p)]
            if c.tcp_buffer_bytes:
                argv += ["-tcp-bs", str(c.tcp_buffer_bytes)]
            if c.block_size_bytes:
                argv += ["-bs", str(c.block_size_bytes)]
            return [*argv, *partial(item.offset, length),
                    item.file.src_url, item.file.dest_url], None
        if any(i.is_range for i in items):
            raise ValueError("a range is sent alone")
        if len(items) == 1 and max(len(items[0].file.src_url),
                                   len(items[0].file.dest_url)) > MAX_LIST_URL:
            request = TransferRequest(items[0].file.src_url, items[0].file.dest_url,
                                      TransferOptions(streams=setting.p,
                                                      tcp_buffer_bytes=c.tcp_buffer_bytes,
                                                      block_size_bytes=c.block_size_bytes),
                                      setting.p, c.verify_checksum)
            return self.module.command(request), None
        argv = self.module.list_command(
            cc=1, p=setting.p, pipelining=setting.pp >= 2, fast=c.fast,
            verify_checksum=c.verify_checksum, tcp_buffer_bytes=c.tcp_buffer_bytes,
            block_size_bytes=c.block_size_bytes)
        return argv, list_input([(i.file.src_url, i.file.dest_url) for i in items])

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        """One globus-url-copy for the listable items; a file whose URL is too long for a
        list line (MAX_LIST_URL) goes alone, named on the command line."""
        alone = [i for i in items if max(len(i.file.src_url), len(i.file.dest_url)) > MAX_LIST_URL
                 and not i.is_range]
        listed = [i for i in items if i not in alone]
        results = self._call(listed, setting, report) if listed else []
        for item in alone:
            results += self._call([item], setting, report)
        return results

    def _call(self, items: Sequence[Item], setting: Setting,
              report: Report) -> list[ItemResult]:
        argv, stdin = self.argv(items, setting)
        # lines as they come: each file's end is told
        marks = Marks(time.monotonic(), [i.size_bytes for i in items] if STDBUF else ())
        child = Child([STDBUF, "-o0", *argv] if STDBUF else argv, env=self.context.env,
                      run_as=self.context.run_as, stdin=stdin,
                      stdout=self.context.stdout, stderr=self.context.stderr,
                      on_progress=lambda p: marks.reach(p.bytes_done, time.monotonic(), report),
                      on_next_file=lambda: marks.next_file(time.monotonic(), report))
        with self._lock:
            if self._stopped:
                return [ItemResult(i, None) for i in items]
            self._child = child
        try:
            child.start()
        except OSError as exc:
            failure = self.module.judge(127, f"cannot run {argv[0]}: {exc.strerror}")
            return [ItemResult(i, False, failure) for i in items]
        ended = child.wait()
        with self._lock:
            self._child = None
        if ended.stopped:
            if self.was_cut(child):
                return cut_short(items, marks.begun)
            return [ItemResult(i, None) for i in items]
        moved = sum(i.size_bytes for i in items)
        if ended.code == 0:
            marks.rest(moved, time.monotonic(), report)  # what no marker said
            return [ItemResult(i, True) for i in items]
        failure = self.module.judge(ended.code, ended.stderr_tail)
        if len(items) == 1:
            return [ItemResult(items[0], False, failure)]
        return [ItemResult(i, None, failure) for i in items]  # which file failed: unknown

