"""A running job's measured flow written to the store every few seconds (`FlowReport`).

A run (a dataset pass, a file sent as ranges) feeds the bytes its workers report into one
`Flow` (the job's, over all its engines); `FlowReport` writes that flow's series
(`stork.engine.series`) into the job's result every `every_s` and once more when stopped,
so the API and the status page draw a running job's rate, and a finished job keeps its last
minutes of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stork.engine.flow import Flow
from stork.engine.series import series
from stork.job import FLOW_RESULT_KEY

log = logging.getLogger(__name__)

EVERY_S = 2.0


class FlowReport:
    def __init__(self, flow: Flow, write: Callable[[dict[str, Any]], None], *,
                 every_s: float = EVERY_S, on_report: Callable[[], None] | None = None
                 ) -> None:
        self.flow = flow
        self._write = write
        self._on_report = on_report  # also called at each write (the run's progress)
        self.every_s = every_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> FlowReport:
        self._thread = threading.Thread(target=self._loop, name="flow-report", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The last write (the flow ended now: its last window is a short one) and no
        more."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._report(end=True)

    def _loop(self) -> None:
        while not self._done.wait(self.every_s):
            self._report()

    def _report(self, end: bool = False) -> None:
        now = time.monotonic()
        if end:
            self.flow.end(now)
        else:
            self.flow.tick(now)
        try:
            kept = series(self.flow.windows(), mono_s=now, wall_s=time.time())
            self._write({FLOW_RESULT_KEY: kept})
        except Exception:  # a series not written is not worth a job
            log.warning("cannot write a job's flow series", exc_info=True)
        if self._on_report is not None:
            self._on_report()
