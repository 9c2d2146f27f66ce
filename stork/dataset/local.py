"""Local directories (``file://``), listed with os.scandir as the calling process.

Symlinks are followed: a link to a file is that file (its target's size), a link to a
directory is that directory; the walk detects a link back into a directory it is inside of
through `dir_id` (device and inode). A link to nothing, a FIFO, a socket or a device is an
error naming it: a transfer could not copy it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterator

from stork.dataset.base import Entry, Lister, parse_dir_url, quote_name
from stork.errors import DatasetError


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such directory"
    if isinstance(exc, NotADirectoryError):
        return "not a directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or str(exc)


class LocalLister(Lister):
    def list_dir(self, url: str) -> Iterator[Entry]:
        path = parse_dir_url(url).path
        try:
            scan = os.scandir(path)
        except OSError as exc:
            raise DatasetError(url, _os_reason(exc)) from None
        with scan:
            while True:
                try:
                    entry = next(scan)
                except StopIteration:
                    return
                except OSError as exc:
                    raise DatasetError(url, "the listing failed half way: "
                                            f"{_os_reason(exc)}") from None
                yield self._entry(url, entry)

    @staticmethod
    def _entry(url: str, entry: os.DirEntry[str]) -> Entry:
        try:
            if entry.is_dir():
                return Entry(entry.name, True)
            if entry.is_file():
                return Entry(entry.name, False, entry.stat().st_size)
            if entry.is_symlink():
                target = os.readlink(entry.path)
                raise DatasetError(url + quote_name(entry.name, url),
                                   f"a symlink to {target}, which does not exist")
        except OSError as exc:
            raise DatasetError(url + quote_name(entry.name, url), _os_reason(exc)) from None
        raise DatasetError(url + quote_name(entry.name, url),
                           "not a regular file or a directory (a FIFO, socket or device)")

    def dir_id(self, url: str) -> Hashable | None:
        try:
            st = os.stat(parse_dir_url(url).path)
        except OSError:
            return None  # list_dir says why
        return (st.st_dev, st.st_ino)
