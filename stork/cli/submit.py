"""stork_submit: validate a submit file and queue its jobs."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from stork.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    add_name,
    error,
    load_settings,
    parser,
    run,
)
from stork.cli.q import bytes_pair, rate_text
from stork.client import Client
from stork.dataset.expand import Dataset, is_dataset, list_dataset, listed_locally
from stork.dataset.wire import to_wire
from stork.errors import DatasetError, SubmitError
from stork.job import DapType, JobSpec, JobState
from stork.jobad import estimate_ad
from stork.submit import USER_PREFIX, parse_submit, unknown_attributes
from stork.transfer.base import summarize_error
from stork.transfer.registry import Registry
from stork.transfer.tokens import discover, takes_token
from stork.urls import parse_url


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_submit", "Submit data placement jobs described as ClassAds.")
    add_name(p)
    p.add_argument("-lognotes", metavar="TEXT", help="text for the user log's submit event")
    p.add_argument("-stdin", action="store_true", help="read the submit file from standard input")
    p.add_argument("--dry-run", action="store_true", help="validate only; submit nothing")
    p.add_argument("--no-warn", action="store_true",
                   help="do not warn about attributes Stork does not know (likely typos); "
                        f"names starting with '{USER_PREFIX}' are never warned about")
    p.add_argument("--wait", action="store_true",
                   help="wait until the jobs end; exit 0 only if all completed")
    p.add_argument("--plot", metavar="FILE.png",
                   help="for estimation ads: draw the samples, fitted curve and optimum")
    p.add_argument("file", nargs="?", help="submit file (.dap)")
    args = p.parse_args(argv)
    if args.stdin == bool(args.file):
        p.error("give a submit FILE or -stdin (exactly one)")
    return run(lambda: _submit(args))


def _submit(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    if args.stdin:
        filename, text = "<stdin>", sys.stdin.read()
    else:
        filename = args.file
        try:
            with open(filename, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            error(f"{filename}: cannot read: {getattr(exc, 'strerror', None) or exc}")
            return EXIT_INVALID
    size = len(text.encode())
    if size > settings.max_submit_bytes:
        error(f"{filename}: {size} bytes is more than the limit STORK_MAX_SUBMIT_BYTES = "
              f"{settings.max_submit_bytes}; nothing was submitted")
        return EXIT_INVALID
    iwd = os.getcwd()
    registry = Registry.default(settings.module_dir, settings.globus_url_copy)
    if not args.no_warn:  # before any error: a typo often explains one ("dest_url is missing")
        for warning in unknown_attributes(text, filename):
            print(f"stork_submit: warning: {warning}", file=sys.stderr)
    try:
        specs = parse_submit(text, filename, iwd=iwd, registry=registry, lognotes=args.lognotes,
                             max_ads=settings.max_ads_per_submit)
    except SubmitError as exc:
        for problem in exc.problems:
            print(f"stork_submit: error: {problem}", file=sys.stderr)
        print(f"stork_submit: nothing from {filename} was submitted", file=sys.stderr)
        return EXIT_INVALID
    listed: dict[int, Dataset] = {}
    for index, spec in enumerate(specs, 1):
        if spec.is_dataset and (args.dry_run or listed_locally(spec.src_url, spec.url_list)):
            try:  # as the submitting user: what they cannot read is refused here
                listed[index] = list_dataset(spec.src_url, spec.dest_url,
                                             recursive=spec.recursive, url_list=spec.url_list,
                                             max_files=settings.max_files_per_job,
                                             x509proxy=spec.x509proxy)
            except DatasetError as exc:
                error(f"{filename}: ad {index}: {exc}")
                print(f"stork_submit: nothing from {filename} was submitted", file=sys.stderr)
                return EXIT_INVALID
    if args.dry_run:
        for index, spec in enumerate(specs, 1):
            what = (f"url_list {spec.url_list}" if spec.url_list
                    else f"{spec.src_url} -> {spec.dest_url}")
            found = ""
            if index in listed:
                d = listed[index]
                amount = "unknown size" if d.total_bytes is None else _bytes(d.total_bytes)
                found = f": {d.count} file{'s' if d.count != 1 else ''}, {amount}"
            print(f"{filename}: ad {index}: {spec.dap_type.value} {what}{found} (valid)")
        print(f"{filename}: {len(specs)} ad(s) valid; nothing submitted (--dry-run)")
        return EXIT_OK
    servers = {spec.stork_server for spec in specs if spec.stork_server}
    name = args.name
    if name is None and len(servers) > 1:
        error(f"{filename}: ads name different stork_server values ({', '.join(sorted(servers))}); "
              "submit them separately or choose one with -name")
        return EXIT_INVALID
    if name is None and servers:
        name = servers.pop()
    client = Client.from_settings(settings, name)
    try:
        wire = {str(i): to_wire(d, url_list=bool(specs[i - 1].url_list))
                for i, d in listed.items()}
        ids = client.submit(text, filename, iwd, args.lognotes, datasets=wire,
                            bearer_token=discovered_token(specs))
        for job_id in ids:
            print(f"Request assigned id: {job_id}", flush=True)
        estimations = [i for i, s in zip(ids, specs, strict=True)
                       if s.dap_type is DapType.ESTIMATION]
        code = EXIT_OK
        if estimations:  # answered at once: wait and print the results
            code = _print_estimates(client, estimations, args.plot)
        if not args.wait:
            return code
        return max(code, _wait(client, ids))
    finally:
        client.close()


def discovered_token(specs: list[JobSpec]) -> dict[str, str] | None:
    """The submitting user's token by the WLCG discovery order, for the ads that name no
    token file and reach an end that takes one (a url_list's ends the daemon looks at);
    None when none does or none is found."""
    if not any(s.bearer_tokens is None and (s.url_list or takes_token(s.src_url)
                                            or takes_token(s.dest_url)) for s in specs):
        return None
    found = discover(os.environ, os.getuid())
    if found is None:
        return None
    if found.path is not None:
        return {"where": found.where, "path": found.path}
    return {"where": found.where, "value": found.value or ""}


def _bytes(n: int) -> str:
    """1234567 -> "1,234,567 bytes (1.2 MiB)"."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def _print_estimates(client: Client, ids: list[int], plot: str | None) -> int:
    code = EXIT_OK
    for job_id in ids:
        job = client.wait_ended(job_id)  # its summary carries the result
        if job["state"] != JobState.COMPLETED.value:
            error(f"estimation {job_id} {job['state']}: {summarize_error(job['last_error'] or '')}")
            code = EXIT_FAILED
            continue
        result = job["result"]
        print(estimate_ad(job_id, result), flush=True)
        if plot:
            from stork.eos.plot import plot_estimate

            target = plot if len(ids) == 1 else plot.replace(".png", f"-{job_id}.png")
            src, dest = parse_url(job["src_url"]), parse_url(job["dest_url"])
            name = src.path.rsplit("/", 1)[-1]
            plot_estimate(result, target, title=f"{name}: {src.endpoint} -> {dest.endpoint}")
            print(f"plot written to {target}")
    return code


def _wait(client: Client, ids: list[int]) -> int:
    """Wait for every job to end (one long poll at a time; the server answers when the job
    ends), print each end, exit 0 only if all completed. On a terminal a dataset job shows a
    progress bar while it is waited for; elsewhere (DAGMan, pipes) only the end lines."""
    live = sys.stdout.isatty()
    ok = True
    for job_id in ids:
        job = _watch(client, job_id) if live else client.wait_ended(job_id)
        line = f"job {job_id}: {job['state']}"
        if job["state"] != JobState.COMPLETED.value and job.get("last_error"):
            line += f": {summarize_error(job['last_error'])}"
        print(line, flush=True)
        ok = ok and job["state"] == JobState.COMPLETED.value
    return EXIT_OK if ok else EXIT_FAILED


def _watch(client: Client, job_id: int) -> dict[str, Any]:
    """Like `client.wait_ended`, drawing a dataset job's progress bar from the long polls'
    answers (the server answers when the job has a new event or files end). A job that is
    no dataset is left to `wait_ended`; a dataset's bar appears once its files are listed."""
    bar: Any = None
    job: dict[str, Any] = {}
    try:
        for answer in client.follow(job_id):  # the last one: the job has ended
            job = answer["job"]
            if bar is None and job["files_total"]:
                bar = _progress_bar(job_id, job["files_total"])
            if bar is not None:
                _show(bar, job)
            elif not answer["ended"] and not _may_be_dataset(job):
                return client.wait_ended(job_id)
        return job
    finally:
        if bar is not None:
            bar.close()


def _may_be_dataset(job: dict[str, Any]) -> bool:
    """Whether a job not listed yet (no files) is a dataset: a directory or glob source that
    the server lists when its transfer starts."""
    return job["dap_type"] == DapType.TRANSFER.value and is_dataset(job["src_url"])


def _progress_bar(job_id: int, files_total: int) -> Any:
    from tqdm import tqdm  # type: ignore[import-untyped]

    return tqdm(total=files_total, desc=f"job {job_id}", unit="file", file=sys.stdout,
                dynamic_ncols=True, leave=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} files"
                           "{postfix} [{elapsed}]")


def _show(bar: Any, job: dict[str, Any]) -> None:
    """Draw a dataset's summary on its bar: files done (and failed), bytes, rate, time left."""
    parts = [f"{job['files_failed']} failed"] if job["files_failed"] else []
    parts.append(bytes_pair(job["bytes_done"], job["bytes_total"]))
    rate = job["rate_mbps"] or 0.0
    if job["state"] == JobState.RUNNING.value and rate > 0:
        parts.append(rate_text(rate))
        if job["bytes_total"] is not None:
            left_s = max(0, job["bytes_total"] - job["bytes_done"]) * 8 / (rate * 1e6)
            parts.append(f"{bar.format_interval(left_s)} left")
    elif job["state"] != JobState.RUNNING.value:
        parts.append(job["state"].lower())
    bar.total = job["files_total"]
    bar.n = job["files_done"]
    bar.set_postfix_str(", ".join(parts), refresh=False)
    bar.refresh()


if __name__ == "__main__":
    sys.exit(main())
