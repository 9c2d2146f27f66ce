"""stork_rm: remove jobs from the queue (stopping them if they run)."""

from __future__ import annotations

import sys

from stork.cli.common import EXIT_FAILED, EXIT_OK, add_name, error, load_settings, parser, run
from stork.client import Client
from stork.errors import ApiError, ServerUnreachable


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_rm", "Remove Stork jobs.")
    add_name(p)
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    args = p.parse_args(argv)

    def body() -> int:
        client = Client.from_settings(load_settings(args.config), args.name)
        code = EXIT_OK
        try:
            for job_id in args.ids:
                try:
                    client.remove(job_id)
                    print(f"Job {job_id} marked for removal")
                except ServerUnreachable:
                    raise
                except ApiError as exc:
                    error(f"job {job_id}: {exc}")
                    code = EXIT_FAILED
        finally:
            client.close()
        return code

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
