"""Stork's own copy helper: ``python -m stork.transfer.copyhelper SRC_URL DEST_URL``.

Copies file:// or http(s):// sources to a file:// destination, printing globus-url-copy
style ``-vb`` performance lines once a second so the daemon reads progress the same way
for every module. It judges its own failures and says which with its exit status
(`stork.transfer.failures`: 0 success, 1 retryable, 2 permanent, 3 not found, 4 access
denied, 5 destination full, 6 bad URL), so the daemon never reads its words.
"""

from __future__ import annotations

import itertools
import socket
import sys
import time
from collections.abc import Iterator
from http import HTTPStatus
from typing import IO

from stork.errors import (
    AccessDenied,
    BadUrl,
    NetworkError,
    NotFound,
    PermanentTransferError,
    RetryableTransferError,
    ServerBusy,
    TransferError,
)
from stork.transfer.base import format_progress
from stork.transfer.failures import EXIT_OK, errno_class, exit_status_of
from stork.urls import parse_url

CHUNK_BYTES = 1 << 20

# An HTTP status -> class; other 4xx are permanent, other 5xx a busy server.
HTTP_CLASSES: dict[int, type[TransferError]] = {
    HTTPStatus.NOT_FOUND: NotFound,
    HTTPStatus.GONE: NotFound,
    HTTPStatus.UNAUTHORIZED: AccessDenied,
    HTTPStatus.FORBIDDEN: AccessDenied,
    HTTPStatus.PROXY_AUTHENTICATION_REQUIRED: AccessDenied,
    HTTPStatus.REQUEST_TIMEOUT: ServerBusy,
    HTTPStatus.TOO_MANY_REQUESTS: ServerBusy,
}


def http_class(status: int) -> type[TransferError]:
    if status in HTTP_CLASSES:
        return HTTP_CLASSES[status]
    client_error = HTTPStatus.BAD_REQUEST <= status < HTTPStatus.INTERNAL_SERVER_ERROR
    return PermanentTransferError if client_error else ServerBusy


def os_failure(exc: OSError, what: str) -> TransferError:
    """An OSError as the class its errno names (retryable when the table does not judge it)."""
    error = errno_class(exc.errno) or RetryableTransferError
    return error(f"{what}: {exc.strerror or exc}")


def _open(path: str, mode: str, what: str) -> IO[bytes]:
    """`path` opened; failing to open it is a TransferError (what it does later is not)."""
    try:
        return open(path, mode)
    except OSError as exc:
        raise os_failure(exc, f"cannot open {what} {path}") from None


def _file_chunks(path: str) -> Iterator[bytes]:
    with _open(path, "rb", "source") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


def _transport_failure(url: str, exc: Exception) -> TransferError:
    """A network error from httpx: the system error under it decides, when there is one."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror) and cause.errno == socket.EAI_NONAME:
            return BadUrl(f"GET {url}: unknown host ({cause.strerror})")
        if isinstance(cause, OSError) and errno_class(cause.errno) is not None:
            return os_failure(cause, f"GET {url}")
        cause = cause.__cause__ or cause.__context__
    return NetworkError(f"GET {url}: {type(exc).__name__}: {exc}")


def _http_chunks(url: str) -> Iterator[bytes]:
    import httpx

    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
            if response.status_code >= HTTPStatus.BAD_REQUEST:
                error = http_class(response.status_code)
                raise error(f"GET {url}: HTTP {response.status_code} {response.reason_phrase}")
            yield from response.iter_bytes(CHUNK_BYTES)
    except httpx.TransportError as exc:
        raise _transport_failure(url, exc) from None


def copy(src_url: str, dest_url: str) -> None:
    try:
        src = parse_url(src_url)
        dest = parse_url(dest_url)
    except ValueError as exc:
        raise BadUrl(str(exc)) from None
    if dest.scheme != "file":
        raise BadUrl(f"destination must be a file URL, got {dest.scheme}")
    chunks = _file_chunks(src.path) if src.scheme == "file" else _http_chunks(src.text)
    start = last = time.monotonic()
    # the source reached (opened, or its answer read) before the destination is opened: a
    # source that fails leaves the destination as it was, as cp does
    first = next(chunks, b"")
    done = last_done = 0
    with _open(dest.path, "wb", "destination") as out:
        for chunk in itertools.chain((first,), chunks):
            try:
                out.write(chunk)
            except OSError as exc:
                raise os_failure(exc, f"cannot write destination {dest.path}") from None
            done += len(chunk)
            now = time.monotonic()
            if now - last >= 1.0:
                avg = done / (now - start) / 2**20
                inst = (done - last_done) / (now - last) / 2**20
                print(format_progress(done, avg, inst), end="\r", flush=True)
                last, last_done = now, done
    elapsed = max(time.monotonic() - start, 1e-9)
    print(format_progress(done, done / elapsed / 2**20, done / elapsed / 2**20), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m stork.transfer.copyhelper SRC_URL DEST_URL", file=sys.stderr)
        return exit_status_of(BadUrl)
    try:
        copy(args[0], args[1])
    except TransferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_status_of(type(exc))
    except OSError as exc:  # closing the destination (a late ENOSPC, for one)
        print(f"error: {exc}", file=sys.stderr)
        return exit_status_of(errno_class(exc.errno) or RetryableTransferError)
    except Exception as exc:  # noqa: BLE001 - anything unforeseen is worth another attempt
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_status_of(RetryableTransferError)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
