"""PURE: a job's measured flow as the series it keeps with the job (bounded).

The job's `result` holds its last SERIES_POINTS windows of measured rate (key `flow`), so
the API (`GET /v1/jobs/ID/flow`) and the status page draw a running job's rate as it moves;
the transfer log keeps the summary (one row per stretch at one setting and load). The key
(`stork.job.FLOW_RESULT_KEY`) is kept out of the job's ClassAd and listings: a series is for
drawing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stork.engine.flow import Window

SERIES_POINTS = 600  # at 1-second windows: the last ten minutes


def series(windows: Sequence[Window], *, mono_s: float, wall_s: float,
           points: int = SERIES_POINTS) -> dict[str, Any]:
    """The last `points` windows as {"start_time", "t", "mbps"}: `start_time` is the first
    kept window's start in unix seconds (the windows' monotonic times read against the pair
    `mono_s`/`wall_s` taken at one moment), `t` each window's start in seconds after it and
    `mbps` its rate, oldest first (a change of setting closes a window early, so the
    windows are not all one length)."""
    kept = list(windows)[-points:] if points > 0 else []
    first = kept[0].start_s if kept else mono_s
    return {"start_time": round(wall_s - (mono_s - first), 3),
            "t": [round(w.start_s - first, 3) for w in kept],
            "mbps": [round(w.rate_mbps, 3) for w in kept]}
