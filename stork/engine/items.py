"""PURE: a job's work as items (whole files, byte ranges of large files) and their assembly.

A file of at least two ranges' worth is sent as byte ranges written in place
(``-partial-offset O -partial-length L``), so a large file keeps several workers busy and a
crash leaves only the ranges in flight in doubt. A range is `RANGE_BDPS` bandwidth-delay
products (a range shorter than a few BDPs spends most of its time in TCP start-up), and at
least `RANGE_FLOOR_BYTES` (a tool start and a connection per range cost a few round trips).
`Assembly` knows which ranges of each file have landed; a file is whole when all have, and
only then is it verified (size, and the checksum the job asks for).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def plan_items(files: Iterable[FileWork], range_size: int,
               done_ranges: dict[int, Sequence[tuple[int, int]]] | None = None) -> list[Item]:
    """Every file's items in the files' order, less the ranges `done_ranges` names as landed
    (a resumed job: (offset, length) per file index)."""
    items: list[Item] = []
    for file in files:
        landed = set(map(tuple, (done_ranges or {}).get(file.index, ())))
        items.extend(i for i in split(file, range_size)
                     if not (i.is_range and (i.offset, i.length) in landed))
    return items


@dataclass
class Assembly:
    """Which ranges of each split file have landed. `land` answers whether the file is now
    whole (its last range landed)."""

    expected: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    landed: dict[int, set[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Iterable[Item],
           done_ranges: dict[int, Sequence[tuple[int, int]]] | None = None) -> Assembly:
        assembly = cls()
        for item in items:
            if item.length is not None:
                assembly.expected.setdefault(item.file.index, set()).add(
                    (item.offset, item.length))
        for index, ranges in (done_ranges or {}).items():
            for offset, length in ranges:
                assembly.expected.setdefault(index, set()).add((offset, length))
                assembly.landed.setdefault(index, set()).add((offset, length))
        return assembly

    def land(self, item: Item) -> bool:
        """Record `item` as landed; True when its file is now whole."""
        if item.length is None:
            return True
        got = self.landed.setdefault(item.file.index, set())
        got.add((item.offset, item.length))
        return got >= self.expected.get(item.file.index, set())

    def ranges_landed(self, index: int) -> list[tuple[int, int]]:
        return sorted(self.landed.get(index, ()))
