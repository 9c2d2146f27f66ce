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
from collections.abc import Callable, Iterable
from typing import Any

from stork.engine.flow import Flow, Stretch
from stork.engine.series import series
from stork.job import FLOW_RESULT_KEY
from stork.translog import TransferRecord
from stork.urls import parse_url

log = logging.getLogger(__name__)

EVERY_S = 2.0


def stretch_records(stretches: Iterable[Stretch], *, now_mono: float, now_wall: float,
                    src_url: str, dest_url: str, rtt_s: float | None, link_mbps: float,
                    buffer_bytes: int | None, file_bytes: float, fast: bool,
                    job_id: int | None = None) -> list[TransferRecord]:
    """An engine's flow as transfer log rows (what optimizers learn from): one per stretch
    at one setting and load (`Flow.stretches`, or what a tuner measured), its mean rate and
    the spread of its windows; `file_bytes` is the mean size of the items' files."""
    records = []
    moved = 0.0  # bytes of the stretches so far: their bytes (spread over windows: not
    counted = 0  # whole) and file counts are cumulative rounding, so the rows add up to
    logged = 0  # the bytes and the files the flow moved
    for stretch in stretches:
        if stretch.bytes <= 0 or stretch.seconds <= 0:
            continue
        moved += stretch.bytes
        files = max(round(moved / file_bytes) - counted, 1) if file_bytes else 1
        counted += files
        nbytes = round(moved) - logged
        logged += nbytes
        s = stretch.setting
        records.append(TransferRecord(
            time=now_wall - (now_mono - stretch.start_s),
            src_host=parse_url(src_url).host or "localhost",
            dest_host=parse_url(dest_url).host or "localhost", rtt_s=rtt_s,
            bandwidth_bps=link_mbps * 1e6, buffer_bytes=buffer_bytes,
            file_size_bytes=file_bytes,
            file_count=files,
            cc=s.cc, p=s.p, pp=s.pp, fast=fast, bytes_moved=nbytes,
            duration_s=round(stretch.seconds, 6), throughput_mbps=round(stretch.mean_mbps, 3),
            sharing=stretch.load,
            spread_mbps=round(stretch.stdev_mbps, 3) if stretch.windows > 1 else None,
            job_id=job_id))
    return records


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
