"""One exception tree for the whole project.

Every error Stork raises on purpose derives from `StorkError` and is defined here, grouped
by what went wrong:

    StorkError
    +-- ConfigError
    +-- SubmitError, ArgumentsError
    +-- StoreError: SchemaError, JobNotFound, StoreUnavailable
    +-- PermissionDenied, InvalidRequest, Overloaded
    +-- ApiError: ServerUnreachable
    +-- IdentityError
    +-- TransferError (carries the FailureKind stored as the job's failure_kind)
    |   +-- RetryableTransferError: NetworkError, ServerBusy, CredentialError,
    |   |                           TransferTimedOut, DestinationMismatch, TransferInterrupted
    |   |                           ChecksumMismatch
    |   +-- PermanentTransferError: NotFound, AccessDenied, DestinationFull, BadUrl,
    |                               NoTransferModule, CredentialInvalid
    |       +-- BearerTokenError: TokenUnusable, TokenMissing, TokenExpired,
    |                             TokenScopeMissing, TokenNotAccepted
    +-- VerifyError
    +-- RemoteEndError (a remote end could not be looked at, listed, cleaned up)
    +-- EosError: FitError, SamplingError
    +-- SchedError
    +-- DatasetError: DatasetUnreachable (a listing that another try may get through)
    +-- TransferLogError (a file that is not a transfer log table)
    +-- AsmError (the adaptive sampling module: its state, its analysis)
    +-- AnalyticsError (a table the rate regressions cannot fit)

Every error names what was wrong and where; messages are built from typed arguments
where that helps, so callers do not format them by hand.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar


class StorkError(Exception):
    """Base of every error Stork raises on purpose."""


# -- configuration ----------------------------------------------------------------------------

class ConfigError(StorkError):
    """A configuration file or value is wrong."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


# -- submit files -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SubmitProblem:
    """One problem found in a submit file: where it is and what is wrong."""

    filename: str
    ad_index: int | None  # 1-based position of the ad in the file
    line: int | None  # line where that ad (or the syntax error) starts
    attribute: str | None
    message: str

    def __str__(self) -> str:
        parts = [self.filename]
        if self.line is not None:
            parts[0] += f":{self.line}"
        if self.ad_index is not None:
            parts.append(f"ad {self.ad_index}")
        if self.attribute is not None:
            parts.append(f"attribute '{self.attribute}'")
        return ": ".join(parts) + f": {self.message}"


class SubmitError(StorkError):
    """A submit file is invalid; nothing from it may be queued."""

    def __init__(self, problems: list[SubmitProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ArgumentsError(StorkError):
    """The `arguments` attribute holds an unknown or malformed option."""


# -- the job store ----------------------------------------------------------------------------

class StoreError(StorkError):
    """The job store cannot do what was asked."""


class SchemaError(StoreError):
    """The database has a schema version this code does not know."""

    def __init__(self, path: str, found: int, expected: int) -> None:
        super().__init__(
            f"{path}: schema version {found} is not the supported version {expected}; "
            "refusing to start"
        )


class JobNotFound(StoreError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class StoreUnavailable(StoreError):
    """The store cannot be written now (disk full, I/O error, locked); the write that the
    caller needs is retried, and new submissions are refused until it lands."""


# -- the API ----------------------------------------------------------------------------------

class HostLimitReached(StoreError):
    """A shared store refused to start an attempt: one of its hosts already carries the
    cluster-wide limit of running transfers (other nodes run them); try again later."""

    def __init__(self, job_id: int, host: str, running: int) -> None:
        super().__init__(f"job {job_id}: host {host} runs {running} transfer(s) across the "
                         "cluster, its limit")
        self.job_id = job_id
        self.host = host


class PermissionDenied(StorkError):
    """The caller may not act on this job."""


class InvalidRequest(StorkError):
    """An API request is malformed."""


class Overloaded(StorkError):
    """The server has more requests in flight than it may take; the client should retry
    after `retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ApiError(StorkError):
    """The server refused a request, or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachable(ApiError):
    pass


# -- identities -------------------------------------------------------------------------------

class IdentityError(StorkError):
    """The job's owner cannot be run as (no such user, or a file cannot be opened as them)."""


# -- transfers --------------------------------------------------------------------------------

class FailureKind(enum.Enum):
    """Why an attempt failed, and so whether another attempt can help. The values are stored
    as the job's `failure_kind` and shown to users: they never change."""

    TRANSIENT = "transient"  # network trouble, server busy: retry with backoff
    PERMANENT = "permanent"  # missing source, permission denied: retrying cannot help
    TIMEOUT = "timeout"  # ran past STORK_MAXDELAY_INMINUTES
    VERIFY = "verify"  # tool said success, but sizes differ (or an end cannot be read)
    INTERRUPTED = "interrupted"  # the daemon stopped or died during the attempt
    CHECKSUM = "checksum"  # the destination's checksum is not the expected one

    @property
    def retryable(self) -> bool:
        return self is not FailureKind.PERMANENT


class TransferError(StorkError):
    """A transfer attempt failed. The class is the judgement: `kind` (stored as the job's
    `failure_kind`) and `retryable` are class attributes, chosen by the transfer module from
    its tool's exit status, signal and error codes. The message is the tool's own words (or
    what killed it); `tool_killed` says a signal stopped the tool, so what it wrote is partial.

    A failure nothing recognises is retried: the base class is retryable.
    """

    kind: ClassVar[FailureKind] = FailureKind.TRANSIENT
    retryable: ClassVar[bool] = True

    def __init__(self, message: str, *, exit_code: int | None = None,
                 tool_killed: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.tool_killed = tool_killed

    @property
    def message(self) -> str:
        return str(self)


class RetryableTransferError(TransferError):
    """Another attempt may succeed: the network, the server or a resource was in the way."""


class NetworkError(RetryableTransferError):
    """The connection could not be made or broke: refused, reset, timed out, unreachable,
    closed in the middle of the transfer."""


class ServerBusy(RetryableTransferError):
    """The server (or this host) refused for now: too many connections, a local error on its
    side, a resource temporarily short (FTP 421/450/451, HTTP 429/5xx, EAGAIN, EBUSY)."""


class CredentialError(RetryableTransferError):
    """The server refused the login or the GSI credential (FTP 530). Retryable on purpose: a
    proxy can be renewed between attempts, and `alt_protocols` can fall back to a protocol
    that needs no credential (docs/ARCHITECTURE.md, "Choices where the issue was silent")."""


class TransferTimedOut(RetryableTransferError):
    """The attempt ran past STORK_MAXDELAY_INMINUTES and was killed."""

    kind = FailureKind.TIMEOUT

    def __init__(self, max_delay_min: float) -> None:
        super().__init__(f"killed after running longer than STORK_MAXDELAY_INMINUTES = "
                         f"{max_delay_min:g}", tool_killed=True)
        self.max_delay_min = max_delay_min


class DestinationMismatch(RetryableTransferError):
    """The tool reported success, but the destination's size or checksum is not the source's
    (or could not be read to compare)."""

    kind = FailureKind.VERIFY


class ChecksumMismatch(RetryableTransferError):
    """The copy ended, but the destination's checksum is not the one expected (the ad's
    `checksum`, or the source's with `verify_checksum`): a failure kind of its own. The bad
    destination is removed; another attempt may send it right (corruption on the way)."""

    kind = FailureKind.CHECKSUM


class TransferInterrupted(RetryableTransferError):
    """stork_server stopped or died while the attempt ran."""

    kind = FailureKind.INTERRUPTED


class PermanentTransferError(TransferError):
    """No retry can help: the request itself cannot be carried out as written."""

    kind = FailureKind.PERMANENT
    retryable = False


class NotFound(PermanentTransferError):
    """The source, or the destination's directory, does not exist (ENOENT, ENOTDIR, FTP 550
    with PATH_NOT_FOUND, HTTP 404/410)."""


class AccessDenied(PermanentTransferError):
    """The job's owner may not read the source or write the destination (EACCES, EPERM,
    EROFS, HTTP 401/403)."""


class DestinationFull(PermanentTransferError):
    """The destination has no room: disk full, quota, file size limit (ENOSPC, EDQUOT, EFBIG,
    SIGXFSZ, FTP 452/552)."""


class BadUrl(PermanentTransferError):
    """A URL cannot name a file to transfer: unknown scheme or host, a directory, a name the
    server does not allow."""


class NoTransferModule(PermanentTransferError):
    """No transfer module moves data between these two URL schemes."""

    def __init__(self, src_url: str, dest_url: str) -> None:
        super().__init__(f"no transfer module handles {src_url} -> {dest_url}")
        self.src_url = src_url
        self.dest_url = dest_url


class CredentialInvalid(PermanentTransferError):
    """The job's x509proxy cannot be used at all: missing, unreadable by the job's owner,
    someone else's, not a proxy, or expired. Found before any byte moves; retrying the same
    file cannot help, so it is permanent (`CredentialError`, a server refusing a login, is
    not)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"x509proxy {path}: {reason}")
        self.path = path
        self.reason = reason


class BearerTokenError(PermanentTransferError):
    """A bearer token (WLCG/SciTokens) cannot get the job through: a server refused it (or
    the job had none), or it cannot work at all. Permanent: another attempt with the same
    token is refused the same way, so none is made. Built from `what` (the token file, or
    the URL refused) and `reason`; never from the token itself."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"bearer token {what}: {reason}")
        self.what = what
        self.reason = reason


class TokenUnusable(BearerTokenError):
    """The token file cannot be used: missing, unreadable by the job's owner, someone
    else's, looser than 0600 (XRootD refuses it), or not a JWT."""


class TokenMissing(BearerTokenError):
    """An end that takes tokens refused the job, which carries none (the server's own words
    follow: a server without tokens refuses for other reasons too)."""

    def __init__(self, url: str, said: str = "") -> None:
        reason = ("the server refused access" + (f" ({said})" if said else "")
                  + "; the job carries no bearer token (bearer_token_file, or BEARER_TOKEN / "
                    "BEARER_TOKEN_FILE / bt_u$UID when submitting)")
        PermanentTransferError.__init__(self, f"{url}: {reason}")  # no token to name
        self.what = url
        self.reason = reason
        self.url = url


class TokenExpired(BearerTokenError):
    """The token's `exp` is past (seen before an attempt, or explaining a refusal)."""


class TokenScopeMissing(BearerTokenError):
    """The token grants no scope for the operation on the path: `needed` names the scopes
    that would (``storage.create or storage.modify``, over the path or a directory above
    it), `path` the URL's path."""

    def __init__(self, what: str, operation: str, path: str, needed: str, has: str) -> None:
        super().__init__(what, f"no scope to {operation} {path}: it needs {needed} over it "
                               f"or a directory above it; it has {has or 'no storage scope'}")
        self.operation = operation
        self.path = path
        self.needed = needed


class TokenNotAccepted(BearerTokenError):
    """The server refused a token that has not expired and whose scopes cover the path: its
    audience does not name the server, or the server does not trust its issuer."""


class VerifyError(StorkError):
    """One end of a transfer could not be inspected (missing file, server refused)."""

    def __init__(self, what: str, url: str, reason: object) -> None:
        super().__init__(f"cannot get the {what} of {url}: {reason}")
        self.what = what
        self.url = url


class RemoteEndError(StorkError):
    """A remote end (through gfal2) could not be looked at, listed, cleaned up or made:
    `operation`, `url`, gfal2's words, and the system error number it gave (`errno`)."""

    def __init__(self, operation: str, url: str, reason: str, *,
                 errno: int | None = None) -> None:
        super().__init__(f"{operation} of {url}: {reason}")
        self.operation = operation
        self.url = url
        self.reason = reason
        self.errno = errno


# -- the EOS (estimation of the optimal stream count) -----------------------------------------

class EosError(StorkError):
    """The EOS cannot answer an estimation."""


class FitError(EosError):
    """The samples do not determine a usable curve."""


class SamplingError(EosError):
    """A sample transfer failed; the message carries the tool's own error."""


# -- scheduling -------------------------------------------------------------------------------

class SchedError(StorkError):
    """Bad scheduling parameters or a misuse of the task matrix."""


# -- datasets (a directory, a glob or a url_list expanded into files) -------------------------

class DatasetError(StorkError):
    """A dataset cannot be expanded into files; nothing of it may be queued. `where` names
    the directory, URL or url_list line, `reason` says what is wrong there."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class DatasetUnreachable(DatasetError):
    """The server could not be asked, or broke off in the middle of a listing: another
    listing later may succeed."""


class TransferLogError(StorkError):
    """A file that is not a transfer log table at all (no header, missing columns):
    `stork.translog`."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class AsmError(StorkError):
    """The adaptive sampling module cannot work: its state file is unreadable, or its offline
    analysis has nothing to offer (`stork.asm`). `where` names the file or the step."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


# -- transfer-rate analytics ----------------------------------------------------------------

class AnalyticsError(StorkError):
    """A table the regression analytics cannot fit: too few rows, a missing column, a bad
    prediction point. `where` names the table (a file, or the transfer log)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason
