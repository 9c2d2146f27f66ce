"""The lister interface: one directory of one URL scheme, listed entry by entry.

A lister answers `list_dir(url)` for a directory URL (ending in ``/``) with its entries as
they arrive, so the caller can stop early (the generator is closed, and the lister stops the
listing on the server or the tool). Errors are `DatasetError` (what is asked cannot be
listed: missing, not a directory, permission denied) or `DatasetUnreachable` (the server
could not be asked, or broke off in the middle of the listing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator
from typing import NamedTuple
from urllib.parse import quote

from stork.errors import (
    AccessDenied,
    DatasetError,
    DatasetUnreachable,
    NotFound,
    TransferError,
)
from stork.transfer.base import summarize_error
from stork.transfer.gridftp import classify_output
from stork.urls import Url, parse_url

GLOB_CHARS = "*?["


class Entry(NamedTuple):
    """One name in a directory: a file (with its size in bytes when the lister knows it) or
    a subdirectory."""

    name: str
    is_dir: bool
    size_bytes: int | None = None


class Lister(ABC):
    """Lists the directories of one URL scheme, with the rights of the calling process."""

    @abstractmethod
    def list_dir(self, url: str) -> Iterator[Entry]:
        """The entries of the directory `url` (ending in ``/``), without ``.`` and ``..``,
        in no particular order. A lister that must hold the whole answer before the first
        entry says so; the others stop the listing when the iterator is closed."""

    def dir_id(self, url: str) -> Hashable | None:
        """What identifies the directory `url` however it was reached (for local ones: the
        device and inode), so a walk can see a symlink loop; None when unknown."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook: most listers keep nothing
        """Let go of connections kept between listings (they reopen when needed)."""


def parse_dir_url(text: str) -> Url:
    """A directory URL (``scheme://host/dir/``) checked like every URL Stork takes
    (`stork.urls.parse_url` checks file URLs; a directory is given to it with a name
    appended). `path` keeps the trailing slash. Raises ValueError with the reason."""
    if not text.endswith("/"):
        raise ValueError(f"{text!r} is not a directory URL (a directory ends in '/')")
    probe = parse_url(text + "_")
    if not probe.path.endswith("/_"):
        raise ValueError(f"directory URL {text!r} has a query or a fragment ('?' or '#')")
    return Url(text=text, scheme=probe.scheme, host=probe.host, port=probe.port,
               path=probe.path[:-1])


def quote_name(name: str, where: str) -> str:
    """A name as it goes into a URL (percent-encoded; '/' too). A name that is not valid
    UTF-8 cannot be written in a URL: DatasetError naming `where`."""
    try:
        return quote(name, safe="")
    except UnicodeEncodeError:
        raise DatasetError(where, f"the name {name!r} is not valid UTF-8, so no URL can name "
                                  "it; rename it or leave it out of the dataset") from None


def remote_failure(where: str, text: str) -> DatasetError:
    """A (Grid)FTP server's refusal -> the error to raise. The judgement of transfer
    failures (`stork.transfer.gridftp.classify_output`) decides whether another listing can
    help: permanent refusals are `DatasetError`, the others `DatasetUnreachable`."""
    kind: type[TransferError] = classify_output(text)
    if "Not a directory" in text:
        return DatasetError(where, "not a directory")
    if issubclass(kind, NotFound):
        return DatasetError(where, "no such directory")
    if issubclass(kind, AccessDenied):
        return DatasetError(where, "permission denied")
    reason = summarize_error(text)
    if kind.retryable:
        return DatasetUnreachable(where, f"the listing failed: {reason}")
    return DatasetError(where, f"the server refused the listing: {reason}")
