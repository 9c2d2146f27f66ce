"""The tables that turn a tool's failure into a `TransferError` class.

Shared by the modules' judgements (`TransferModule.classify`):

* `ERRNO_CLASSES`: a system error number -> its class. Used on the copy helper's own
  `OSError`s and on the system errors that globus-url-copy and the GridFTP server print.
* `EXIT_STATUS_CLASSES`: Stork's exit-status convention -> class. The copy helper exits with
  these statuses, and so may operator modules (`external.py`); any other non-zero status is
  retryable.

An errno missing from the table (EIO, for one) and a status missing from the convention
are not judged here: the module falls back to `RetryableTransferError`.
"""

from __future__ import annotations

import errno
import os

from stork.errors import (
    AccessDenied,
    BadUrl,
    DestinationFull,
    NetworkError,
    NotFound,
    PermanentTransferError,
    RetryableTransferError,
    ServerBusy,
    TransferError,
)

ERRNO_CLASSES: dict[int, type[TransferError]] = {
    # the path is not there
    errno.ENOENT: NotFound,
    errno.ENOTDIR: NotFound,
    # the owner may not
    errno.EACCES: AccessDenied,
    errno.EPERM: AccessDenied,
    errno.EROFS: AccessDenied,
    # no room at the destination
    errno.ENOSPC: DestinationFull,
    errno.EDQUOT: DestinationFull,
    errno.EFBIG: DestinationFull,
    # the path cannot name a file to transfer
    errno.EISDIR: BadUrl,
    errno.ENAMETOOLONG: BadUrl,
    errno.ELOOP: BadUrl,
    errno.EEXIST: PermanentTransferError,
    # the network
    errno.ECONNREFUSED: NetworkError,
    errno.ECONNRESET: NetworkError,
    errno.ECONNABORTED: NetworkError,
    errno.ETIMEDOUT: NetworkError,
    errno.EHOSTUNREACH: NetworkError,
    errno.EHOSTDOWN: NetworkError,
    errno.ENETUNREACH: NetworkError,
    errno.ENETDOWN: NetworkError,
    errno.ENETRESET: NetworkError,
    errno.EPIPE: NetworkError,
    # a resource short for now
    errno.EAGAIN: ServerBusy,
    errno.EBUSY: ServerBusy,
    errno.ETXTBSY: ServerBusy,
    errno.EMFILE: ServerBusy,
    errno.ENFILE: ServerBusy,
    errno.ENOMEM: ServerBusy,
}

# strerror text -> errno, to read the system errors a tool prints in words
_ERRNO_BY_TEXT = {os.strerror(number): number for number in sorted(errno.errorcode)}


def errno_class(number: int | None) -> type[TransferError] | None:
    """The class of system error `number`, or None when the table does not judge it."""
    return ERRNO_CLASSES.get(number) if number is not None else None


def errno_of_text(text: str) -> int | None:
    """The errno whose strerror is `text` ("No such file or directory" -> ENOENT)."""
    return _ERRNO_BY_TEXT.get(text.strip().rstrip("."))


# Stork's exit-status convention (the copy helper's, and operator modules' if they wish).
EXIT_OK = 0
EXIT_RETRYABLE = 1  # network trouble, server busy, anything unforeseen
EXIT_PERMANENT = 2  # retrying cannot help (usage error, HTTP client error, ...)
EXIT_NOT_FOUND = 3  # ENOENT, ENOTDIR; HTTP 404, 410
EXIT_ACCESS_DENIED = 4  # EACCES, EPERM, EROFS; HTTP 401, 403, 407
EXIT_DESTINATION_FULL = 5  # ENOSPC, EDQUOT, EFBIG
EXIT_BAD_URL = 6  # not a usable URL: scheme, unknown host, a directory

EXIT_STATUS_CLASSES: dict[int, type[TransferError]] = {
    EXIT_RETRYABLE: RetryableTransferError,
    EXIT_PERMANENT: PermanentTransferError,
    EXIT_NOT_FOUND: NotFound,
    EXIT_ACCESS_DENIED: AccessDenied,
    EXIT_DESTINATION_FULL: DestinationFull,
    EXIT_BAD_URL: BadUrl,
}
_STATUS_BY_CLASS = {cls: status for status, cls in EXIT_STATUS_CLASSES.items()}


def exit_status_class(status: int) -> type[TransferError]:
    """The class of a non-zero exit status under the convention; retryable when unknown."""
    return EXIT_STATUS_CLASSES.get(status, RetryableTransferError)


def exit_status_of(error: type[TransferError]) -> int:
    """The exit status that reports `error`: its own, or its nearest base class's."""
    for cls in error.__mro__:
        if cls in _STATUS_BY_CLASS:
            return _STATUS_BY_CLASS[cls]
    return EXIT_RETRYABLE
