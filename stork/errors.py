"""One exception tree for the whole project.

Every error names what was wrong and where; messages are built from typed arguments
so callers never format them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass


class StorkError(Exception):
    """Base of every error Stork raises on purpose."""


class ConfigError(StorkError):
    """A configuration file or value is wrong."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


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


class PermissionDenied(StorkError):
    """The caller may not act on this job."""


class InvalidRequest(StorkError):
    """An API request is malformed."""


class ApiError(StorkError):
    """The server refused a request, or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachable(ApiError):
    pass


class TransferError(StorkError):
    """A transfer attempt failed; `kind` says whether retrying can help."""


class StoreUnavailable(StoreError):
    """The store cannot be written now (disk full, I/O error, locked); the write that the
    caller needs is retried, and new submissions are refused until it lands."""


class Overloaded(StorkError):
    """The server has more requests in flight than it may take; the client should retry
    after `retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
