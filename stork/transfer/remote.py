"""The one metadata layer for remote ends: stat, list, checksum, delete and mkdir of any URL
gfal2 speaks (``gsiftp://``, ``ftp://``, ``root://``, ``davs://``/``https://``, ...).

Every operation runs the gfal helper (`stork.transfer.gfalhelper`, under the system Python
that holds Debian's gfal2 bindings) as a child process through `stork.process.Child`: with
the rights of `run_as` (the daemon acts for a job as the job's owner) and the job's proxy in
``X509_USER_PROXY``, so a remote end is looked at, cleaned up or listed exactly as the
owner's own transfer would reach it. Verification (`stork.transfer.verify`), dataset
listing (`stork.dataset.remote`) and the EOS's scratch clean-up all come through here.

Failures are `RemoteEndError`s naming the operation, the URL and gfal2's words, with the
system error number gfal2 gave (`errno`), which `stork.transfer.failures` judges.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stork.errors import RemoteEndError
from stork.identity import RunAs
from stork.process import TIMEOUT, Child
from stork.transfer.tokens import BearerTokens

GFAL_PYTHON = "/usr/bin/python3"  # Debian's python3-gfal2 lives with the system Python
HELPER = str(Path(__file__).with_name("gfalhelper.py"))
TIMEOUT_S = 120.0

# What each scheme's server can answer (gfal2 plugin and the servers Debian ships), strongest
# first: the checksum types `verify_checksum` chooses from. file:// is computed by Stork.
CHECKSUM_TYPES: dict[str, tuple[str, ...]] = {
    "file": ("md5", "adler32"),
    "gsiftp": ("md5", "adler32"),
    "ftp": ("md5", "adler32"),
    "root": ("md5", "crc32c", "adler32"),
    "xroot": ("md5", "crc32c", "adler32"),
    "davs": ("md5", "crc32c", "adler32"),  # RFC 3230 Want-Digest (XRootD's HTTP answers all)
    "https": ("md5", "crc32c", "adler32"),
    "dav": ("md5", "adler32"),
    "http": ("md5", "adler32"),
}
KNOWN_CHECKSUMS = ("md5", "crc32c", "adler32")
# the remote schemes gfal2's plugins speak; another (an operator module's own) is not asked
GFAL_SCHEMES = frozenset(CHECKSUM_TYPES) - {"file"}
X509_SCHEMES = frozenset({"gsiftp", "root", "xroot", "roots", "davs", "https"})


@dataclass(frozen=True)
class RemoteStat:
    size_bytes: int
    is_dir: bool


@dataclass(frozen=True)
class RemoteEntry:
    name: str
    is_dir: bool
    size_bytes: int | None


def common_checksum(src_scheme: str, dest_scheme: str) -> str | None:
    """The strongest checksum type both ends can answer, or None."""
    theirs = CHECKSUM_TYPES.get(dest_scheme.lower(), ())
    for kind in CHECKSUM_TYPES.get(src_scheme.lower(), ()):
        if kind in theirs:
            return kind
    return None


class RemoteEnds:
    """Remote ends as one job's owner sees them (`run_as`, `x509proxy`, `tokens`: its bearer
    token files, `src_url`/`dest_url` telling which end each is for)."""

    def __init__(self, *, x509proxy: str | None = None, run_as: RunAs | None = None,
                 timeout_s: float = TIMEOUT_S, python: str = GFAL_PYTHON,
                 tokens: BearerTokens | None = None, src_url: str = "",
                 dest_url: str = "") -> None:
        self.x509proxy = x509proxy
        self.tokens = tokens
        self.src_url = src_url
        self.dest_url = dest_url
        self.run_as = run_as
        self.timeout_s = timeout_s
        self.python = python

    def environment(self) -> dict[str, str]:
        env = self.tokens.environment(self.src_url, self.dest_url) \
            if self.tokens is not None else {}
        if self.x509proxy and self.x509proxy != "default":
            env["X509_USER_PROXY"] = self.x509proxy
        return env

    def _run(self, operation: str, url: str, args: Sequence[str]) -> list[dict[str, Any]]:
        out = bytearray()
        child = Child([self.python, "-I", HELPER, *args], env=self.environment(),
                      run_as=self.run_as, on_stdout=out.extend)
        try:
            ended = child.run(self.timeout_s)
        except OSError as exc:
            raise RemoteEndError(operation, url, f"cannot run {self.python}: {exc.strerror}") \
                from None
        if ended.stopped == TIMEOUT:
            raise RemoteEndError(operation, url, f"no answer within {self.timeout_s:g} s",
                                 errno=110)
        if ended.code != 0:
            raise RemoteEndError(operation, url, ended.stderr_tail or f"exit status {ended.code}")
        records = []
        for line in bytes(out).decode(errors="surrogateescape").splitlines():
            if line.strip():
                records.append(json.loads(line))
        return records

    @staticmethod
    def _raise(operation: str, record: dict[str, Any]) -> None:
        if "errno" in record:
            raise RemoteEndError(operation, record.get("url", "?"), record["error"],
                                 errno=record["errno"] or None)

    def stat_many(self, urls: Sequence[str]) -> dict[str, RemoteStat | RemoteEndError]:
        """Each URL's size and kind, or the error that answered it (one child for all)."""
        if not urls:
            return {}
        answers: dict[str, RemoteStat | RemoteEndError] = {}
        for record in self._run("size", urls[0], ["stat", *urls]):
            url = record["url"]
            if "errno" in record:
                answers[url] = RemoteEndError("size", url, record["error"],
                                              errno=record["errno"] or None)
            else:
                answers[url] = RemoteStat(int(record["size"]), bool(record["dir"]))
        return answers

    def stat(self, url: str) -> RemoteStat:
        answer = self.stat_many([url]).get(url)
        if answer is None:
            raise RemoteEndError("size", url, "no answer")
        if isinstance(answer, RemoteEndError):
            raise answer
        return answer

    def list_dir(self, url: str) -> list[RemoteEntry]:
        """The entries of directory `url` (without . and ..)."""
        records = self._run("listing", url, ["list", url])
        entries = []
        for record in records:
            self._raise("listing", {**record, "url": url} if "errno" in record else record)
            if "name" in record:
                entries.append(RemoteEntry(record["name"], bool(record["dir"]),
                                           int(record["size"])))
        if not records or not records[-1].get("end"):
            raise RemoteEndError("listing", url, "the listing ended before its end")
        return entries

    def checksum(self, url: str, kind: str) -> str:
        """The file's checksum of type `kind` (md5, adler32, crc32c) as the server gave it
        (hex, or an RFC 3230 base64 digest: `stork.transfer.verify.normalize` reads both)."""
        for record in self._run("checksum", url, ["checksum", kind, url]):
            self._raise(f"{kind} checksum", record)
            return str(record["value"])
        raise RemoteEndError(f"{kind} checksum", url, "no answer")

    def delete(self, url: str) -> None:
        """Remove a file; a file that is not there is no error."""
        for record in self._run("removal", url, ["rm", url]):
            self._raise("removal", record)

    def mkdir(self, url: str) -> None:
        """Make a directory and its parents; one that exists is no error."""
        for record in self._run("mkdir", url, ["mkdir", url]):
            self._raise("mkdir", record)


def helper_available(python: str = GFAL_PYTHON) -> bool:
    """Whether the system Python with gfal2 is there (for skip messages and checks)."""
    return os.access(python, os.X_OK)
