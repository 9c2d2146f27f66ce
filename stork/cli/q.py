"""stork_q: list the queue."""

from __future__ import annotations

import sys
import time
from typing import Any

from stork.cli.common import EXIT_OK, add_name, human_bytes, load_settings, parser, run
from stork.client import Client

PROGRESS_WIDTH = 26  # the PROGRESS column; a dataset's longer text widens it for all rows


def files_text(job: dict[str, Any]) -> str:
    """A dataset's files: done/total, with the failed ones: "412/500", "412/500+3F"."""
    text = f"{job['files_done']}/{job['files_total']}"
    return f"{text}+{job['files_failed']}F" if job.get("files_failed") else text


def bytes_pair(done: int, total: int | None) -> str:
    """Bytes done of a total in one unit, the total's: "1.2/4.0 GiB"; "1.2 GiB/?" while the
    total is unknown."""
    if total is None:
        return f"{human_bytes(done)}/?"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if total >= size:
            return f"{done / size:.1f}/{total / size:.1f} {unit}"
    return f"{done}/{total} B"


def rate_text(rate_mbps: float) -> str:
    return f"{rate_mbps:.0f} Mb/s" if rate_mbps >= 10 else f"{rate_mbps:.1f} Mb/s"


def dataset_progress_text(job: dict[str, Any], now: float) -> str:
    """A dataset job's progress: its files, its bytes and its rate ("412/500+3F 1.2/4.0 GiB
    @ 450 Mb/s"); an idle one says why it waits instead of its bytes."""
    files = files_text(job)
    if job["state"] == "IDLE":
        why = _single_progress_text(job, now)
        if why != "-":
            return f"{files} {why}"
    text = f"{files} {bytes_pair(job['bytes_done'], job.get('bytes_total'))}"
    rate = job.get("rate_mbps") or 0.0
    if job["state"] in ("RUNNING", "COMPLETED") and rate > 0:
        text += f" @ {rate_text(rate)}"
    return text


def progress_text(job: dict[str, Any], now: float) -> str:
    """The PROGRESS column: a dataset's files and bytes, else the single transfer's state."""
    if job.get("files_total"):
        return dataset_progress_text(job, now)
    return _single_progress_text(job, now)


def _single_progress_text(job: dict[str, Any], now: float) -> str:
    state = job["state"]
    if state == "RUNNING":
        if job["bytes_done"]:
            return f"{human_bytes(job['bytes_done'])} @ {job['rate_mbps']:.1f} Mb/s"
        return "starting"
    if state == "IDLE" and job["next_attempt_at"] > now:
        return f"retry in {job['next_attempt_at'] - now:.0f}s"
    if state == "IDLE" and job.get("wait_reason"):
        reason: str = job["wait_reason"]
        return reason[:26]
    if state == "COMPLETED" and job.get("dap_type") == "estimation":
        result = job.get("result") or {}
        return (f"{result.get('optimal_streams')} streams, "
                f"{result.get('estimated_throughput_mbps', 0):.0f} Mb/s")
    if state == "COMPLETED":
        return human_bytes(job["bytes_done"])
    if state == "FAILED" and job.get("failure_kind"):
        kind: str = job["failure_kind"]
        return kind
    return "-"


# what `table` (and `progress_text`) read: all a plain listing asks the server for
TABLE_COLUMNS = ["id", "owner", "state", "attempts", "bytes_done", "rate_mbps",
                 "next_attempt_at", "wait_reason", "dap_type", "result", "failure_kind",
                 "src_url", "dest_url", "files_total", "files_done", "files_failed",
                 "bytes_total"]


def table(jobs: list[dict[str, Any]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    progress = [progress_text(job, now) for job in jobs]
    width = max([PROGRESS_WIDTH, *map(len, progress)])
    header = (f"{'ID':>6} {'OWNER':<10} {'STATE':<9} {'ATT':>3}  {'PROGRESS':<{width}} "
              "SOURCE -> DESTINATION")
    lines = [header]
    for job, text in zip(jobs, progress, strict=True):
        lines.append(f"{job['id']:>6} {job['owner'][:10]:<10} {job['state']:<9} "
                     f"{job['attempts']:>3}  {text:<{width}} "
                     f"{job['src_url']} -> {job['dest_url']}")
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job["state"]] = counts.get(job["state"], 0) + 1
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
    lines.append(f"{len(jobs)} job(s){': ' + summary if summary else ''}")
    return "\n".join(lines)


def matrix_text(title: str, m: dict[str, Any]) -> str:
    """One task matrix as text: a line per host pair, running tasks marked with *."""
    head = f"{title}: alpha {m['alpha']:g}, beta {m['beta']:g}"
    if "n" in m:
        head += (f", n {m['n']}, penalty limit {m['penalty_limit']:g}, "
                 f"algorithm {m['selection']}")
    lines = [head]
    if not m["rows"]:
        lines.append("  (empty)")
    for row in m["rows"]:
        tasks = " ".join(f"{'*' if t['running'] else ''}{t['id']}" for t in row["tasks"])
        lines.append(f"  {row['pair']:<36} {tasks}")
    chosen = ", ".join(f"{t['id']} <{t['src']},{t['dest']}>" for t in m["last_selection"])
    lines.append(f"  last selection: {chosen or '(none)'}; confusion score {m['confusion']:g}; "
                 f"gain {m['gain']:.2f}")
    penalties = ", ".join(f"{h} {v:g}" for h, v in m["penalties"].items())
    lines.append(f"  host penalties of running tasks: {penalties or '(none)'}")
    return "\n".join(lines)


def nodes_text(info: dict[str, Any]) -> str:
    """The nodes sharing the queue: name, pid, heartbeat age, running attempts, start."""
    lines = [f"{'NODE':<24} {'PID':>8} {'HEARTBEAT':>10} {'RUNNING':>8}  STARTED"]
    for n in info["nodes"]:
        mark = "*" if n["name"] == info["node"] else " "
        started = time.strftime("%m/%d %H:%M:%S", time.localtime(n["started_at"]))
        lines.append(f"{mark}{n['name']:<23} {n['pid']:>8} {n['heartbeat_age_s']:>8.1f} s "
                     f"{n['running']:>8}  {started}")
    kind = "shared queue" if info["shared"] else "single-node queue (SQLite)"
    lines.append(f"{len(info['nodes'])} node(s) on a {kind}; * is the one answering")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_q", "Show the Stork job queue.")
    add_name(p)
    p.add_argument("-l", "-long", dest="long", action="store_true", help="print the full job ads")
    p.add_argument("-constraint", metavar="EXPR",
                   help='only jobs for which the ClassAd expression is true, e.g. state == "IDLE"')
    p.add_argument("-matrix", action="store_true",
                   help="print the task matrices by host pair, the last selection with its "
                        "confusion score, and each host's penalty")
    p.add_argument("-nodes", action="store_true",
                   help="list the stork_servers sharing the queue, with heartbeat age and "
                        "running attempts")
    p.add_argument("ids", nargs="*", type=int, help="only these job ids")
    args = p.parse_args(argv)

    def body() -> int:
        client = Client.from_settings(load_settings(args.config), args.name)
        if args.nodes:
            try:
                print(nodes_text(client.nodes()))
            finally:
                client.close()
            return EXIT_OK
        if args.matrix:
            try:
                info = client.matrix()
            finally:
                client.close()
            print(matrix_text("Transfers", info["transfers"]))
            if info.get("eos"):
                print()
                print(matrix_text("EOS optimization tasks", info["eos"]))
            return EXIT_OK
        try:
            jobs = (client.jobs(args.constraint, long=True) if args.long
                    else client.job_rows(TABLE_COLUMNS, args.constraint))
        finally:
            client.close()
        if args.ids:
            wanted = set(args.ids)
            jobs = [j for j in jobs if j["id"] in wanted]
        if args.long:
            print("\n\n".join(j["ad"].strip() for j in jobs))
        else:
            print(table(jobs))
        return EXIT_OK

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
