"""ASM's offline analysis as a job of stork_server's scheduler (ASM_ANALYSIS_INTERVAL).

It runs on the scheduler's own threads, never the dispatcher's, and imports the numerics only
when it runs. A failure is logged and the last model stays in use until the next run.
"""

from __future__ import annotations

import logging

from stork.store.base import JobStore

log = logging.getLogger(__name__)


class ScheduledAnalysis:
    def __init__(self, store: JobStore, state_dir: str) -> None:
        from pathlib import Path

        self.store = store
        self.state_dir = state_dir
        self._model = Path(state_dir) / "asm" / "model.json"

    def needed_now(self) -> bool:
        """No model yet: the first run should not wait a whole interval."""
        return not self._model.exists()

    def __call__(self) -> None:
        from stork.asm.state import analyze, directory

        try:
            run = analyze(self.store, directory(self.state_dir))
        except Exception:
            log.exception("asm: the offline analysis failed; the last model stays in use")
            return
        log.info("asm: offline analysis read %d new transfer log rows (%d used, %d in all), "
                 "%d clusters, in %.1f s", run.rows_read, run.rows_added, run.rows_total,
                 run.clusters, run.seconds)
