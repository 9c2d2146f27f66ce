"""What the API can do, independent of HTTP: submit, list, status, remove.

Callers are identified by the transport (peer credentials on the Unix socket, a token on
TCP) and passed in as a `Caller`; everything a request does runs with the caller's rights.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from stork import __version__
from stork.caller import Caller
from stork.dataset.expand import Dataset, DatasetFile, listed_locally
from stork.dataset.wire import from_wire
from stork.eos.access import check_local_ends, request_from
from stork.eos.service import EosService
from stork.errors import (
    DatasetError,
    InvalidRequest,
    PermissionDenied,
    StoreUnavailable,
    SubmitError,
    SubmitProblem,
    TransferLogError,
)
from stork.identity import RunAs
from stork.job import FLOW_RESULT_KEY, DapType, FileState, Job, JobSpec, JobState
from stork.jobad import (
    SUMMARY,
    attempt_record,
    job_ad,
    job_summary,
    matches,
    parse_constraint,
    row_reader,
)
from stork.server import kept_tokens
from stork.server.dispatcher import Dispatcher
from stork.server.estimation import EstimationRunner
from stork.server.events import write_userlog
from stork.store.base import HistoryEntry, JobStore, NodeInfo
from stork.submit import TOKEN_ATTRIBUTES, parse_submit
from stork.transfer.tokens import takes_token
from stork.translog import parse_grid_text
from stork.urls import parse_url
from stork.userlog import UserLog


def proxy_problem(path: str | None, caller: Caller) -> str | None:
    """Why the x509proxy at `path` may not be used by `caller`, or None if it may: it must
    be the caller's own regular file with mode 0600 (GSI refuses anything looser)."""
    if path is None or path == "default":
        return None
    if caller.uid < 0:
        return "a proxy file needs a local submitter (the Unix socket), not the TCP API"
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_uid != caller.uid:
        return f"{path} belongs to uid {info.st_uid}, not to the submitter ({caller.name})"
    if info.st_mode & 0o077:
        return (f"{path} has mode {stat.S_IMODE(info.st_mode):04o}; a proxy must be 0600 "
                f"(chmod 600 {path})")
    return None


def token_problem(path: str | None, caller: Caller, found_by: str | None = None) -> str | None:
    """Why the bearer token file at `path` may not be used by `caller`, or None if it may:
    the caller's own regular file with mode 0600 (XRootD refuses a looser one). `found_by`
    names the discovery that found it."""
    if path is None:
        return None
    if caller.uid < 0:
        return "a token file needs a local submitter (the Unix socket), not the TCP API"
    problem = proxy_problem(path, caller)
    if problem is None:
        return None
    problem = problem.replace("a proxy must be 0600", "a token file must be 0600")
    return f"{problem} (found by {found_by})" if found_by else problem


def wants_token(spec: JobSpec, files: Iterable[DatasetFile] = ()) -> bool:
    """Whether a job names no token of its own and reaches an end that takes one (its
    URLs, or those of its url_list's `files`)."""
    urls = [spec.src_url, spec.dest_url, *(u for f in files for u in (f.src_url, f.dest_url))]
    return spec.bearer_tokens is None and any(takes_token(url) for url in urls)


def may_see(caller: Caller, owner_uid: int) -> bool:
    """A job's details are for its owner and root."""
    return caller.uid in (0, owner_uid)


class Service:
    def __init__(self, dispatcher: Dispatcher, estimations: EstimationRunner | None = None,
                 eos: EosService | None = None) -> None:
        self.dispatcher = dispatcher
        self.estimations = estimations
        self.eos = eos
        self.started_at = time.time()

    @property
    def store(self) -> JobStore:
        return self.dispatcher.store

    def ping(self) -> dict[str, Any]:
        settings = self.dispatcher.settings
        outage = self.store.outage
        return {"server": "stork_server", "version": __version__, "pid": os.getpid(),
                "running": self.dispatcher.running_count(),
                "max_num_jobs": settings.max_num_jobs, "accepting": self.dispatcher.accepting,
                "config": settings.source,
                "store_outage": None if outage is None else
                f"{outage.cause} ({outage.location}) since {outage.since:.0f}"}

    def submit(self, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
        text = body.get("text")
        filename = body.get("filename") or "<submit>"
        iwd = body.get("iwd") or "/"
        lognotes = body.get("lognotes")
        if not isinstance(text, str):
            raise InvalidRequest("'text' must be the submit file's contents as a string")
        if not isinstance(filename, str) or not isinstance(iwd, str) or not iwd.startswith("/"):
            raise InvalidRequest("'filename' must be a string and 'iwd' an absolute path")
        settings = self.dispatcher.settings
        size = len(text.encode())
        if size > settings.max_submit_bytes:
            raise InvalidRequest(f"{filename}: {size} bytes is more than the limit "
                                 f"STORK_MAX_SUBMIT_BYTES = {settings.max_submit_bytes}")
        if lognotes is not None and not isinstance(lognotes, str):
            raise InvalidRequest("'lognotes' must be a string")
        specs = parse_submit(text, filename, iwd=iwd, registry=self.dispatcher.registry,
                             lognotes=lognotes, max_ads=settings.max_ads_per_submit)
        problems = [SubmitProblem(filename, index, None, "x509proxy", message)
                    for index, spec in enumerate(specs, 1)
                    if (message := proxy_problem(spec.x509proxy, caller)) is not None]
        if problems:
            raise SubmitError(problems)
        estimation = [i for i, s in enumerate(specs, 1) if s.dap_type is DapType.ESTIMATION]
        if estimation and self.estimations is None:
            raise InvalidRequest(
                f"{filename}: ad {estimation[0]}: attribute 'dap_type': this server runs no EOS "
                "for estimation jobs")
        datasets = self._datasets(specs, body.get("datasets"), filename, settings.max_files_per_job)
        wanting = {i for i, spec in enumerate(specs)
                   if wants_token(spec, datasets[i].files if i in datasets else ())}
        specs, found = self._discovered_tokens(specs, wanting, body.get("bearer_token"), caller)
        problems = [SubmitProblem(filename, index, None, attr, message)
                    for index, spec in enumerate(specs, 1) for attr in TOKEN_ATTRIBUTES
                    if (message := token_problem(getattr(spec, attr), caller,
                                                 found.get(getattr(spec, attr) or "")))
                    is not None]
        if problems:
            raise SubmitError(problems)
        if body.get("dry_run"):
            return {"ids": [], "dry_run": True, "count": len(specs),
                    "files": {str(i + 1): [d.count, d.total_bytes] for i, d in datasets.items()}}
        specs = [dataclasses.replace(spec, src_url=datasets[i].files[0].src_url,
                                     dest_url=datasets[i].files[0].dest_url)
                 if spec.url_list and i in datasets else spec for i, spec in enumerate(specs)]
        specs = self._keep_token_values(specs, wanting, body.get("bearer_token"), caller)
        now = self.dispatcher.clock()
        try:
            ids = self.store.submit(specs, caller.uid, caller.name, now,
                                    {i: d.files for i, d in datasets.items()})
        except BaseException:
            for spec in specs:
                kept_tokens.forget(settings.state_dir, spec.bearer_token_file)
            raise
        for job_id, spec in zip(ids, specs, strict=True):
            if spec.log:
                write_userlog(self.store.get(job_id),
                              functools.partial(UserLog.submit, when=now, lognotes=spec.lognotes))
            if spec.dap_type is DapType.ESTIMATION and self.estimations is not None:
                self.estimations.start(job_id)
        self.dispatcher.admit_new([(i, s.src_url, s.dest_url)
                                   for i, s in zip(ids, specs, strict=True)
                                   if s.dap_type is DapType.TRANSFER])
        self.dispatcher.wake()
        return {"ids": ids}

    @staticmethod
    def _discovered_tokens(specs: list[JobSpec], wanting: set[int], discovered: Any,
                           caller: Caller) -> tuple[list[JobSpec], dict[str, str]]:
        """The specs at the positions `wanting` get the file stork_submit found by the WLCG
        discovery order (`discovered`: {"where", "path"}); the files found so, with where
        they came from."""
        if not isinstance(discovered, dict) or not isinstance(discovered.get("path"), str):
            return specs, {}
        path, where = discovered["path"], str(discovered.get("where") or "discovery")
        if caller.uid < 0 or not os.path.isabs(path):
            return specs, {}
        return [dataclasses.replace(spec, bearer_token_file=path) if i in wanting else spec
                for i, spec in enumerate(specs)], {path: where}

    def _keep_token_values(self, specs: list[JobSpec], wanting: set[int], discovered: Any,
                           caller: Caller) -> list[JobSpec]:
        """The specs at the positions `wanting` get a kept copy each of the ``BEARER_TOKEN``
        value stork_submit found (`discovered`: {"where", "value"})."""
        if not isinstance(discovered, dict) or not isinstance(discovered.get("value"), str) \
                or caller.uid < 0 or not wanting:
            return specs
        state_dir = self.dispatcher.settings.state_dir
        return [dataclasses.replace(spec, bearer_token_file=kept_tokens.keep(
                    state_dir, discovered["value"], caller.uid))
                if i in wanting else spec for i, spec in enumerate(specs)]

    @staticmethod
    def _datasets(specs: list[JobSpec], wire: Any, filename: str, max_files: int
                  ) -> dict[int, Dataset]:
        """The files of the datasets stork_submit listed (file:// sources and url_lists), by
        the position of their ad; checked again here. Remote datasets are listed later, by
        the daemon as the job's owner."""
        if wire is not None and not isinstance(wire, dict):
            raise InvalidRequest("'datasets' must map ad numbers to their files")
        wire = wire or {}
        found: dict[int, Dataset] = {}
        problems = []
        for index, spec in enumerate(specs, 1):
            if not spec.is_dataset or not listed_locally(spec.src_url, spec.url_list):
                continue
            if str(index) not in wire:
                problems.append(SubmitProblem(filename, index, None, "src_url",
                                              "a local dataset is listed by stork_submit: "
                                              "the request must carry its files"))
                continue
            try:
                found[index - 1] = from_wire(spec.src_url, spec.dest_url, spec.url_list,
                                             wire[str(index)], max_files=max_files)
            except DatasetError as exc:
                problems.append(SubmitProblem(filename, index, None,
                                              "url_list" if spec.url_list else "src_url",
                                              str(exc)))
        if problems:
            raise SubmitError(problems)
        return found

    def list_jobs(self, constraint: str | None, long: bool, states: list[str] | None,
                  caller: Caller, columns: list[str] | None = None) -> dict[str, Any]:
        """Jobs in id order, as objects (`{"jobs": [...]}`), or with `columns` as rows of
        those fields (`{"columns": [...], "rows": [[...], ...]}`: a third of the bytes, for
        `stork_q` over a large queue)."""
        wanted = None
        if states:
            try:
                wanted = [JobState(s.upper()) for s in states]
            except ValueError:
                raise InvalidRequest(f"unknown state in {states}; known: "
                                     f"{', '.join(s.value for s in JobState)}") from None
        reader = self._row_reader(columns) if columns is not None else None
        jobs = self.store.list_jobs(wanted)
        if constraint:
            try:
                expr = parse_constraint(constraint)
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
            jobs = [job for job in jobs if matches(expr, job)]
        if reader is not None:
            order, read = reader
            return {"columns": order, "rows": [read(job) for job in jobs]}
        out = []
        for job in jobs:
            item = self._summary(job)
            if long and may_see(caller, job.owner_uid):
                item["ad"] = str(job_ad(job))  # other users' full ads are not shown
            out.append(item)
        return {"jobs": out}

    def _row_reader(self, columns: list[str]
                    ) -> tuple[list[str], Callable[[Job], list[Any]]]:
        computed: dict[str, Callable[[Job], Any]] = {"wait_reason": self.dispatcher.wait_reason}
        unknown = [c for c in columns if c not in SUMMARY and c not in computed]
        if unknown or not columns:
            raise InvalidRequest(f"unknown column(s) {', '.join(unknown) or '(none given)'}; "
                                 f"known: {', '.join([*SUMMARY, *computed])}")
        return row_reader(columns, computed)

    def _own_job(self, job_id: int, caller: Caller, action: str) -> Job:
        """The job, if `caller` may `action` it (its owner or root); else PermissionDenied."""
        job = self.store.get(job_id)
        if not may_see(caller, job.owner_uid):
            raise PermissionDenied(f"job {job_id} belongs to {job.owner}; only its owner or "
                                   f"root may {action}")
        return job

    def _summary(self, job: Job) -> dict[str, Any]:
        """A listing's fields and why the job waits."""
        item = job_summary(job)
        item["wait_reason"] = self.dispatcher.wait_reason(job)
        return item

    def status(self, job_id: int, caller: Caller) -> dict[str, Any]:
        job = self._own_job(job_id, caller, "see its details")
        item = self._summary(job)
        item["ad"] = str(job_ad(job))
        return {
            "job": item,
            "attempts": [attempt_record(a) for a in self.store.attempts(job_id)],
            "events": [{"seq": e.seq, "time": e.time, "kind": e.kind, "detail": e.detail}
                       for e in self.store.events(job_id)],
        }

    def flow(self, job_id: int, caller: Caller) -> dict[str, Any]:
        """The job's measured flow as it keeps it (`stork.engine.series`): its last minutes
        of rate, one point per window; empty for a job that has not moved data through the
        engine."""
        job = self._own_job(job_id, caller, "see its flow")
        kept = job.result.get(FLOW_RESULT_KEY) or {}
        return {"id": job.id, "state": job.state.value,
                "start_time": kept.get("start_time"), "t": kept.get("t", []),
                "mbps": kept.get("mbps", [])}

    def history(self, src: str, dest: str, limit: int) -> dict[str, Any]:
        """The EOS's optimizations between two hosts (or URLs) and the finished transfers
        the transfer log holds between them, newest first, in one shape."""
        def end(text: str) -> str:
            try:
                return parse_url(text).endpoint if "://" in text else text
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None

        def host(text: str) -> str:  # the transfer log names hosts, without ports
            try:
                return parse_url(text if "://" in text else f"ftp://{text}/_").host \
                    or "localhost"
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None

        symmetric = self.eos.settings.eos_symmetric_pairs if self.eos else True
        rows = [asdict(r) for r in self.store.history(
            end(src), end(dest), symmetric=symmetric, kind="optimization", limit=limit)]
        pairs = {(host(src), host(dest))} | ({(host(dest), host(src))} if symmetric else set())
        for a, b in pairs:
            rows += [asdict(HistoryEntry(
                time=t.time, src_host=t.src_host, dest_host=t.dest_host, arguments="",
                kind="transfer", streams=t.streams, throughput_mbps=t.throughput_mbps,
                bytes_moved=t.bytes_moved, duration_s=t.duration_s, job_id=t.job_id))
                for t in self.store.transfers(a, b, limit=limit)]
        rows.sort(key=lambda r: r["time"], reverse=True)
        return {"symmetric": symmetric, "history": rows[:limit]}

    def transfers(self, src: str | None, dest: str | None, since: float,
                  limit: int | None) -> dict[str, Any]:
        """Transfer log rows (newest first); anyone may read them, as the EOS history."""
        rows = self.store.transfers(src or None, dest or None, since=since, limit=limit)
        return {"transfers": [asdict(r) for r in rows]}

    def import_transfers(self, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """Add the rows of a table in the HARP grid format to the transfer log. Every
        optimizer learns from it, so only root or the daemon's own user may add to it. The
        answer says what was added and which rows were skipped, and why."""
        if caller.uid not in (0, os.getuid()):
            raise PermissionDenied("only root or the user stork_server runs as may import "
                                   "transfer logs: every optimizer learns from them")
        text, name = body.get("text"), body.get("name")
        if not isinstance(text, str) or not isinstance(name, str) or not name:
            raise InvalidRequest("'text' must be the table's contents and 'name' its file name")
        try:
            records, skipped = parse_grid_text(text, name)
        except TransferLogError as exc:
            raise InvalidRequest(str(exc)) from None
        added = self.store.add_transfers(records)
        return {"added": added, "skipped": [asdict(s) for s in skipped]}

    def nodes(self) -> dict[str, Any]:
        """The stork_servers sharing this queue (this one alone with SQLite)."""
        store = self.store
        nodes = store.nodes() if store.shared else [NodeInfo(
            store.node, os.getpid(), self.started_at, 0.0, self.dispatcher.running_count())]
        return {"shared": store.shared, "node": store.node,
                "nodes": [asdict(n) for n in nodes]}

    def matrix(self) -> dict[str, Any]:
        """The transfer matrix and the EOS's, with their last selections."""
        return {"transfers": self.dispatcher.matrix_snapshot(),
                "eos": self.eos.snapshot() if self.eos else None}

    def estimate(self, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """An estimation answered directly, its samples run as the caller (TCP callers:
        nobody), exactly like an estimation job's; a local end the caller may not use is
        refused before any byte moves."""
        if self.eos is None:
            raise InvalidRequest("this server runs no EOS")
        request = request_from(body)
        problem = proxy_problem(request.x509proxy, caller)
        if problem is not None:
            raise PermissionDenied(f"x509proxy: {problem}")
        for path in request.tokens.files() if request.tokens else ():
            if (problem := token_problem(path, caller)) is not None:
                raise PermissionDenied(f"bearer token file: {problem}")
        run_as = RunAs.for_owner(caller.uid)
        check_local_ends(request.src_url, request.dest_url, caller, run_as, allow_local=True)
        request = dataclasses.replace(request, run_as=run_as)
        return {"result": self.eos.estimate(request).to_json()}

    def files(self, job_id: int, caller: Caller, *, states: list[str] | None, offset: int,
              limit: int | None) -> dict[str, Any]:
        """The files of a dataset job (the owner's or root's), in index order."""
        job = self._own_job(job_id, caller, "see the files of")
        try:
            wanted = [FileState(s.upper()) for s in states] if states else None
        except ValueError:
            raise InvalidRequest(f"unknown file state in {states}; file states are "
                                 f"{', '.join(s.value for s in FileState)}") from None
        if offset < 0 or (limit is not None and limit < 0):
            raise InvalidRequest("offset and limit must not be negative")
        rows = self.store.files(job_id, wanted, offset=offset, limit=limit)
        return {"job_id": job.id, "files_total": job.files_total,
                "files": [{**asdict(r), "state": r.state.value} for r in rows]}

    def wait_check(self, job_id: int, caller: Caller, *, since: int,
                   terminal_only: bool, files_seen: int | None = None
                   ) -> tuple[bool, dict[str, Any]]:
        """For a long poll: (done, answer). Done when the job has an event newer than
        `since`, or (given `files_seen`, the files ended that the caller saw) when more of a
        dataset's files have ended; with `terminal_only`, only when it has ended. `seq` in the
        answer is the job's latest event, to pass as `since` next time."""
        job = self._own_job(job_id, caller, "wait for it")
        events = self.store.events(job_id)
        seq = events[-1].seq if events else 0
        item = self._summary(job)
        ended = job.state.terminal
        changed = seq > since or (files_seen is not None
                                  and job.files_done + job.files_failed != files_seen)
        done = ended if terminal_only else (changed or ended)
        return done, {"job": item, "seq": seq, "changed": changed, "ended": ended}

    def remove(self, job_id: int, caller: Caller) -> dict[str, Any]:
        outage = self.store.outage
        if outage is not None:  # a removal would wait for the store: refuse it at once
            raise StoreUnavailable(f"cannot remove job {job_id} now: the job store cannot be "
                                   f"written ({outage.cause}; {outage.location}); try again later")
        job = self.dispatcher.remove(job_id, caller.uid, caller.name)
        return {"job": job_summary(job)}
