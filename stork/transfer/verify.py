"""Sizes and checksums of the two ends of a transfer, to judge an attempt.

file:// is read here (MD5 with hashlib, adler32 with zlib); every other scheme goes through
the one metadata layer for remote ends (`stork.transfer.remote`, gfal2), which runs as the
job's owner with the job's proxy when the caller passes the job's `RemoteEnds`: GridFTP with
GSI, anonymous FTP, XRootD, WebDAV and plain HTTP alike.
"""

from __future__ import annotations

import base64
import contextlib
import ftplib
import hashlib
import os
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from stork.errors import RemoteEndError, StorkError, VerifyError
from stork.transfer.remote import GFAL_SCHEMES, RemoteEnds, RemoteStat
from stork.urls import parse_url

__all__ = ["VerifyError", "checksum_of", "local_checksum", "md5_of", "open_ftp", "remove",
           "size_of", "sizes_of"]

T = TypeVar("T")

LOCAL_CHECKSUMS = ("md5", "adler32")
TIMEOUT_S = 30


def open_ftp(host: str, port: int | None) -> ftplib.FTP:
    """An anonymous FTP control connection (the FTP lister and the EOS's size polls, which
    ask many times a second and keep it open)."""
    ftp = ftplib.FTP(timeout=TIMEOUT_S)  # noqa: S321 - ftp:// is a scheme Stork moves
    ftp.connect(host, port or 21)
    ftp.login()
    return ftp


def _ends(ends: RemoteEnds | None) -> RemoteEnds:
    return ends if ends is not None else RemoteEnds()


def size_of(url: str, ends: RemoteEnds | None = None) -> int | None:
    """Size in bytes; VerifyError when the end cannot tell (missing, refused, unreachable);
    None for a scheme nothing here can ask (an operator module's own)."""
    return sizes_of([url], ends)[url]


def asked_twice(ask: Callable[[], T], again_after_s: float = 2.0) -> T:
    """`ask()`, asked once more `again_after_s` later when the end did not tell (a busy
    server's failed answer is not the file's); the second VerifyError is raised."""
    try:
        return ask()
    except VerifyError:
        time.sleep(again_after_s)
    return ask()


def size_asked_twice(url: str, ends: RemoteEnds | None = None,
                     again_after_s: float = 2.0) -> int | None:
    """`size_of`, asked twice (`asked_twice`); None when it still cannot tell, or for a
    scheme nothing here can ask."""
    try:
        return asked_twice(lambda: size_of(url, ends), again_after_s)
    except VerifyError:
        return None


def sizes_of(urls: Sequence[str], ends: RemoteEnds | None = None) -> dict[str, int | None]:
    """Sizes of several ends at once (the remote ones in one child); VerifyError for the
    first that cannot tell."""
    sizes: dict[str, int | None] = {}
    remote = []
    for url in urls:
        u = parse_url(url)
        if u.scheme == "file":
            try:
                sizes[url] = os.stat(u.path).st_size
            except OSError as exc:
                raise VerifyError("size", url, exc) from None
        elif u.scheme in GFAL_SCHEMES:
            remote.append(url)
        else:
            sizes[url] = None
    if remote:
        try:
            answers = _ends(ends).stat_many(remote)
        except RemoteEndError as exc:
            raise VerifyError("size", remote[0], exc.reason) from None
        for url in remote:
            answer = answers.get(url)
            if not isinstance(answer, RemoteStat):
                raise VerifyError("size", url, answer.reason if answer else "no answer")
            sizes[url] = answer.size_bytes
    return sizes


def local_checksum(path: str, kind: str) -> str:
    """`kind` (md5 or adler32) of a local file, lower-case hex (adler32 as 8 digits)."""
    with open(path, "rb") as handle:
        if kind == "md5":
            digest = hashlib.md5(usedforsecurity=False)
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
            return digest.hexdigest()
        if kind == "adler32":
            value = 1
            while chunk := handle.read(1 << 20):
                value = zlib.adler32(chunk, value)
            return f"{value & 0xFFFFFFFF:08x}"
    raise ValueError(f"{kind} checksums of local files are not computed (only "
                     f"{', '.join(LOCAL_CHECKSUMS)})")


def checksum_of(url: str, kind: str, ends: RemoteEnds | None = None) -> str:
    """The file's `kind` checksum (md5, adler32, crc32c), lower-case hex; VerifyError when
    the end cannot give it."""
    u = parse_url(url)
    try:
        if u.scheme == "file":
            return local_checksum(u.path, kind)
        if u.scheme not in GFAL_SCHEMES:
            raise ValueError(f"{u.scheme}:// ends cannot be asked for checksums")
        return normalize(kind, _ends(ends).checksum(url, kind))
    except (OSError, ValueError) as exc:
        raise VerifyError(f"{kind} checksum", url, exc) from None
    except RemoteEndError as exc:
        raise VerifyError(f"{kind} checksum", url, exc.reason) from None


def normalize(kind: str, value: str) -> str:
    """A checksum as compared: lower-case hex; adler32 and crc32c as 8 digits (servers drop
    leading zeros)."""
    value = value.strip()
    if any(c not in "0123456789abcdefABCDEF" for c in value):  # RFC 3230 digests: base64
        with contextlib.suppress(ValueError):
            value = base64.b64decode(value, validate=True).hex()
    value = value.lower()
    if kind in ("adler32", "crc32c") and len(value) < 8:
        value = value.rjust(8, "0")
    return value


def md5_of(url: str, ends: RemoteEnds | None = None) -> str | None:
    """Hex MD5 of the file (VerifyError when it cannot be had)."""
    return checksum_of(url, "md5", ends)


def remove(url: str, unlink: Callable[[str], object] = os.unlink,
           ends: RemoteEnds | None = None) -> None:
    """Delete a partial or bad destination file; ignore what is not there. `unlink` removes
    a local file (the daemon passes one that acts as the job's owner); a remote one is
    removed through `ends` (the job's owner and proxy)."""
    u = parse_url(url)
    try:
        if u.scheme == "file":
            unlink(u.path)
        elif u.scheme in GFAL_SCHEMES:
            _ends(ends).delete(url)
    except (OSError, StorkError):
        pass
