"""stork_status: one job's ad, attempt history and events."""

from __future__ import annotations

import sys
import time

from stork.cli.common import EXIT_FAILED, EXIT_OK, add_name, load_settings, parser, run, when
from stork.cli.q import progress_text
from stork.client import Client
from stork.transfer.base import summarize_error


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_status", "Show a job's ad, its attempts and its events.")
    add_name(p)
    p.add_argument("-wait", "--wait", action="store_true",
                   help="wait until each job has ended (the server answers when it does), "
                        "then show it; exit 1 if any failed")
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    args = p.parse_args(argv)

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
                if job.get("wait_reason"):
                    print(f"Waiting: {job['wait_reason']}")
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
                if job["state"] == "FAILED":
                    code = EXIT_FAILED
        finally:
            client.close()
        return code

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
