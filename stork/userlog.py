"""HTCondor user log writer: the events DAGMan and htcondor2.JobEventLog read.

The cluster id is the Stork job id; proc and subproc are 0. Each event is appended and
flushed in one write, so a reader never sees half an event.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

_HOST = "<127.0.0.1:0>"

SUBMIT, EXECUTE, TERMINATED, GENERIC, ABORTED = 0, 1, 5, 8, 9


@dataclass(frozen=True)
class LogEvent:
    """One event to append, as a value (decisions return them; `UserLog.write` appends)."""

    code: int  # SUBMIT, EXECUTE, TERMINATED, GENERIC or ABORTED
    text: str = ""  # GENERIC: the information; ABORTED: the reason; SUBMIT: the log notes
    return_value: int = 0  # TERMINATED
    bytes_done: int = 0  # TERMINATED


def submitted(lognotes: str | None = None) -> LogEvent:
    return LogEvent(SUBMIT, lognotes or "")


def executing() -> LogEvent:
    return LogEvent(EXECUTE)


def note(text: str) -> LogEvent:
    return LogEvent(GENERIC, text)


def terminated(return_value: int, bytes_done: int = 0, text: str = "") -> LogEvent:
    """TERMINATED; `text` (a dataset's file counts) is one more line of the event."""
    return LogEvent(TERMINATED, text, return_value=return_value, bytes_done=bytes_done)


def aborted(reason: str) -> LogEvent:
    return LogEvent(ABORTED, reason)


def _header(code: int, job_id: int, when: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return f"{code:03d} ({job_id:03d}.000.000) {stamp} "


def _clean(text: str) -> str:
    """One line of free text: no newlines (they would end the event early)."""
    return " ".join(text.replace("...", "..").split())


class UserLog:
    """Appends events to one job's user log file."""

    def __init__(self, path: str, job_id: int, host: str | None = None,
                 opener: Callable[[str, int, int], int] = os.open) -> None:
        self.path = path
        self.job_id = job_id
        self.host = host or f"<{socket.gethostname()}>"
        self.opener = opener  # the daemon passes one that opens as the job's owner

    def _append(self, text: str) -> None:
        data = text.encode()
        fd = self.opener(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def write(self, when: float, event: LogEvent) -> None:
        """Append one `LogEvent`."""
        if event.code == SUBMIT:
            self.submit(when, event.text or None)
        elif event.code == EXECUTE:
            self.execute(when)
        elif event.code == TERMINATED:
            self.terminated(when, event.return_value, event.bytes_done, event.text)
        elif event.code == GENERIC:
            self.generic(when, event.text)
        elif event.code == ABORTED:
            self.aborted(when, event.text)
        else:
            raise ValueError(f"unknown user log event code {event.code}")

    def submit(self, when: float, lognotes: str | None = None) -> None:
        text = _header(0, self.job_id, when) + f"Job submitted from host: {_HOST}\n"
        if lognotes:
            text += f"    {_clean(lognotes)}\n"
        self._append(text + "...\n")

    def execute(self, when: float) -> None:
        self._append(_header(1, self.job_id, when) + f"Job executing on host: {_HOST}\n...\n")

    def generic(self, when: float, info: str) -> None:
        self._append(_header(8, self.job_id, when) + _clean(info)[:1000] + "\n...\n")

    def terminated(self, when: float, return_value: int, bytes_done: int = 0,
                   text: str = "") -> None:
        usage = "Usr 0 00:00:00, Sys 0 00:00:00"
        extra = f"\t{_clean(text)}\n" if text else ""
        self._append(
            _header(5, self.job_id, when) + "Job terminated.\n"
            f"\t(1) Normal termination (return value {return_value})\n"
            f"\t\t{usage}  -  Run Remote Usage\n"
            f"\t\t{usage}  -  Run Local Usage\n"
            f"\t\t{usage}  -  Total Remote Usage\n"
            f"\t\t{usage}  -  Total Local Usage\n"
            f"\t{bytes_done}  -  Run Bytes Sent By Job\n"
            "\t0  -  Run Bytes Received By Job\n"
            f"\t{bytes_done}  -  Total Bytes Sent By Job\n"
            "\t0  -  Total Bytes Received By Job\n" + extra + "...\n")

    def aborted(self, when: float, reason: str) -> None:
        self._append(_header(9, self.job_id, when) + f"Job was aborted.\n\t{_clean(reason)}\n...\n")
