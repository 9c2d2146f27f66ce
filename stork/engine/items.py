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


def piece_bytes(bdp_bytes: float, floor_mb: int) -> int:
    """The least piece an item is cut into at the end of a queue (`guided`): as a range,
    16 BDPs, at least `floor_mb` MiB (STORK_PIECE_MIN_MB); 0 (never cut) when that is 0."""
    return range_bytes(bdp_bytes, floor_mb << 20) if floor_mb > 0 else 0


def split(file: FileWork, range_size: int) -> list[Item]:
    """The file as items: ranges of `range_size` when it holds at least two, else whole."""
    size = file.size_bytes
    if size is None or range_size <= 0 or size < 2 * range_size:
        return [Item(file)]
    return [Item(file, offset, min(range_size, size - offset))
            for offset in range(0, size, range_size)]


def guided(item: Item, queued_bytes: int, workers: int, floor_bytes: int
           ) -> tuple[Item, Item | None]:
    """The part of `item` a worker takes now, and the rest (None: all of it), when
    `queued_bytes` (the item's own included) are queued for `workers`: the first
    ceil(queued_bytes / workers) bytes, at least `floor_bytes` (`piece_of`)."""
    if workers < 1:
        return item, None
    return piece_of(item, -(-queued_bytes // workers), floor_bytes)


def piece_of(item: Item, share: float, floor_bytes: int) -> tuple[Item, Item | None]:
    """The first `share` bytes of `item`, at least `floor_bytes`, as a range, and the rest,
    when at least `floor_bytes` are left after it; else the item whole (and None). Sizes
    are rounded up to a MiB; a `floor_bytes` of 0, or a file of unknown size, is never
    cut."""
    size = item.size_bytes
    if floor_bytes <= 0 or item.file.size_bytes is None:
        return item, None
    share = int(-(-max(float(floor_bytes), share) // MIB) * MIB)
    if size - share < floor_bytes:
        return item, None
    start = item.offset
    return Item(item.file, start, share), Item(item.file, start + share, size - share)


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


def gaps(spans: Sequence[Span], start: int, end: int) -> list[Span]:
    """The parts of [start, end) that merged `spans` do not hold."""
    out: list[Span] = []
    for s, e in spans:
        if s > start:
            out.append((start, min(s, end)))
        start = max(start, e)
        if start >= end:
            break
    if start < end:
        out.append((start, end))
    return [(s, e) for s, e in out if e > s]


def plan_items(files: Iterable[FileWork], range_size: int,
               landed: Mapping[int, Sequence[Span]] | None = None) -> list[Item]:
    """Every file's items in the files' order. A file some of whose bytes `landed` (spans
    per file index, as `Assembly.spans` keeps them; a piece cut at the end of a queue
    counts as any range) sends only what did not land: its gaps, in ranges of at most
    `range_size`."""
    items: list[Item] = []
    for file in files:
        have = merged((landed or {}).get(file.index, ()))
        if not have or file.size_bytes is None:
            items.extend(split(file, range_size))
            continue
        for start, end in gaps(have, 0, file.size_bytes):
            step = range_size if range_size > 0 else end - start
            items.extend(Item(file, o, min(step, end - o)) for o in range(start, end, step))
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
