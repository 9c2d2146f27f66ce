"""Stork jobs on a running testbed: a stork_server inside a site, and waiting for its jobs.

    server = site_daemon(bed, "a", {"STORK_MAX_NUM_JOBS": "1"}).start()
    [job_id] = server.submit('[ dap_type = transfer; src_url = "..."; dest_url = "..."; ]')
    [job] = finish(server, [job_id], timeout_s=600)      # the job's summary, once it ended

Shared by the testbed benchmarks (bench_dataset, bench_wan_harp, bench_rtt_suite).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.support import StorkServer, wait_for
from tests.testbed.netns import Testbed

DONE_STATES = ("COMPLETED", "FAILED", "REMOVED")


def site_daemon(bed: Testbed, site: str, knobs: dict[str, str] | None = None,
                workdir: Path | None = None) -> StorkServer:
    """A stork_server (not started yet) running inside `site`, with STORK_LINK_MBPS the rate
    of the site's first link, and said to be true (EOS_LINK_IS_TRUE: the link emulator
    carries no more), unless `knobs` say otherwise. Its state lives in `workdir`
    (default: a new directory in the testbed's work directory), so a daemon started again
    on the same `workdir`, in this testbed or a later one, keeps its store."""
    link = next(link for link in bed.topology.links if site in (link.a, link.b))
    settings = {"STORK_LINK_MBPS": f"{link.rate_mbps:g}", "EOS_LINK_IS_TRUE": "true",
                **(knobs or {})}
    where = workdir or bed.workdir / f"stork-{site}-{time.monotonic_ns()}"
    return StorkServer(where, settings, prefix=bed.argv(site, []))


def finish(server: StorkServer, ids: list[int], timeout_s: float) -> list[dict[str, Any]]:
    """Wait for the jobs to end (removing them after `timeout_s`); their summaries."""
    def ended() -> bool:
        answer = server.api("GET", "/v1/jobs", params={"columns": "id,state"}).json()
        at = {column: i for i, column in enumerate(answer["columns"])}
        states = {row[at["id"]]: row[at["state"]] for row in answer["rows"]}
        return all(states.get(i) in DONE_STATES for i in ids)

    try:
        wait_for(ended, timeout_s, 0.5, what="jobs to finish")
    except TimeoutError:
        server.cli("stork_rm", *(str(i) for i in ids))
        wait_for(ended, 120, 0.5, what="removed jobs to stop")
    return [server.job(i)["job"] for i in ids]
