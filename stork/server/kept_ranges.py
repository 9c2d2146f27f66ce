"""What of a dataset's large files has landed as byte ranges, kept on the job across passes.

A dataset's file sent as ranges (`stork.engine.items`) is claimed before its first range
(`stork.transfer.destination.claim`) and each range that lands is kept on the job's result
under `KEY`, with the range size the pass chose::

    {"range_bytes": 67108864,
     "files": {"7": {"claim": "<Destination.to_text()>", "landed": [[0, 134217728]]}}}

so that a later pass, on this node after a kill -9 or on another after a lease takeover,
sends only the ranges that had not landed (those in flight then are sent again, nothing
else), and a file that fails for good has its partial destination removed as its claim
allows. A file leaves the record when it is whole or has ended; the record is written as a
whole, under one lock, since a pass's workers answer on their own threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stork.engine.items import Span, covered, holds, merged
from stork.transfer.destination import Destination

KEY = "dataset_ranges"


@dataclass(frozen=True)
class KeptFile:
    """One file's record: the claim of its destination and the spans that landed in it."""

    claim: Destination
    landed: tuple[Span, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"claim": self.claim.to_text(), "landed": [list(s) for s in self.landed]}


def read(result: Mapping[str, Any]) -> tuple[int | None, dict[int, KeptFile]]:
    """PURE: (range size, files) of a job's result; what is not readable is left out (its
    file is then sent whole, as if nothing had landed)."""
    record = result.get(KEY)
    if not isinstance(record, dict):
        return None, {}
    size = record.get("range_bytes")
    files: dict[int, KeptFile] = {}
    for index, entry in (record.get("files") or {}).items():
        try:
            claim = Destination.from_text(entry["claim"])
            spans = merged((int(s), int(e)) for s, e in entry["landed"])
            if claim is not None:
                files[int(index)] = KeptFile(claim, tuple(spans))
        except (KeyError, TypeError, ValueError):
            continue
    return (size if isinstance(size, int) and size > 0 else None), files


def worth_keeping(kept: KeptFile, size_now: int | None, file_size: int | None) -> bool:
    """PURE: whether the ranges that landed in a file's destination still stand there, seen
    as `size_now` (None: not there, or not known), for a file of `file_size` bytes: something
    landed and not the whole file (a whole one is checked as a whole), and the destination
    is at least as long as the last landed byte (written in place, a destination is as long
    as its furthest range; shorter, it was truncated or replaced). Whether it is the very
    file claimed (a local file's device and inode) is `destination`'s to say."""
    if file_size is None or covered(list(kept.landed), 0, file_size):
        return False
    return holds(kept.landed, size_now)


class KeptRanges:
    """A pass's record of its ranged files, written to the job (`save`) on every change."""

    def __init__(self, range_size: int | None, files: dict[int, KeptFile],
                 save: Callable[[dict[str, Any]], None]) -> None:
        self.range_size = range_size
        self._files = dict(files)
        self._save = save
        self._lock = threading.Lock()

    @classmethod
    def of(cls, result: Mapping[str, Any],
           save: Callable[[dict[str, Any]], None]) -> KeptRanges:
        return cls(*read(result), save=save)

    def landed(self) -> dict[int, list[Span]]:
        with self._lock:
            return {i: list(f.landed) for i, f in self._files.items()}

    def get(self, index: int) -> KeptFile | None:
        with self._lock:
            return self._files.get(index)

    def choose_size(self, size: int) -> int:
        """The range size of this job: the one its ranges were kept in, else `size`."""
        with self._lock:
            if self.range_size is None:
                self.range_size = size
            return self.range_size

    def claim(self, claims: Mapping[int, Destination]) -> None:
        """New files about to be sent as ranges, with their destinations' claims."""
        if not claims:
            return
        with self._lock:
            for index, claim in claims.items():
                self._files[index] = KeptFile(claim)
            self._write()

    def land(self, index: int, spans: list[Span], whole: bool) -> None:
        """A range of file `index` landed: its spans now (the file leaves when `whole`)."""
        with self._lock:
            kept = self._files.get(index)
            if kept is None:
                return
            if whole:
                del self._files[index]
            else:
                self._files[index] = KeptFile(kept.claim, tuple(spans))
            self._write()

    def drop(self, indexes: list[int]) -> list[KeptFile]:
        """Files that ended or are sent whole from now on; their records as they were."""
        with self._lock:
            gone = [f for i in indexes if (f := self._files.pop(i, None)) is not None]
            if gone:
                self._write()
            return gone

    def _write(self) -> None:
        self._save({KEY: {"range_bytes": self.range_size,
                          "files": {str(i): f.to_json() for i, f in self._files.items()}}})
