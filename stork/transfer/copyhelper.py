"""Stork's own copy helper: ``python -m stork.transfer.copyhelper SRC_URL DEST_URL``.

Copies file:// or http(s):// sources to a file:// destination, printing globus-url-copy
style ``-vb`` performance lines once a second so the daemon reads progress the same way
for every module. Exit status: 0 success, 1 transient failure, 2 permanent failure.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

from stork.transfer.base import format_progress
from stork.urls import parse_url

EXIT_OK = 0
EXIT_TRANSIENT = 1
EXIT_PERMANENT = 2
CHUNK_BYTES = 1 << 20


class _Permanent(Exception):
    pass


def _file_chunks(path: str) -> Iterator[bytes]:
    try:
        handle = open(path, "rb")
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise _Permanent(f"cannot open source {path}: {exc.strerror}") from None
    with handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


def _http_chunks(url: str) -> Iterator[bytes]:
    import httpx

    with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
        if response.status_code in (401, 403, 404, 410):
            raise _Permanent(f"GET {url}: HTTP {response.status_code} {response.reason_phrase}")
        response.raise_for_status()
        yield from response.iter_bytes(CHUNK_BYTES)


def copy(src_url: str, dest_url: str) -> None:
    src = parse_url(src_url)
    dest = parse_url(dest_url)
    if dest.scheme != "file":
        raise _Permanent(f"destination must be a file URL, got {dest.scheme}")
    chunks = _file_chunks(src.path) if src.scheme == "file" else _http_chunks(src.text)
    start = last = time.monotonic()
    done = last_done = 0
    try:
        out = open(dest.path, "wb")
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise _Permanent(f"cannot open destination {dest.path}: {exc.strerror}") from None
    with out:
        for chunk in chunks:
            out.write(chunk)
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
        return EXIT_PERMANENT
    try:
        copy(args[0], args[1])
    except (_Permanent, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PERMANENT
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PERMANENT if exc.errno in (28, 27, 13, 30) else EXIT_TRANSIENT
    except Exception as exc:  # network errors from httpx and the like
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_TRANSIENT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
