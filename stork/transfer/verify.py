"""Sizes and checksums of the two ends of a transfer, to judge an attempt.

file:// is read locally; ftp:// asks the (Grid)FTP server with SIZE and GridFTP's CKSM
command; http(s):// answers HEAD's Content-Length. gsiftp:// needs a GSI-authenticated
control channel, which these probes do not open: for it the answer is None ("unknown").
"""

from __future__ import annotations

import ftplib
import hashlib
import os
from collections.abc import Callable

from stork.errors import StorkError, VerifyError
from stork.urls import parse_url

__all__ = ["VerifyError", "md5_of", "open_ftp", "remove", "size_of"]

TIMEOUT_S = 30


def open_ftp(host: str, port: int | None) -> ftplib.FTP:
    ftp = ftplib.FTP(timeout=TIMEOUT_S)  # noqa: S321 - ftp:// is a scheme Stork moves
    ftp.connect(host, port or 21)
    ftp.login()
    return ftp


def size_of(url: str) -> int | None:
    """Size in bytes, or None when this kind of URL cannot be asked."""
    u = parse_url(url)
    try:
        if u.scheme == "file":
            return os.stat(u.path).st_size
        if u.scheme == "ftp":
            ftp = open_ftp(u.host, u.port)
            try:
                ftp.voidcmd("TYPE I")
                size = ftp.size(u.path)
            finally:
                ftp.close()
            return int(size) if size is not None else None
        if u.scheme in ("http", "https"):
            import httpx

            response = httpx.head(url, follow_redirects=True, timeout=TIMEOUT_S)
            length = response.headers.get("content-length")
            return int(length) if response.status_code == 200 and length else None
    except (OSError, ftplib.Error, EOFError) as exc:
        raise VerifyError("size", url, exc) from None
    return None


def md5_of(url: str) -> str | None:
    """Hex MD5 of the file, or None when this kind of URL cannot be asked."""
    u = parse_url(url)
    try:
        if u.scheme == "file":
            digest = hashlib.md5(usedforsecurity=False)
            with open(u.path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            return digest.hexdigest()
        if u.scheme == "ftp":
            ftp = open_ftp(u.host, u.port)
            try:
                reply = ftp.sendcmd(f"CKSM MD5 0 -1 {u.path}")
            finally:
                ftp.close()
            return reply.split()[-1].lower()
    except (OSError, ftplib.Error, EOFError) as exc:
        raise VerifyError("checksum", url, exc) from None
    return None


def remove(url: str, unlink: Callable[[str], None] = os.unlink) -> None:
    """Delete a partial destination file (file:// and ftp://); ignore what is not there.
    `unlink` removes a local file (the daemon passes one that acts as the job's owner)."""
    u = parse_url(url)
    try:
        if u.scheme == "file":
            unlink(u.path)
        elif u.scheme == "ftp":
            ftp = open_ftp(u.host, u.port)
            try:
                ftp.delete(u.path)
            finally:
                ftp.close()
    except (OSError, ftplib.Error, EOFError, StorkError):
        pass
