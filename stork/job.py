"""Job specifications (what the user asked for) and job records (what the queue holds)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from stork.dataset.expand import is_dataset
from stork.transfer.options import TransferOptions, parse_arguments
from stork.transfer.tokens import BearerTokens


class JobState(enum.Enum):
    IDLE = "IDLE"  # waiting for a slot (or for its retry time)
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"  # retry limit reached or permanent failure
    REMOVED = "REMOVED"  # stork_rm

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.REMOVED)


class DapType(enum.Enum):
    TRANSFER = "transfer"
    ESTIMATION = "estimation"


@dataclass(frozen=True)
class JobSpec:
    """A validated data placement request, built only by `stork.submit`."""

    dap_type: DapType
    src_url: str
    dest_url: str
    arguments: str = ""
    optimization: bool = False
    optimizer: str | None = None  # named in `optimization`; None: EOS_OPTIMIZER (datasets)
    use_history: bool = False
    stork_server: str | None = None
    opt_server: str | None = None
    output: str | None = None
    err: str | None = None
    log: str | None = None
    x509proxy: str | None = None
    # bearer token files (absolute paths): for both ends, or each end's own (third party)
    bearer_token_file: str | None = None
    src_bearer_token_file: str | None = None
    dest_bearer_token_file: str | None = None
    alt_protocols: tuple[tuple[str, str], ...] = ()
    max_retries: int | None = None
    verify_checksum: bool = False
    checksum: str | None = None  # "adler32:0a1b2c3d": the destination's expected checksum
    size_bytes: int | None = None
    recursive: bool = False  # a directory dataset descends into subdirectories
    url_list: str | None = None  # a dataset named by a url_list file (absolute path)
    ad_text: str = ""  # the whole ad, normalised, including the user's own attributes
    lognotes: str | None = None

    @property
    def options(self) -> TransferOptions:
        return parse_arguments(self.arguments)

    @property
    def bearer_tokens(self) -> BearerTokens | None:
        """The job's token files, one per end; None when it names none."""
        return BearerTokens.of(self.bearer_token_file, self.src_bearer_token_file,
                               self.dest_bearer_token_file)

    @property
    def is_dataset(self) -> bool:
        """Whether the job names many files (a directory, a glob or a url_list)."""
        return self.dap_type is DapType.TRANSFER and is_dataset(self.src_url, self.url_list)

    def to_json(self) -> str:
        data = asdict(self)
        data["dap_type"] = self.dap_type.value
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        data: dict[str, Any] = json.loads(text)
        data["dap_type"] = DapType(data["dap_type"])
        data["alt_protocols"] = tuple(tuple(p) for p in data.get("alt_protocols", ()))
        return cls(**data)


# the job's measured flow (`stork.engine.series`): in its result, for the API and the status
# page, never in its ClassAd or listings (a series is for drawing)
FLOW_RESULT_KEY = "flow"
HIDDEN_RESULT_KEYS = frozenset({FLOW_RESULT_KEY})


@dataclass(frozen=True)
class Job:
    """One row of the queue, as the store returns it. Immutable: changes go through the store."""

    id: int
    owner_uid: int
    owner: str
    state: JobState
    spec_json: str  # JobSpec.to_json(); parsed on first use of `spec`
    dap_type: str  # copies of spec fields, so listings need not parse the spec
    src_url: str
    dest_url: str
    submitted_at: float  # unix seconds
    updated_at: float
    attempts: int = 0  # attempts started
    failures: int = 0  # attempts that failed (counts toward the retry limit)
    next_attempt_at: float = 0.0
    started_at: float | None = None  # start of the current or last attempt
    finished_at: float | None = None
    last_error: str | None = None
    failure_kind: str | None = None
    bytes_done: int = 0
    rate_mbps: float = 0.0
    pid: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    files_total: int = 0  # a dataset's files (0: one file, or not listed yet)
    files_done: int = 0
    files_failed: int = 0
    bytes_total: int | None = None  # a dataset's bytes; None while a size is unknown

    @cached_property
    def spec(self) -> JobSpec:
        return JobSpec.from_json(self.spec_json)

    @property
    def shown_result(self) -> dict[str, Any]:
        """The result as the ad and listings show it (without HIDDEN_RESULT_KEYS)."""
        return {k: v for k, v in self.result.items() if k not in HIDDEN_RESULT_KEYS}


class FileState(enum.Enum):
    """The state of one file of a dataset."""

    PENDING = "PENDING"  # to be sent (now or at its retry time)
    RUNNING = "RUNNING"  # handed to the tool by the running attempt
    DONE = "DONE"  # at the destination, verified
    FAILED = "FAILED"  # a permanent failure or its retry limit reached


@dataclass(frozen=True)
class DatasetFileRow:
    """One file of a dataset job, as the store holds it."""

    job_id: int
    index: int  # 0-based, in listing order
    src_url: str
    dest_url: str
    rel_path: str
    size_bytes: int | None
    state: FileState = FileState.PENDING
    bytes_done: int = 0
    attempts: int = 0
    failures: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None
    failure_kind: str | None = None
    checksum: str | None = None  # MD5 of both ends when verified
    chunk: str | None = None  # size class it ran in, with the (cc, p, pp) used
    in_doubt: bool = False  # was running when the daemon stopped: check before resending


@dataclass(frozen=True)
class Event:
    job_id: int
    time: float
    kind: str  # submit, execute, attempt_failed, requeue, completed, failed, removed, ...
    detail: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
