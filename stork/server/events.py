"""The job's HTCondor user log, written after each state change the store committed.

Decisions say what to log as `stork.userlog.LogEvent` values (the outcome judge returns them
with the transition); `record` appends them with the rights of the job's owner. The
database is the record: a log that cannot be written is reported in the daemon's log and
never stops a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from stork.errors import StorkError
from stork.identity import RunAs, open_as
from stork.job import Job
from stork.userlog import LogEvent, UserLog

log = logging.getLogger(__name__)


def userlog_for(job: Job) -> UserLog | None:
    """The job's user log, written with its owner's rights."""
    if not job.spec.log:
        return None
    return UserLog(job.spec.log, job.id, opener=lambda path, flags, mode: open_as(
        RunAs.for_owner(job.owner_uid), path, flags, mode))


def write_userlog(job: Job, action: Callable[[UserLog], None]) -> None:
    """Append to the job's user log; a log that cannot be written never stops the job."""
    ulog = userlog_for(job)
    if ulog is None:
        return
    try:
        action(ulog)
    except (OSError, StorkError) as exc:
        log.warning("job %d: cannot write user log %s: %s", job.id, job.spec.log, exc)


def record(job: Job, when: float, events: Iterable[LogEvent]) -> None:
    """Append `events`, in order, to the job's user log (if it has one). Call it after the
    store committed the change they describe."""
    items = tuple(events)

    def append(ulog: UserLog) -> None:
        for event in items:
            ulog.write(when, event)

    if items:
        write_userlog(job, append)
