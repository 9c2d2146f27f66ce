"""What the two job stores (`sqlite`, `postgres`) share above their SQL dialects: the columns
they read, the objects they make of rows, the values they write, and the filters of the
history and transfer log queries, written with the backend's placeholder (``?`` or ``%s``).
No connection and no SQL that differs between the dialects is in here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from stork.dataset.expand import DatasetFile
from stork.errors import JobNotFound
from stork.job import DatasetFileRow, Event, FileState, Job, JobState
from stork.store.base import FileResult, HistoryEntry, Transition
from stork.translog import TransferRecord

# -- jobs --------------------------------------------------------------------------------------

JOB_COLUMNS = ("id, owner_uid, owner, state, spec, dap_type, src_url, dest_url, submitted_at, "
               "updated_at, attempts, failures, next_attempt_at, started_at, finished_at, "
               "last_error, failure_kind, bytes_done, rate_mbps, pid, result, files_total, "
               "files_done, files_failed, bytes_total")
# Job's fields in JOB_COLUMNS order (the spec column holds Job.spec_json)
_JOB_FIELDS = tuple("spec_json" if c == "spec" else c for c in JOB_COLUMNS.split(", "))
if tuple(f.name for f in fields(Job)) != _JOB_FIELDS or hasattr(Job, "__post_init__"):
    raise ImportError("stork.job.Job changed: update JOB_COLUMNS and job_from_row in "
                      "stork/store/rows.py")

_STATES = {state.value: state for state in JobState}


def job_from_row(row: Sequence[Any]) -> Job:
    """A Job from a row of JOB_COLUMNS. The listing hot path: it fills the instance's
    fields directly instead of through the frozen dataclass's __init__ (a third of the cost
    of listing 100,000 jobs); the import-time check above keeps the two in step."""
    values = dict(zip(_JOB_FIELDS, row, strict=True))
    values["state"] = _STATES[row[3]]
    values["result"] = json.loads(row[20]) if row[20] != "{}" else {}
    made = object.__new__(Job)
    object.__setattr__(made, "__dict__", values)
    return made


def only_job(jobs: Sequence[Job], job_id: int) -> Job:
    """The one job a select by id found, or JobNotFound."""
    if not jobs:
        raise JobNotFound(job_id)
    return jobs[0]


def merged_result(stored: str, values: dict[str, Any]) -> str:
    """The jobs.result column with `values` merged into the stored one."""
    return json.dumps({**json.loads(stored), **values}, sort_keys=True)


def end_detail(attempt: int, transition: Transition) -> dict[str, Any]:
    """The detail of the event that ends an attempt (`JobStore.finish_attempt`)."""
    detail = {"attempt": attempt, "exit_code": transition.exit_code, **transition.detail}
    if transition.error:
        detail["error"] = transition.error
    return detail


# -- events ------------------------------------------------------------------------------------

EVENT_COLUMNS = "seq, job_id, time, kind, detail"


def event_from_row(row: Sequence[Any]) -> Event:
    """An Event from a row of EVENT_COLUMNS."""
    return Event(job_id=int(row[1]), time=row[2], kind=row[3], detail=json.loads(row[4]),
                 seq=int(row[0]))


# -- the files of datasets ---------------------------------------------------------------------

FILE_COLUMNS = ("job_id, idx, src_url, dest_url, rel_path, size_bytes, state, bytes_done, "
                "attempts, failures, next_attempt_at, last_error, failure_kind, checksum, "
                "chunk, in_doubt")
FILE_STATES = {state.value: state for state in FileState}


def file_from_row(row: Sequence[Any]) -> DatasetFileRow:
    """A DatasetFileRow from a row of FILE_COLUMNS."""
    return DatasetFileRow(row[0], row[1], row[2], row[3], row[4], row[5], FILE_STATES[row[6]],
                          row[7], row[8], row[9], row[10], row[11], row[12], row[13], row[14],
                          bool(row[15]))


def bytes_total(files: Sequence[DatasetFile]) -> int | None:
    """The jobs.bytes_total of a dataset: the sum of its files' sizes, None when a size is
    unknown."""
    sizes = [f.size_bytes for f in files]
    return None if any(size is None for size in sizes) else sum(s or 0 for s in sizes)


def counter_changes(was: FileState, was_bytes: int, result: FileResult) -> tuple[int, int, int]:
    """How the job's files_done, files_failed and bytes_done change when a file that was
    `was` (with `was_bytes` bytes done) takes `result`: bytes count while a file is DONE."""
    now = result.state
    return ((now is FileState.DONE) - (was is FileState.DONE),
            (now is FileState.FAILED) - (was is FileState.FAILED),
            (result.bytes_done if now is FileState.DONE else 0)
            - (was_bytes if was is FileState.DONE else 0))


def file_result_values(job_id: int, r: FileResult) -> tuple[Any, ...]:
    """The values of the UPDATE of files that applies `r` (state, bytes_done, failures
    added, next_attempt_at, last_error, failure_kind, checksum, then job_id and idx)."""
    return (r.state.value, r.bytes_done, int(r.count_failure), r.next_attempt_at, r.error,
            r.failure_kind, r.checksum, job_id, r.index)


# -- history -----------------------------------------------------------------------------------

HISTORY_COLUMNS = ("time, src_host, dest_host, arguments, kind, streams, throughput_mbps, "
                   "bytes_moved, duration_s, model, samples, job_id")
_HISTORY_FIELDS = tuple(HISTORY_COLUMNS.split(", "))


def history_insert(mark: str) -> str:
    """The INSERT of one history row, with the backend's placeholder."""
    return (f"INSERT INTO history ({HISTORY_COLUMNS}) "  # noqa: S608 - constant SQL; values are bound
            f"VALUES ({', '.join(mark for _ in _HISTORY_FIELDS)})")


def history_values(entry: HistoryEntry) -> tuple[Any, ...]:
    """The values of `history_insert` for `entry`."""
    return (entry.time, entry.src_host, entry.dest_host, entry.arguments, entry.kind,
            entry.streams, entry.throughput_mbps, entry.bytes_moved, entry.duration_s,
            entry.model, json.dumps(entry.samples), entry.job_id)


def history_from_row(row: Sequence[Any]) -> HistoryEntry:
    """A HistoryEntry from a row of HISTORY_COLUMNS."""
    values = dict(zip(_HISTORY_FIELDS, row, strict=True))
    return HistoryEntry(**{**values, "samples": json.loads(values["samples"])})


def history_query(src_host: str, dest_host: str, *, symmetric: bool, arguments: str | None,
                  kind: str | None, since: float, limit: int, mark: str
                  ) -> tuple[str, list[Any]]:
    """The SELECT of `JobStore.history` and its values, with the backend's placeholder."""
    pair = f"(src_host = {mark} AND dest_host = {mark})"
    params: list[Any] = [src_host, dest_host]
    if symmetric:
        pair = f"({pair} OR (src_host = {mark} AND dest_host = {mark}))"
        params += [dest_host, src_host]
    where = [pair, f"time >= {mark}"]
    params.append(since)
    if arguments is not None:
        where.append(f"arguments = {mark}")
        params.append(arguments)
    if kind is not None:
        where.append(f"kind = {mark}")
        params.append(kind)
    sql = (f"SELECT {HISTORY_COLUMNS} FROM history WHERE "  # noqa: S608 - constant SQL; values are bound
           + " AND ".join(where) + f" ORDER BY time DESC, id DESC LIMIT {mark}")
    return sql, [*params, limit]


# -- the transfer log --------------------------------------------------------------------------

TRANSFER_FIELDS = tuple(f.name for f in fields(TransferRecord))
TRANSFER_COLUMNS = ", ".join(TRANSFER_FIELDS)
_FAST = TRANSFER_FIELDS.index("fast")


def transfer_from_row(row: Sequence[Any]) -> TransferRecord:
    """A TransferRecord from a row of TRANSFER_COLUMNS (`fast` is stored as an integer)."""
    return TransferRecord(**{**dict(zip(TRANSFER_FIELDS, row, strict=True)),
                             "fast": bool(row[_FAST])})


def transfers_query(src_host: str | None, dest_host: str | None, since: float, limit: Any,
                    mark: str) -> tuple[str, list[Any]]:
    """The SELECT of `JobStore.transfers` and its values, with the backend's placeholder;
    `limit` is the backend's value for LIMIT (its "no limit" for None)."""
    where: list[str] = [f"time >= {mark}"]
    params: list[Any] = [since]
    for column, value in (("src_host", src_host), ("dest_host", dest_host)):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    sql = (f"SELECT {TRANSFER_COLUMNS} FROM transfers "  # noqa: S608 - constant SQL; values are bound
           f"WHERE {' AND '.join(where)} ORDER BY time DESC, id DESC LIMIT {mark}")
    return sql, [*params, limit]


def numbered_transfer(row: Sequence[Any]) -> tuple[int, TransferRecord]:
    """(row id, record) from a row of "id, " + TRANSFER_COLUMNS (`transfers_after`)."""
    return int(row[0]), transfer_from_row(row[1:])
