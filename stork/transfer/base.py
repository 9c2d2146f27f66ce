"""The transfer module interface.

A module turns (source URL, destination URL, options) into the command line of a child
process. The daemon runs that process (never through a shell), streams its output to the
job's `output` and `err` files, reads progress from it, and judges the attempt.
"""

from __future__ import annotations

import enum
import re
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from stork.transfer.options import TransferOptions


class FailureKind(enum.Enum):
    """Why an attempt failed, and so whether another attempt can help."""

    TRANSIENT = "transient"  # network trouble, server down: retry with backoff
    PERMANENT = "permanent"  # missing source, permission denied: retrying cannot help
    TIMEOUT = "timeout"  # ran past STORK_MAXDELAY_INMINUTES
    VERIFY = "verify"  # tool said success, but sizes or checksums differ
    INTERRUPTED = "interrupted"  # the daemon stopped or died during the attempt

    @property
    def retryable(self) -> bool:
        return self is not FailureKind.PERMANENT


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str  # the tool's own words, or what killed it
    tool_killed: bool = False  # by a signal: whatever it wrote is partial


# Signals that mean no retry can help: the file size limit (a full destination).
_PERMANENT_SIGNALS = {int(signal.SIGXFSZ): "file size limit exceeded (destination full)"}
_SIGNAL_NUMBERS = {int(s) for s in signal.Signals}


@dataclass(frozen=True)
class TransferRequest:
    src_url: str
    dest_url: str
    options: TransferOptions
    default_streams: int
    verify_checksum: bool = False
    x509proxy: str | None = None  # a proxy file; None or "default" for the tool's own search


@dataclass(frozen=True)
class Progress:
    bytes_done: int
    rate_mbps: float  # current (instantaneous) rate, megabits per second


# globus-url-copy -vb:  "   10485760 bytes     5.02 MB/sec avg     5.00 MB/sec inst"
_PERF = re.compile(
    r"^\s*(\d+)\s+bytes\s+([0-9.]+)\s+MB/sec\s+avg\s+([0-9.]+)\s+MB/sec\s+inst\s*$"
)


def parse_progress(line: str) -> Progress | None:
    """Read one globus-url-copy -vb performance line; None for any other line.

    globus-url-copy's MB is 2**20 bytes; the rate is returned in Mbit/s (10**6 bits).
    """
    match = _PERF.match(line)
    if not match:
        return None
    inst_mbyte = float(match.group(3))
    return Progress(int(match.group(1)), inst_mbyte * 1024 * 1024 * 8 / 1e6)


_LINE_END = re.compile(rb"[\r\n]")


def read_progress(stream: BinaryIO,
                  on_chunk: Callable[[bytes], None] | None = None) -> Iterator[Progress]:
    """Progress from a child's stdout as it arrives (-vb lines end in \\r or \\n).

    `on_chunk` sees every raw chunk first (to copy the stream to the job's output file).
    """
    pending = b""
    while chunk := stream.read1(65536):  # type: ignore[attr-defined]
        if on_chunk is not None:
            on_chunk(chunk)
        *lines, pending = _LINE_END.split(pending + chunk)
        for line in lines:
            progress = parse_progress(line.decode(errors="replace"))
            if progress is not None:
                yield progress
    if pending:
        progress = parse_progress(pending.decode(errors="replace"))
        if progress is not None:
            yield progress


def format_progress(bytes_done: int, avg_mbyte_s: float, inst_mbyte_s: float) -> str:
    """A -vb style line, for Stork's own helper processes to print."""
    return f"{bytes_done:>15} bytes {avg_mbyte_s:>12.2f} MB/sec avg {inst_mbyte_s:>12.2f} MB/sec inst"


_NOISE = re.compile(r"^(\d{3}[- ]?)+")


def summarize_error(text: str) -> str:
    """The most telling line of a tool's error output, for one-line displays.

    globus-url-copy ends server errors with "500 End."; the useful line is the last one that
    names a system error or reason, with the FTP reply codes stripped.
    """
    lines = [_NOISE.sub("", line).strip() for line in text.strip().splitlines()]
    lines = [line for line in lines if line and line not in ("End.", "...")]
    if not lines:
        return text.strip()
    for marker in ("System error", "Reason:", "error:", "Error"):
        hits = [line for line in lines if marker in line]
        if hits:
            return hits[-1]
    return lines[-1]


class TransferModule(ABC):
    """One way of moving data between two URL schemes."""

    name: str = "module"
    verifies_checksum: bool = False  # True when the tool itself compares checksums
    takes_streams: bool = False  # True when -p N means parallel TCP streams to the tool

    @abstractmethod
    def command(self, request: TransferRequest) -> list[str]:
        """The argv of the child process that performs the transfer."""

    def environment(self, request: TransferRequest) -> dict[str, str]:
        """Variables to add to the child's environment (credentials, for example)."""
        if request.x509proxy and request.x509proxy != "default":
            return {"X509_USER_PROXY": request.x509proxy}
        return {}

    def classify(self, exit_code: int, stderr_tail: str) -> FailureKind:
        """Judge a non-zero exit. Modules that know their tool's messages override this."""
        return FailureKind.TRANSIENT

    def judge(self, exit_code: int, stderr_tail: str) -> Failure:
        """The failure of a non-zero exit: its kind and the words to show the user."""
        signum = exit_code - 128 if exit_code > 128 else None
        if signum in _PERMANENT_SIGNALS:
            what = _PERMANENT_SIGNALS[signum]
            text = f"{stderr_tail}\n" if stderr_tail else ""
            return Failure(FailureKind.PERMANENT, f"{text}killed by {signal.Signals(signum).name}: "
                                                  f"{what}", tool_killed=True)
        kind = self.classify(exit_code, stderr_tail)
        if not stderr_tail and signum is not None and signum in _SIGNAL_NUMBERS:
            return Failure(kind, f"killed by {signal.Signals(signum).name}", tool_killed=True)
        return Failure(kind, stderr_tail or f"exit status {exit_code}")
