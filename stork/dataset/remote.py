"""Remote directories listed through the one metadata layer for remote ends (gfal2,
`stork.transfer.remote`): ``gsiftp://`` with the job's proxy, as the job's owner.

One child lists one directory and answers every entry with its size (gfal2's ``readpp``),
so a gsiftp dataset's sizes are known from its listing like a local or FTP one's. The
error gfal2 gives is judged by its system error number: a missing directory, a file where a
directory was expected or a refusal is a `DatasetError` (another listing cannot help); a
server that cannot be reached or breaks off is `DatasetUnreachable`.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

from stork.dataset.base import Entry, Lister
from stork.errors import DatasetError, DatasetUnreachable, RemoteEndError
from stork.identity import RunAs
from stork.transfer.failures import errno_class
from stork.transfer.remote import RemoteEnds
from stork.transfer.tokens import BearerTokens

TIMEOUT_S = 300.0  # one directory's listing


def listing_error(where: str, exc: RemoteEndError) -> DatasetError:
    """gfal2's refusal -> the error to raise, by its system error number."""
    if exc.errno == errno.ENOTDIR:
        return DatasetError(where, "not a directory")
    if exc.errno == errno.ENOENT:
        return DatasetError(where, "no such directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return DatasetError(where, "permission denied")
    kind = errno_class(exc.errno)
    if kind is not None and not kind.retryable:
        return DatasetError(where, f"the server refused the listing: {exc.reason}")
    return DatasetUnreachable(where, f"the listing failed: {exc.reason}")


class RemoteLister(Lister):
    def __init__(self, *, x509proxy: str | None = None, run_as: RunAs | None = None,
                 timeout_s: float = TIMEOUT_S, token_file: str | None = None) -> None:
        """`token_file`: the bearer token of the listed source, for every URL listed."""
        self.ends = RemoteEnds(x509proxy=x509proxy, run_as=run_as, timeout_s=timeout_s,
                               tokens=BearerTokens.of(token_file))

    def list_dir(self, url: str) -> Iterator[Entry]:
        """The whole directory is read by one child before the first entry is given."""
        try:
            entries = self.ends.list_dir(url)
        except RemoteEndError as exc:
            raise listing_error(url, exc) from None
        for entry in entries:
            yield Entry(entry.name, entry.is_dir, None if entry.is_dir else entry.size_bytes)
