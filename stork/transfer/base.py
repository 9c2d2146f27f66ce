"""The transfer module interface.

A module turns (source URL, destination URL, options) into the command line of a child
process. The daemon runs that process (never through a shell), streams its output to the
job's `output` and `err` files, reads progress from it, and judges the attempt.
"""

from __future__ import annotations

import re
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from stork.errors import DestinationFull, FailureKind, RetryableTransferError, TransferError
from stork.transfer.options import TransferOptions
from stork.transfer.tokens import BearerTokens

if TYPE_CHECKING:
    from stork.transfer.worker import Worker, WorkerContext

__all__ = ["FailureKind", "Progress", "Range", "TransferModule", "TransferRequest",
           "format_progress", "killed_message", "parse_progress", "read_progress",
           "remaining_ranges", "summarize_error"]

# Signals that decide the judgement whatever the tool wrote: the file size limit (a full
# destination). Any other signal leaves the judgement to the module's `classify`.
_SIGNAL_CLASSES: dict[int, tuple[type[TransferError], str]] = {
    int(signal.SIGXFSZ): (DestinationFull, "file size limit exceeded (destination full)"),
}
_SIGNAL_NUMBERS = {int(s) for s in signal.Signals}


Range = tuple[int, int]  # (offset, length) in bytes


@dataclass(frozen=True)
class TransferRequest:
    src_url: str
    dest_url: str
    options: TransferOptions
    default_streams: int
    verify_checksum: bool = False
    x509proxy: str | None = None  # a proxy file; None or "default" for the tool's own search
    tokens: BearerTokens | None = None  # the bearer token files of the ends
    # the byte ranges still to send, in order, when the EOS's samples already wrote the others
    # into the destination (modules with `writes_ranges` only); empty: the whole file
    ranges: tuple[Range, ...] = ()


def remaining_ranges(size_bytes: int, done: Sequence[Range]) -> tuple[Range, ...]:
    """The ranges of a file of `size_bytes` not covered by `done` (in any order, touching or
    overlapping), in order, with neighbours merged."""
    rest: list[Range] = []
    position = 0
    for offset, length in sorted(done):
        if offset > position:
            rest.append((position, min(offset, size_bytes) - position))
        position = max(position, offset + length)
        if position >= size_bytes:
            break
    if position < size_bytes:
        rest.append((position, size_bytes - position))
    return tuple((o, n) for o, n in rest if n > 0)


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
_NEXT_FILE = b"Source: "  # globus-url-copy -vb names each file it begins: "Source: URL"


class ChunkReader(Protocol):
    """A binary stream that returns what has arrived without waiting for more (a pipe's
    io.BufferedReader)."""

    def read1(self, size: int = ..., /) -> bytes: ...


def read_progress(stream: ChunkReader,
                  on_chunk: Callable[[bytes], None] | None = None,
                  on_next_file: Callable[[], None] | None = None) -> Iterator[Progress]:
    """Progress from a child's stdout as it arrives (-vb lines end in \\r or \\n).

    `on_chunk` sees every raw chunk first (to copy the stream to the job's output file);
    `on_next_file` is called at each file globus-url-copy begins (its ``Source:`` line: in
    a list call each file's begins when the one before it has landed).
    """
    pending = b""
    while chunk := stream.read1(65536):
        if on_chunk is not None:
            on_chunk(chunk)
        *lines, pending = _LINE_END.split(pending + chunk)
        for line in lines:
            if on_next_file is not None and line.startswith(_NEXT_FILE):
                on_next_file()
                continue
            progress = parse_progress(line.decode(errors="replace"))
            if progress is not None:
                yield progress
    if pending:
        progress = parse_progress(pending.decode(errors="replace"))
        if progress is not None:
            yield progress


def format_progress(bytes_done: int, avg_mbyte_s: float, inst_mbyte_s: float) -> str:
    """A -vb style line, for Stork's own helper processes to print."""
    return (f"{bytes_done:>15} bytes {avg_mbyte_s:>12.2f} MB/sec avg "
            f"{inst_mbyte_s:>12.2f} MB/sec inst")


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
    writes_ranges: bool = False  # True when `command` sends only `request.ranges`, in place

    @abstractmethod
    def command(self, request: TransferRequest) -> list[str]:
        """The argv of the child process that performs the transfer."""

    def environment(self, request: TransferRequest) -> dict[str, str]:
        """Variables to add to the child's environment (credentials, for example): the
        proxy's file, and the bearer tokens' files (`BearerTokens.environment`)."""
        env = request.tokens.environment(request.src_url, request.dest_url) \
            if request.tokens is not None else {}
        if request.x509proxy and request.x509proxy != "default":
            env["X509_USER_PROXY"] = request.x509proxy
        return env

    def classify(self, exit_code: int, stderr_tail: str) -> type[TransferError]:
        """The class of a non-zero exit. Modules that know their tool's exit statuses or
        error codes override this; a failure nothing recognises is retried."""
        return RetryableTransferError

    def worker(self, context: WorkerContext) -> Worker | None:
        """A worker for the transfer engine (`stork.transfer.worker`); None: this module
        moves one whole file per attempt only."""
        return None

    def judge(self, exit_code: int, stderr_tail: str) -> TransferError:
        """The failure of a non-zero exit, as an instance of its class: `kind`,
        `retryable`, the words to show the user (`str()`) and `tool_killed`.

        An exit status above 128 is the child killed by signal (status - 128), as the runner
        reports it: the tool was stopped mid-write.
        """
        signum = exit_code - 128 if exit_code - 128 in _SIGNAL_NUMBERS else None
        if signum is not None and signum in _SIGNAL_CLASSES:
            error, what = _SIGNAL_CLASSES[signum]
            return error(killed_message(signum, stderr_tail, what), exit_code=exit_code,
                         tool_killed=True)
        error = self.classify(exit_code, stderr_tail)
        if signum is not None:
            return error(killed_message(signum, stderr_tail), exit_code=exit_code,
                         tool_killed=True)
        return error(stderr_tail or f"exit status {exit_code}", exit_code=exit_code)


def killed_message(signum: int, stderr_tail: str, what: str = "") -> str:
    """``killed by SIGXFSZ: file size limit exceeded``, after the tool's own words if any."""
    text = f"{stderr_tail}\n" if stderr_tail else ""
    return f"{text}killed by {signal.Signals(signum).name}" + (f": {what}" if what else "")
