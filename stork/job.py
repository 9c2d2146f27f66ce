"""Job specifications (what the user asked for) and job records (what the queue holds)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from stork.transfer.options import TransferOptions, parse_arguments


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
    use_history: bool = False
    stork_server: str | None = None
    opt_server: str | None = None
    output: str | None = None
    err: str | None = None
    log: str | None = None
    x509proxy: str | None = None
    alt_protocols: tuple[tuple[str, str], ...] = ()
    max_retries: int | None = None
    verify_checksum: bool = False
    size_bytes: int | None = None
    ad_text: str = ""  # the whole ad, normalised, including the user's own attributes
    lognotes: str | None = None

    @property
    def options(self) -> TransferOptions:
        return parse_arguments(self.arguments)

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

    @cached_property
    def spec(self) -> JobSpec:
        return JobSpec.from_json(self.spec_json)


@dataclass(frozen=True)
class Event:
    job_id: int
    time: float
    kind: str  # submit, execute, attempt_failed, requeue, completed, failed, removed, ...
    detail: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
