"""PURE: a job's work as items (whole files, byte ranges of large files) and their assembly.

A file of at least two ranges' worth is sent as byte ranges written in place
(``-partial-offset O -partial-length L``), so a large file keeps several workers busy and a
crash leaves only the ranges in flight in doubt. A range is `RANGE_BDPS` bandwidth-delay
products (a range shorter than a few BDPs spends most of its time in TCP start-up), and at
least `RANGE_FLOOR_BYTES` (a tool start and a connection per range cost a few round trips).
`Assembly` knows which bytes of each file have landed (as merged spans, what a job keeps so
that a resumed attempt sends only the rest); a file is whole when all have, and only then is
it verified (size, and the checksum the job asks for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from stork.transfer.worker import FileWork, Item

RANGE_BDPS = 16
RANGE_FLOOR_BYTES = 64 << 20
MIB = 1 << 20


def range_bytes(bdp_bytes: float, floor_bytes: int = RANGE_FLOOR_BYTES) -> int:
    """The range size for a path of `bdp_bytes`: RANGE_BDPS of them, at least `floor_bytes`,
    rounded up to a whole MiB."""
    want = max(float(floor_bytes), RANGE_BDPS * max(bdp_bytes, 0.0))
    return int(-(-want // MIB) * MIB)


def split(file: FileWork, range_size: int) -> list[Item]:
    """The file as items: ranges of `range_size` when it holds at least two, else whole."""
    size = file.size_bytes
    if size is None or range_size <= 0 or size < 2 * range_size:
        return [Item(file)]
    return [Item(file, offset, min(range_size, size - offset))
            for offset in range(0, size, range_size)]


Span = tuple[int, int]  # bytes [start, end) of a file


def merged(spans: Iterable[Span]) -> list[Span]:
    """The spans as few as can be: sorted, overlapping and touching ones joined."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def covered(spans: Sequence[Span], start: int, end: int) -> bool:
    """Whether merged `spans` hold all of [start, end)."""
    return any(s <= start and end <= e for s, e in spans)


def holds(spans: Sequence[Span], size_now: int | None) -> bool:
    """Whether a destination now `size_now` bytes long (None: not there, or not known) can
    still hold the merged `spans` landed in it: ranges written in place leave a file as long
    as its furthest range at least; a shorter one was truncated or replaced since."""
    return bool(spans) and size_now is not None and size_now >= spans[-1][1]


def plan_items(files: Iterable[FileWork], range_size: int,
               landed: Mapping[int, Sequence[Span]] | None = None) -> list[Item]:
    """Every file's items in the files' order, less the ranges that `landed` (spans per
    file index, as `Assembly.spans` keeps them) already holds: a resumed file sends only
    what did not land."""
    items: list[Item] = []
    for file in files:
        have = merged((landed or {}).get(file.index, ()))
        items.extend(i for i in split(file, range_size)
                     if not (i.is_range and covered(have, i.offset, i.offset + i.size_bytes)))
    return items


@dataclass
class Assembly:
    """Which bytes of each split file have landed. `land` answers whether the file is now
    whole (every byte of it landed); `spans` is what a resumed attempt need not send."""

    sizes: dict[int, int] = field(default_factory=dict)
    landed: dict[int, list[Span]] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Iterable[Item],
           landed: Mapping[int, Sequence[Span]] | None = None) -> Assembly:
        assembly = cls()
        for item in items:
            if item.length is not None and item.file.size_bytes is not None:
                assembly.sizes[item.file.index] = item.file.size_bytes
        for index, spans in (landed or {}).items():
            assembly.landed[index] = merged(spans)
        return assembly

    def land(self, item: Item) -> bool:
        """Record `item` as landed; True when its file is now whole."""
        if item.length is None:
            return True
        index = item.file.index
        spans = self.landed[index] = merged(
            [*self.landed.get(index, ()), (item.offset, item.offset + item.length)])
        return covered(spans, 0, self.sizes.get(index, 0))

    def spans(self, index: int) -> list[Span]:
        return list(self.landed.get(index, ()))

    def bytes_landed(self, index: int) -> int:
        return sum(e - s for s, e in self.landed.get(index, ()))
