"""What the transfer engine asks of a module: a worker that moves items for one slot.

The engine (`stork.engine`) keeps `cc` workers busy; each takes the next item (a whole file,
or a byte range of a large file written in place) the moment its last one ends. The module
of the URLs' schemes supplies the worker (`TransferModule.worker`), so the engine knows no
tool by name, and the worker keeps what its protocol allows between items (a session). A
worker's `run` moves one *call*: a byte range alone, or whole files (several at once where
the tool takes a list, `Worker.takes_lists`), at the setting's streams and pipelining, and
reports the bytes its tool says it moved as they move.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from stork.errors import TransferError
from stork.identity import RunAs

if TYPE_CHECKING:
    from stork.process import Child


@dataclass(frozen=True)
class Setting:
    """The engine's parameters: items in flight, streams each, and the pipelining depth
    (the transfer log's `pp`: 1 is off; globus-url-copy's ``-pp`` takes no depth and is on
    from 2)."""

    cc: int
    p: int
    pp: int

    def label(self) -> str:
        return f"cc={self.cc} p={self.p} pp={self.pp}"


@dataclass(frozen=True)
class FileWork:
    """One file of a job: its index (the job's per-file row), URLs and size (None: unknown,
    never split)."""

    index: int
    src_url: str
    dest_url: str
    size_bytes: int | None


@dataclass(frozen=True)
class Item:
    """What one worker moves at a time: a whole file, or `length` bytes at `offset`."""

    file: FileWork
    offset: int = 0
    length: int | None = None  # None: the whole file

    @property
    def is_range(self) -> bool:
        return self.length is not None

    @property
    def size_bytes(self) -> int:
        """The bytes the item moves (0 for a file of unknown size)."""
        if self.length is not None:
            return self.length
        return self.file.size_bytes or 0

    def label(self) -> str:
        where = f"[{self.offset}+{self.length}]" if self.length is not None else ""
        return f"{self.file.src_url}{where}"


@dataclass(frozen=True)
class ItemResult:
    """A worker's word on one item: done (`ok` True), failed with the tool's `failure`
    (`ok` False), or unknown (`ok` None: a list call that failed without saying which
    file; the engine's caller looks at the destination). `unsent`: a call cut short
    (`Worker.cut`) did not land the item; the engine queues it again itself."""

    item: Item
    ok: bool | None
    failure: TransferError | None = None
    unsent: bool = False


def cut_short(items: Sequence[Item], begun: int) -> list[ItemResult]:
    """The answers of a list call cut after its tool named `begun` of its `items` as it
    began them, one at a time and in order, each at its first marker (which a small file
    sends at its end): those before the last it named have landed; the rest are `unsent`,
    to be sent again whole. That one and the next may be part written: sending them again
    writes the same bytes at the same offsets over what the cut call left (its servers
    abort the file when its control connections close)."""
    landed = max(min(begun, len(items)) - 1, 0)
    return [ItemResult(item, True) if n < landed else ItemResult(item, None, unsent=True)
            for n, item in enumerate(items)]


# (t0, t1, bytes): bytes the tool said it moved between two of its reports (monotonic s)
Report = Callable[[float, float, int], None]


@dataclass(frozen=True)
class WorkerContext:
    """What every worker of a job shares: whose rights, which credentials, the tool's own
    options (`-tcp-bs`, `-bs`, `-fast`), and where the tools' output goes."""

    run_as: RunAs | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    fast: bool = False
    tcp_buffer_bytes: int | None = None
    block_size_bytes: int | None = None
    verify_checksum: bool = False
    stdout: BinaryIO | None = None  # the job's `output`: the tools' own words
    stderr: BinaryIO | None = None  # the job's `err`


class Worker(ABC):
    """One slot of the engine. `run` is called from one thread at a time; `stop` from any
    thread ends the call in flight (its items come back as not done)."""

    takes_lists: bool = False  # whole files may go several to a call
    writes_ranges: bool = True  # byte ranges of a file, written in place
    # each call sets its session up again (a process, its connections): the engine starts a
    # slot's next call while the last one's final bytes move, so the set-up is not a gap
    sets_up_per_call: bool = False
    cuts: bool = False  # a list call can be cut short and say which of its files landed

    @abstractmethod
    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        """Move `items` (one range, or whole files) and answer each."""

    @abstractmethod
    def stop(self) -> None:
        """End the call in flight now (from another thread)."""

    def cut(self) -> None:  # noqa: B027 - only workers that say they `cuts` are cut
        """End the list call in flight early, from another thread: its call answers the
        files that landed as done and the rest as `unsent` (`cut_short`). The worker takes
        calls after it as before."""

    def close(self) -> None:  # noqa: B027 - a hook: workers that keep nothing need none
        """The worker is retired: let go of what it kept (a session)."""


class ChildWorker(Worker):
    """A worker whose calls run a child process (`stork.process.Child`): `stop` ends it
    and keeps any later call from starting one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: Child | None = None
        self._stopped = False
        self._cut: Child | None = None  # the call `cut` ended

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            child = self._child
        if child is not None:
            child.stop("stopped")

    def cut(self) -> None:
        with self._lock:
            child = self._child
            self._cut = child
        if child is not None:
            child.stop("cut")

    def was_cut(self, child: Child) -> bool:
        """Whether `cut` ended `child` (the call that ran it reads this once)."""
        with self._lock:
            if self._cut is not child:
                return False
            self._cut = None
            return True


class Marks:
    """A tool's performance markers (globus-url-copy's `-vb` lines) as reports of bytes:
    when the last came, and how many bytes the call had moved by then.

    A list call's markers count each file from 0. With the call's file `sizes` (in list
    order), each file the tool says it begins (`next_file`) tells that the ones before it
    have landed whole, so the call's bytes are known file by file; a marker then counts
    within the current file (never past its size). Without them, a count lower than the
    last is taken for a new file (the last file's count kept as the floor, its rest said at
    the call's end)."""

    def __init__(self, start_s: float, sizes: Sequence[int] = ()) -> None:
        self.start = start_s
        self.t = start_s
        self.done = 0  # the call's bytes said so far
        self._floor = 0  # the bytes of the files before the one the markers count now
        self._last = 0  # the last marker's count
        self._sizes = list(sizes)
        self._begun = 0  # files the tool said it began

    @property
    def begun(self) -> int:
        """The files the tool said it began (those before the last of them have landed)."""
        return self._begun

    def next_file(self, now: float, report: Report) -> None:
        """The tool begins its next file at `now`: the files before it have landed."""
        self._begun += 1
        if self._sizes and 1 < self._begun <= len(self._sizes):
            self._floor += self._sizes[self._begun - 2]  # the file before it, whole
            self._last = 0
            self.total(self._floor, now, report)

    def reach(self, count: int, now: float, report: Report) -> None:
        """A marker says `count` bytes at `now`: report what moved since the last one."""
        if self._sizes and self._begun:
            count = min(count, self._sizes[min(self._begun, len(self._sizes)) - 1])
        elif count < self._last:
            self._floor += self._last
        self._last = count
        self.total(self._floor + count, now, report)

    def total(self, done: int, now: float, report: Report) -> None:
        """The call has moved `done` bytes by `now`."""
        if done > self.done:
            report(self.t, now, done - self.done)
            self.done = done
        self.t = now

    def rest(self, done: int, now: float, report: Report) -> None:
        """The call ended at `now` having moved `done` bytes: what no report said. Followed
        file by file, that is the last file's, moved since the last report; else it moved
        over the whole call (a small file ends between two markers, so a list call's files
        are mostly not followed by any)."""
        if done > self.done:
            since = self.t if self._sizes and self._begun else self.start
            report(since, now, done - self.done)
            self.done = done
        self.t = now
