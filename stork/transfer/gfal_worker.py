"""gfal2 as an engine worker: one long-lived helper per slot (`gfalhelper.py serve`).

The helper copies one file a line of its input as the lines come, every copy on one gfal2
context, which keeps its sessions between copies (GridFTP's control channel through the
gridftp plugin's SESSION_REUSE; XRootD's connection). So a worker pays the set-up of a
session once, not per file or per batch, and `p` (gfal2's ``nbstreams``) applies to the next
file it is given. gfal2 copies whole files only: a worker answers a byte range as a failure,
so the engine does not split files for it (`Worker.writes_ranges`).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from stork.errors import PermanentTransferError
from stork.process import Child
from stork.transfer.failures import exit_status_class
from stork.transfer.remote import GFAL_PYTHON, HELPER, common_checksum
from stork.transfer.worker import ChildWorker, Item, ItemResult, Report, Setting, WorkerContext
from stork.urls import parse_url

log = logging.getLogger(__name__)

_ENDED: dict[str, Any] = {"ended": True}


class GfalWorker(ChildWorker):
    takes_lists = False
    writes_ranges = False

    def __init__(self, context: WorkerContext, python: str = GFAL_PYTHON,
                 timeout_s: int = 0) -> None:
        super().__init__()
        self.context = context
        self.python = python
        self.timeout_s = timeout_s
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._pending = b""
        self._waiter: threading.Thread | None = None

    def _helper(self) -> Child | None:
        """The helper, started on first use; None once stopped or ended."""
        with self._lock:
            if self._stopped:
                return None
            if self._child is not None:
                return self._child
            argv = [self.python, "-I", HELPER, "serve"]
            if self.timeout_s:
                argv += ["--timeout", str(self.timeout_s)]
            child = Child(argv, env=self.context.env, run_as=self.context.run_as,
                          stderr=self.context.stderr, on_stdout=self._read, interactive=True)
            child.start()
            self._child = child
            self._waiter = threading.Thread(target=self._wait, args=(child,), daemon=True)
            self._waiter.start()
            return child

    def _wait(self, child: Child) -> None:
        ended = child.wait()
        self._answers.put({**_ENDED, "code": ended.code, "error": ended.stderr_tail})

    def _read(self, chunk: bytes) -> None:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            try:
                self._answers.put(json.loads(line))
            except ValueError:
                continue

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        results: list[ItemResult] = []
        for index, item in enumerate(items):
            if item.is_range:
                results.append(ItemResult(item, False, PermanentTransferError(
                    "gfal2 copies whole files only, not byte ranges")))
                continue
            answer = self._copy(item, setting, report)
            if answer is None:  # stopped, or the helper ended: this and the rest unknown
                results.extend(ItemResult(i, None) for i in items[index:])
                break
            results.append(answer)
        return results

    def _copy(self, item: Item, setting: Setting, report: Report) -> ItemResult | None:
        try:
            child = self._helper()
            if child is None:
                return None
            child.send(json.dumps({"src": item.file.src_url, "dest": item.file.dest_url,
                                   "streams": setting.p,
                                   "checksum": self._checksum(item)}).encode() + b"\n")
        except OSError:
            return None
        t, done = time.monotonic(), 0
        while True:
            answer = self._answers.get()
            now = time.monotonic()
            if "ended" in answer:  # its file is in doubt: checked before it is sent again
                if not self._stopped:
                    log.warning("the gfal2 helper ended (exit status %s) while copying %s: %s",
                                answer["code"], item.file.src_url,
                                answer["error"][-500:] or "no message")
                return None
            if "progress" in answer:
                if int(answer["progress"]) > done:
                    report(t, now, int(answer["progress"]) - done)
                    done = int(answer["progress"])
                t = now
                continue
            if "size" in answer:
                if int(answer["size"]) > done:
                    report(t, now, int(answer["size"]) - done)
                return ItemResult(item, True)
            error = exit_status_class(int(answer.get("exit", 1)))
            return ItemResult(item, False, error(str(answer.get("error", "gfal2 copy failed"))))

    def _checksum(self, item: Item) -> str:
        """With verify_checksum, the strongest type both ends answer, for gfal2 to compare
        after the copy ("" for none)."""
        if not self.context.verify_checksum:
            return ""
        return common_checksum(parse_url(item.file.src_url).scheme,
                               parse_url(item.file.dest_url).scheme) or ""


    def close(self) -> None:
        with self._lock:
            child, waiter = self._child, self._waiter
        if child is not None:
            child.close_input()
        if waiter is not None:
            waiter.join(30)
