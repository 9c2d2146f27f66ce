"""GridFTP (and plain FTP) transfers through the real globus-url-copy.

globus-url-copy exits 1 for every failure, so its judgement reads the error codes in what it
prints; each kind of code has one table below. Real outputs (globus-url-copy 10.x against
globus-gridftp-server 13.x; tests/test_judge.py keeps them):

    error: globus_ftp_client: the server responded with an error
    500 500-Command failed. : globus_l_gfs_file_open failed.
    500-globus_xio: System error in open: No such file or directory
    500 End.

    error: globus_xio: Unable to connect to 127.0.0.1:49927
    globus_xio: System error in connect: Connection refused

    421 Service busy: Connection limit exceeded. Please try again later. ...

    530 530-globus_xio: Server side credential failure ...

The GridFTP server answers 500 for most failures and names the cause as a system error, so
the system error decides before the reply code. Newer servers add ``GlobusError: v=1
c=CODE`` and ``GridFTP-Errno: N`` lines, read first. Evidence of a permanent failure anywhere
wins (in a third-party transfer either server may name it); otherwise the first retryable
evidence, otherwise `RetryableTransferError` (for example "an end-of-file was reached", which
a directory given as the source also gives).

A transfer whose EOS samples already wrote byte ranges of the file into the destination sends
only the rest (`TransferRequest.ranges`): one range with ``-partial-offset O -partial-length
L``, several through ``python -m stork.transfer.gridftp --ranges O:L,O:L,... -- ARGV``, which
runs the argv once per range, in order, stops at the first failure with its exit status and
error output, and prints one ``-vb`` progress line over all ranges. globus-url-copy writes a
partial transfer at the same offset of the destination (file:// and GridFTP servers, third
party too) without truncating it; its ``-verify-checksum`` compares one range's checksum with
the whole file's, so it is left out and Stork checks the whole destination's MD5 itself.
"""

from __future__ import annotations

import enum
import re
import sys
import time
from collections.abc import Sequence
from typing import BinaryIO

from stork.errors import (
    AccessDenied,
    BadUrl,
    CredentialError,
    DestinationFull,
    NetworkError,
    NotFound,
    PermanentTransferError,
    RetryableTransferError,
    ServerBusy,
    TransferError,
)
from stork.process import Child
from stork.transfer.base import (
    Progress,
    Range,
    TransferModule,
    TransferRequest,
    format_progress,
)
from stork.transfer.failures import errno_class, errno_of_text
from stork.transfer.worker import Worker, WorkerContext


class FtpReply(enum.IntEnum):
    """The FTP reply codes the judgement knows (RFC 959, RFC 2228)."""

    SERVICE_NOT_AVAILABLE = 421  # busy or going down, closing the control connection
    CANNOT_OPEN_DATA_CONNECTION = 425
    CONNECTION_CLOSED = 426  # transfer aborted
    FILE_UNAVAILABLE_NOW = 450  # file busy
    LOCAL_ERROR = 451  # action aborted: local error in processing
    INSUFFICIENT_STORAGE = 452
    NOT_LOGGED_IN = 530
    NEED_ACCOUNT_FOR_STORING = 532
    FAILED_SECURITY_CHECK = 535
    FILE_UNAVAILABLE = 550  # not found or no access
    PAGE_TYPE_UNKNOWN = 551
    EXCEEDED_STORAGE_ALLOCATION = 552
    FILE_NAME_NOT_ALLOWED = 553


# The server's reply code -> class. 500-504 (command failed, syntax) are not here: the
# GridFTP server sends 500 for every failure, and the system error it quotes decides.
REPLY_CLASSES: dict[int, type[TransferError]] = {
    FtpReply.SERVICE_NOT_AVAILABLE: ServerBusy,
    FtpReply.CANNOT_OPEN_DATA_CONNECTION: NetworkError,
    FtpReply.CONNECTION_CLOSED: NetworkError,
    FtpReply.FILE_UNAVAILABLE_NOW: ServerBusy,
    FtpReply.LOCAL_ERROR: ServerBusy,
    FtpReply.INSUFFICIENT_STORAGE: DestinationFull,
    FtpReply.NOT_LOGGED_IN: CredentialError,
    FtpReply.NEED_ACCOUNT_FOR_STORING: AccessDenied,
    FtpReply.FAILED_SECURITY_CHECK: CredentialError,
    FtpReply.FILE_UNAVAILABLE: PermanentTransferError,
    FtpReply.PAGE_TYPE_UNKNOWN: PermanentTransferError,
    FtpReply.EXCEEDED_STORAGE_ALLOCATION: DestinationFull,
    FtpReply.FILE_NAME_NOT_ALLOWED: BadUrl,
}

# ``GlobusError: v=1 c=CODE``: the GridFTP server's own error codes -> class.
GLOBUS_ERROR_CLASSES: dict[str, type[TransferError]] = {
    "PATH_NOT_FOUND": NotFound,
    "NOT_A_DIRECTORY": NotFound,
    "IS_A_DIRECTORY": BadUrl,
    "PATH_EXISTS": PermanentTransferError,
    "PERMISSION_DENIED": AccessDenied,
    "NO_SPACE_LEFT": DestinationFull,
    "QUOTA_EXCEEDED": DestinationFull,
    "DATA_CHANNEL_COMMUNICATION_FAILURE": NetworkError,
    "INTERNAL_ERROR": ServerBusy,
}

# globus-url-copy's own words for failures that carry no code.
CLIENT_TEXT_CLASSES: tuple[tuple[str, type[TransferError]], ...] = (
    ("error parsing url", BadUrl),  # [globus_gass_copy_glob_expand_url]: error parsing url scheme
    ("Unknown url", BadUrl),
    ("Name or service not known", BadUrl),  # gai_strerror(EAI_NONAME): the host does not exist
    ("Temporary failure in name resolution", NetworkError),  # gai_strerror(EAI_AGAIN)
    ("EOF has been reached", NetworkError),  # the server closed the control connection
)

_REPLY = re.compile(r"^(\d{3})[ -]", re.MULTILINE)
_GLOBUS_ERROR = re.compile(r"GlobusError: v=\d+ c=([A-Z_]+)")
_GRIDFTP_ERRNO = re.compile(r"GridFTP-Errno: (\d+)")
_SYSTEM_ERROR = re.compile(r"(?:System error in \w+|A system call failed): ([^\r\n]+)")


def evidence(stderr_tail: str) -> list[type[TransferError]]:
    """Every class that globus-url-copy's error output names, most specific codes first."""
    found: list[type[TransferError]] = []
    found += [GLOBUS_ERROR_CLASSES[c] for c in _GLOBUS_ERROR.findall(stderr_tail)
              if c in GLOBUS_ERROR_CLASSES]
    numbers = [int(n) for n in _GRIDFTP_ERRNO.findall(stderr_tail)]
    numbers += [n for n in map(errno_of_text, _SYSTEM_ERROR.findall(stderr_tail)) if n]
    found += [c for c in map(errno_class, numbers) if c is not None]
    found += [REPLY_CLASSES[int(code)] for code in _REPLY.findall(stderr_tail)
              if int(code) in REPLY_CLASSES]
    found += [c for text, c in CLIENT_TEXT_CLASSES if text in stderr_tail]
    return found


def classify_output(stderr_tail: str) -> type[TransferError]:
    """Permanent evidence anywhere wins; else the first retryable; else retryable."""
    found = evidence(stderr_tail)
    permanent = [c for c in found if not c.retryable]
    return (permanent or found or [RetryableTransferError])[0]


class GridFtpModule(TransferModule):
    name = "globus-url-copy"
    verifies_checksum = True
    takes_streams = True
    writes_ranges = True

    def __init__(self, executable: str = "globus-url-copy") -> None:
        self.executable = executable

    def command(self, request: TransferRequest) -> list[str]:
        opts = request.options
        streams = opts.streams or request.default_streams
        argv = [self.executable, "-vb", "-p", str(streams)]
        if opts.tcp_buffer_bytes:
            argv += ["-tcp-bs", str(opts.tcp_buffer_bytes)]
        if opts.block_size_bytes:
            argv += ["-bs", str(opts.block_size_bytes)]
        urls = [request.src_url, request.dest_url]
        if request.ranges:  # the rest after in-place samples (no -verify-checksum: see above)
            if len(request.ranges) == 1:
                [(offset, length)] = request.ranges
                return [*argv, *partial(offset, length), *urls]
            return [sys.executable, "-m", "stork.transfer.gridftp", "--ranges",
                    format_ranges(request.ranges), "--", *argv, *urls]
        if request.verify_checksum:
            argv += ["-verify-checksum"]
        # "--" is not understood by globus-url-copy; URLs are validated to start with a
        # scheme, so they can never be read as options.
        argv += urls
        return argv

    def classify(self, exit_code: int, stderr_tail: str) -> type[TransferError]:
        return classify_output(stderr_tail)

    def worker(self, context: WorkerContext) -> Worker:
        """An engine worker: one globus-url-copy per call (`gridftp_worker`)."""
        from stork.transfer.gridftp_worker import GridFtpWorker

        return GridFtpWorker(self, context)

    def list_command(self, *, cc: int, p: int, pipelining: bool, fast: bool,
                     verify_checksum: bool = False, tcp_buffer_bytes: int | None = None,
                     block_size_bytes: int | None = None) -> list[str]:
        """The argv that moves the files of a list read from stdin (`list_input`): on past
        a failed file (-c), destination directories created (-cd), `cc` files at once with
        `p` streams each, pipelining on or off (-pp takes no depth), MODE E with data
        channels kept between files (-fast, for GridFTP servers)."""
        argv = [self.executable, "-vb", "-c", "-cd", "-cc", str(cc), "-p", str(p)]
        if pipelining:
            argv.append("-pp")
        if fast:
            argv.append("-fast")
        if tcp_buffer_bytes:
            argv += ["-tcp-bs", str(tcp_buffer_bytes)]
        if block_size_bytes:
            argv += ["-bs", str(block_size_bytes)]
        if verify_checksum:
            argv.append("-verify-checksum")
        return [*argv, "-f", "-"]


# globus-url-copy reads a list line into 1024 bytes and each URL into 512: longer URLs are
# sent one at a time, on the command line
MAX_LIST_URL = 500


def list_input(pairs: list[tuple[str, str]]) -> bytes:
    """The list globus-url-copy -f reads: one quoted pair a line (URLs never hold quotes:
    stork.urls refuses whitespace and quotes are percent-encoded by the listers)."""
    return "".join(f'"{src}" "{dest}"\n' for src, dest in pairs).encode()



def partial(offset: int, length: int) -> list[str]:
    """globus-url-copy's options for `length` bytes from `offset`, written at that offset."""
    return ["-partial-offset", str(offset), "-partial-length", str(length)]


def format_ranges(ranges: Sequence[Range]) -> str:
    """``O:L,O:L``, as --ranges takes them."""
    return ",".join(f"{offset}:{length}" for offset, length in ranges)


def parse_ranges(text: str) -> list[Range]:
    """The ranges of ``O:L,O:L`` (ValueError when malformed)."""
    ranges = []
    for item in text.split(","):
        offset, length = (int(x) for x in item.split(":"))
        if offset < 0 or length <= 0:
            raise ValueError(f"bad range {item!r}")
        ranges.append((offset, length))
    return ranges


def run_ranges(argv: Sequence[str], ranges: Sequence[Range], out: BinaryIO) -> int:
    """Run `argv` (globus-url-copy ending in its two URLs) once per range, in order, with
    one -vb progress line over all of them on `out`; its error output goes to stderr.
    Returns the first failing exit status (128 + N for signal N), else 0."""
    done = 0
    start = time.monotonic()

    def show(bytes_done: int, inst_mbps: float) -> None:
        elapsed = max(time.monotonic() - start, 1e-6)
        out.write(format_progress(bytes_done, bytes_done / elapsed / 2**20,
                                  inst_mbps * 1e6 / 8 / 2**20).encode() + b"\n")
        out.flush()

    for offset, length in ranges:
        out.write(f"range {offset}:{length}\n".encode())

        def progress(p: Progress, before: int = done) -> None:
            show(before + p.bytes_done, p.rate_mbps)

        child = Child([*argv[:-2], *partial(offset, length), *argv[-2:]],
                      stderr=sys.stderr.buffer, on_progress=progress)
        try:
            child.start()
        except OSError as exc:
            sys.stderr.write(f"cannot run {argv[0]}: {exc.strerror}\n")
            return 127
        ended = child.wait()
        if ended.code != 0:
            return ended.code
        done += length
        show(done, 0.0)
    return 0


def main(args: Sequence[str] | None = None) -> int:
    """``python -m stork.transfer.gridftp --ranges O:L,... -- ARGV``: see the module doc."""
    args = list(sys.argv[1:] if args is None else args)
    if len(args) < 5 or args[0] != "--ranges" or args[2] != "--":
        sys.stderr.write("usage: python -m stork.transfer.gridftp --ranges O:L,... -- "
                         "globus-url-copy [OPTIONS] SRC DEST\n")
        return 2
    try:
        ranges = parse_ranges(args[1])
    except ValueError as exc:
        sys.stderr.write(f"--ranges: {exc}\n")
        return 2
    return run_ranges(args[3:], ranges, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
