"""Jobs as ClassAds and as JSON: what `stork_q -l`, `-constraint` and `stork_status` see.

The user's own ad (with every attribute they wrote) is extended with the queue's view of
the job under the names below, so a constraint such as ``state == "IDLE" && owner ==
"alice"`` works as HTCondor users expect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import classad2

from stork.eos.types import EstimateResult
from stork.job import Job, JobState
from stork.store.base import Attempt


def _classad_value(value: Any) -> Any:
    """JSON-like values as ClassAd values: lists stay lists, dicts become nested ads."""
    if isinstance(value, dict):
        nested = classad2.ClassAd()
        for key, item in value.items():
            nested[key] = _classad_value(item)
        return nested
    if isinstance(value, (list, tuple)):
        return [_classad_value(item) for item in value]
    return value


def estimate_ad(job_id: int, result: EstimateResult | Mapping[str, Any]) -> str:
    """An estimation result (or its JSON form, as the job's `result` holds it) as the
    ClassAd stork_submit prints."""
    estimate = EstimateResult.of(result)
    ad = classad2.ClassAd()
    ad["stork_id"] = job_id
    ad["optimal_streams"] = estimate.optimal_streams
    ad["estimated_throughput_mbps"] = estimate.estimated_throughput_mbps
    if estimate.size_bytes is not None and estimate.estimated_time_s is not None:
        ad["estimated_time_s"] = estimate.estimated_time_s
        ad["size_bytes"] = estimate.size_bytes
    ad["model"] = estimate.model
    ad["sampling_time_s"] = estimate.sampling_time_s
    ad["sampler"] = estimate.sampler
    ad["from_history"] = estimate.from_history
    ad["reason"] = estimate.reason
    if estimate.optimization_source:  # sampled, budget, history or default, and why
        ad["optimization_source"] = estimate.optimization_source
        ad["optimization_reason"] = estimate.optimization_reason
    ad["samples"] = [_classad_value({"streams": n, "mbps": m}) for n, m in estimate.samples]
    if estimate.model_params:
        ad["model_params"] = _classad_value(dict(estimate.model_params))
    return str(ad)


def throughput_mbps(job: Job) -> float:
    """The job's one throughput figure, in Mbit/s: a completed transfer's average over the
    attempt that moved it (its result's `achieved_throughput_mbps`), a running attempt's
    current rate, otherwise 0."""
    if job.state is JobState.RUNNING:
        return job.rate_mbps
    achieved = job.result.get("achieved_throughput_mbps")
    if job.state is JobState.COMPLETED and isinstance(achieved, (int, float)):
        return float(achieved)
    return 0.0


_STATE_TEXT: dict[JobState, str] = {state: state.value for state in JobState}  # Enum.value
# is slow in a hot loop

# The fields every listing carries, in order: name -> how to read it from a Job. Listings
# give them as objects (`job_summary`) or, for `stork_q` over 100,000 jobs, as rows of the
# columns asked for (`job_row`): the same table either way.
SUMMARY: dict[str, Callable[[Job], Any]] = {
    "id": attrgetter("id"),
    "owner": attrgetter("owner"),
    "owner_uid": attrgetter("owner_uid"),
    "state": lambda job: _STATE_TEXT[job.state],
    "dap_type": attrgetter("dap_type"),
    "src_url": attrgetter("src_url"),
    "dest_url": attrgetter("dest_url"),
    "attempts": attrgetter("attempts"),
    "failures": attrgetter("failures"),
    "submitted_at": attrgetter("submitted_at"),
    "started_at": attrgetter("started_at"),
    "finished_at": attrgetter("finished_at"),
    "next_attempt_at": attrgetter("next_attempt_at"),
    "bytes_done": attrgetter("bytes_done"),
    "rate_mbps": throughput_mbps,
    "last_error": attrgetter("last_error"),
    "failure_kind": attrgetter("failure_kind"),
    "result": attrgetter("shown_result"),  # the flow series: GET /v1/jobs/ID/flow
    "files_total": attrgetter("files_total"),  # a dataset's files (0: a single-file job)
    "files_done": attrgetter("files_done"),
    "files_failed": attrgetter("files_failed"),
    "bytes_total": attrgetter("bytes_total"),  # None while a size is unknown
}


def job_summary(job: Job) -> dict[str, Any]:
    """The JSON fields every listing carries."""
    return {name: read(job) for name, read in SUMMARY.items()}


# SUMMARY fields read as the Job attribute of the same name
_PLAIN = frozenset(name for name, read in SUMMARY.items()
                   if repr(read) == repr(attrgetter(name)))


def row_reader(columns: Sequence[str], computed: Mapping[str, Callable[[Job], Any]]
               ) -> tuple[list[str], Callable[[Job], list[Any]]]:
    """For a listing by columns (all known: SUMMARY's or `computed`'s): the columns in the
    order rows carry them, and the function that reads a job's row. Plain fields come first
    and are read in one call (a listing of 100,000 jobs reads a million values)."""
    plain = [c for c in columns if c in _PLAIN]
    rest = [c for c in columns if c not in _PLAIN]
    readers = [computed.get(c) or SUMMARY[c] for c in rest]
    get_plain = attrgetter(*plain) if len(plain) > 1 else None
    if get_plain is None:
        readers = [SUMMARY[c] for c in plain] + readers
        return plain + rest, lambda job: [read(job) for read in readers]
    return plain + rest, lambda job: [*get_plain(job), *[read(job) for read in readers]]


def job_ad(job: Job) -> classad2.ClassAd:
    """The user's ad plus the queue's attributes."""
    ad = classad2.ClassAd(job.spec.ad_text)
    if job.spec.bearer_token_file and "bearer_token_file" not in ad:
        # found at submit (the WLCG discovery): the file, or the daemon's copy, by its name
        ad["bearer_token_file"] = job.spec.bearer_token_file
    ad["stork_id"] = job.id
    ad["owner"] = job.owner
    ad["owner_uid"] = job.owner_uid
    ad["state"] = job.state.value
    ad["attempts"] = job.attempts
    ad["failures"] = job.failures
    ad["submit_time"] = int(job.submitted_at)
    ad["bytes_transferred"] = job.bytes_done
    ad["transfer_rate_mbps"] = round(throughput_mbps(job), 3)
    if job.files_total:
        ad["files_total"] = job.files_total
        ad["files_done"] = job.files_done
        ad["files_failed"] = job.files_failed
        if job.bytes_total is not None:
            ad["bytes_total"] = job.bytes_total
    if job.started_at is not None:
        ad["start_time"] = int(job.started_at)
    if job.finished_at is not None:
        ad["completion_time"] = int(job.finished_at)
    if job.next_attempt_at:
        ad["next_attempt_time"] = int(job.next_attempt_at)
    if job.last_error:
        ad["last_error"] = job.last_error
    if job.failure_kind:
        ad["failure_kind"] = job.failure_kind
    for key, value in job.shown_result.items():
        ad[key] = _classad_value(value)
    return ad


def attempt_record(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "module": attempt.module,
        "src_url": attempt.src_url,
        "dest_url": attempt.dest_url,
        "exit_code": attempt.exit_code,
        "outcome": attempt.outcome,
        "error": attempt.error,
        "bytes_done": attempt.bytes_done,
        "node": attempt.node,
    }


def matches(constraint: classad2.ExprTree, job: Job) -> bool:
    """True when the constraint evaluates to true (undefined and errors count as false)."""
    value = constraint.eval(job_ad(job))
    return value is True


def parse_constraint(text: str) -> classad2.ExprTree:
    """Raise ValueError naming the expression when it is not a ClassAd expression."""
    try:
        return classad2.ExprTree(text)
    except Exception:  # noqa: BLE001 - classad2 raises ClassAdException, KeyError, ...
        raise ValueError(f"-constraint {text!r} is not a valid ClassAd expression") from None
