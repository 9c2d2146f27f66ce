"""stork_status: one job's ad, attempt history and events, or a dataset job's files."""

from __future__ import annotations

import sys
import time
from typing import Any

from stork.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_name,
    human_bytes,
    load_settings,
    parser,
    run,
    when,
)
from stork.cli.q import progress_text
from stork.client import Client
from stork.dataset.expand import is_dataset
from stork.transfer.base import summarize_error

FILES_PAGE = 1000  # files asked for per request: a dataset of 100,000 files is 100 requests
ALL_FILES = "ALL"  # `-files` without a state filter


def file_line(f: dict[str, Any]) -> str:
    """One file of a dataset: index, state, size, attempts, path, and its error summarised."""
    size = "?" if f["size_bytes"] is None else human_bytes(f["size_bytes"])
    line = (f"  {f['index']:>6}  {f['state']:<7}  {size:>10}  {f['attempts']:>3}  "
            f"{f['rel_path'] or f['src_url']}")
    if f["last_error"]:
        line += f"  error: {summarize_error(f['last_error'])}"
    return line


def print_files(client: Client, job: dict[str, Any], states: list[str] | None) -> None:
    """A job's files, one line each, fetched a page at a time (printed as they come)."""
    job_id = job["id"]
    if not job["files_total"]:
        if job["dap_type"] == "transfer" and is_dataset(job["src_url"]):
            print(f"Job {job_id} is a dataset not listed yet: the server lists its files "
                  "when its transfer starts")
        else:
            print(f"Job {job_id} is a single-file job: it has no file list")
        return
    which = f" ({', '.join(states)})" if states else ""
    print(f"Files{which}:")
    print(f"  {'INDEX':>6}  {'STATE':<7}  {'SIZE':>10}  {'ATT':>3}  PATH")
    offset = 0
    while True:
        page = client.files(job_id, states=states, offset=offset, limit=FILES_PAGE)["files"]
        for f in page:
            print(file_line(f))
        offset += len(page)
        if len(page) < FILES_PAGE:
            break
    print(f"{offset} of {job['files_total']} file(s)")


def _states(text: str) -> list[str] | None:
    """`-files FAILED,RUNNING` -> ["FAILED", "RUNNING"]; `-files` alone -> None (all)."""
    if text == ALL_FILES:
        return None
    return [s.strip().upper() for s in text.split(",") if s.strip()] or None


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_status", "Show a job's ad, its attempts and its events.")
    add_name(p)
    p.add_argument("-wait", "--wait", action="store_true",
                   help="wait until each job has ended (the server answers when it does), "
                        "then show it; exit 1 if any failed")
    p.add_argument("-files", "--files", nargs="?", const=ALL_FILES, metavar="STATES",
                   help="list a dataset job's files instead (index, state, size, attempts, "
                        "error); STATES, comma-separated, keeps only files in those states "
                        "(PENDING, RUNNING, DONE, FAILED)")
    p.add_argument("ids", nargs="*", type=int, metavar="ID")
    args = p.parse_args(argv)
    if args.files is not None and args.files.isdigit():  # `-files 7`: 7 is a job, not states
        args.ids.insert(0, int(args.files))
        args.files = ALL_FILES
    if not args.ids:
        p.error("the following arguments are required: ID")

    def body() -> int:
        client = Client.from_settings(load_settings(args.config), args.name)
        code = EXIT_OK
        try:
            for job_id in args.ids:
                if args.wait:
                    client.wait_ended(job_id)
                info = client.status(job_id)
                job = info["job"]
                print(f"Job {job_id}: {job['state']} ({progress_text(job, time.time())})")
                if job["state"] == "FAILED":
                    code = EXIT_FAILED
                if args.files is not None:
                    print_files(client, job, _states(args.files))
                    continue
                if job.get("wait_reason"):
                    print(f"Waiting: {job['wait_reason']}")
                if (job.get("result") or {}).get("x509proxy_warning"):
                    print(f"Warning: {job['result']['x509proxy_warning']}")
                if (job.get("result") or {}).get("bearer_token_warning"):
                    print(f"Warning: {job['result']['bearer_token_warning']}")
                print(job["ad"].strip())
                print("Attempts:")
                if not info["attempts"]:
                    print("  none yet")
                for a in info["attempts"]:
                    outcome = a["outcome"] or "running"
                    print(f"  {a['number']:>3}  {when(a['started_at'])}  {outcome:<11} "
                          f"exit={a['exit_code'] if a['exit_code'] is not None else '-'}  "
                          f"{a['module']}  {a['src_url']} -> {a['dest_url']}")
                    if a["error"]:
                        print(f"       error: {summarize_error(a['error'])}")
                print("Events:")
                for e in info["events"]:
                    print(f"  {when(e['time'])}  {e['kind']:<15} "
                          + ", ".join(f"{k}={v}" for k, v in sorted(e["detail"].items())
                                      if k != "error"))
        finally:
            client.close()
        return code

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
