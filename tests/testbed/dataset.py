"""Datasets: many files of given sizes, with deterministic content, placed at a site.

A dataset is written from a spec, comma-separated parts of ``COUNTxSIZE`` (every file that
size) or ``COUNTxLOW-HIGH`` (sizes uniform in [LOW, HIGH], drawn from the seed):

    20x64K                   20 files of 64 KiB
    200x1M-4M                200 files between 1 MiB and 4 MiB
    2000x256K,500x2M,20x64M  a mix (the files of all parts in one order shuffled by the seed)

Sizes take K, M, G (powers of 1024); 0 is a size (empty files). The same spec and seed give
the same file names, sizes and bytes everywhere. The bytes are real data (no holes): 4 MiB
of seeded random bytes, sliced per 1 MiB chunk at an offset of its own behind a 16-byte
header of (file index, chunk index), so no two chunks are equal and writing runs at disk
speed.

    dataset = plan("2000x256K,500x2M,20x64M", seed=1)      # pure: names and sizes
    directory = place(bed, "a", dataset)                     # written in site a's directory
"""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stork.errors import ArgumentsError
from stork.transfer.options import parse_size

if TYPE_CHECKING:
    from tests.testbed.netns import Testbed

MAX_FILES = 1_000_000
POOL_BYTES = 4 << 20
CHUNK_BYTES = 1 << 20
MANIFEST = "dataset.json"
_PART = re.compile(r"^([0-9]+)x([0-9]+[KMG]?)(?:-([0-9]+[KMG]?))?$", re.IGNORECASE)


class DatasetError(ValueError):
    """A dataset spec that cannot be read; the message names the part."""


@dataclass(frozen=True)
class Part:
    """`count` files with sizes uniform in [low_bytes, high_bytes] (equal: a fixed size)."""

    count: int
    low_bytes: int
    high_bytes: int


@dataclass(frozen=True)
class Dataset:
    spec: str
    seed: int
    sizes: tuple[int, ...]  # bytes of file i, named names()[i]

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    @property
    def mean_bytes(self) -> int:
        """Average file size in bytes, rounded (the FileSize column of a grid row)."""
        return round(self.total_bytes / self.count)

    @property
    def dirname(self) -> str:
        """A directory name for this spec and seed: `2000x256K+500x2M-s1`."""
        return re.sub(r"[^0-9A-Za-z+.-]", "_", self.spec.replace(",", "+")) + f"-s{self.seed}"

    def names(self) -> list[str]:
        return [f"f{i:06d}.dat" for i in range(self.count)]


def _size(text: str) -> int:
    """Bytes of ``"256K"``; zero is a size too (empty files)."""
    return 0 if text.rstrip("KMGkmg").strip("0") == "" else parse_size(text)


def parse_spec(spec: str) -> tuple[Part, ...]:
    """``"2000x256K,500x1M-4M"`` -> (Part(2000, 262144, 262144), Part(500, 1048576, 4194304))."""
    parts = []
    for text in spec.replace(" ", "").split(","):
        match = _PART.match(text)
        if not match:
            raise DatasetError(f"dataset part {text!r}: expected COUNTxSIZE or COUNTxLOW-HIGH, "
                               "e.g. 200x1M or 200x1M-4M")
        try:
            low = _size(match.group(2))
            high = _size(match.group(3)) if match.group(3) else low
        except ArgumentsError as exc:
            raise DatasetError(f"dataset part {text!r}: {exc}") from None
        count = int(match.group(1))
        if count < 1:
            raise DatasetError(f"dataset part {text!r}: at least one file")
        if high < low:
            raise DatasetError(f"dataset part {text!r}: the range runs from low to high")
        parts.append(Part(count, low, high))
    total = sum(p.count for p in parts)
    if total > MAX_FILES:
        raise DatasetError(f"dataset {spec!r}: {total} files, more than {MAX_FILES}")
    return tuple(parts)


def plan(spec: str, seed: int = 1) -> Dataset:
    """The files of `spec`: sizes drawn from `seed`, in one order shuffled by `seed` when the
    spec has several parts (so large files are not all at the end of the list)."""
    rng = random.Random(seed)
    parts = parse_spec(spec)
    sizes = [rng.randint(p.low_bytes, p.high_bytes) for p in parts for _ in range(p.count)]
    if len(parts) > 1:
        rng.shuffle(sizes)
    return Dataset(spec, seed, tuple(sizes))


def _pool(seed: int) -> bytes:
    pool = random.Random(seed).randbytes(POOL_BYTES)
    return pool + pool[:CHUNK_BYTES]  # any chunk-long slice from inside the pool is contiguous


def _write_file(path: Path, index: int, size_bytes: int, pool: memoryview) -> None:
    with open(path, "wb") as handle:
        for chunk, start in enumerate(range(0, size_bytes, CHUNK_BYTES)):
            length = min(CHUNK_BYTES, size_bytes - start)
            header = struct.pack("<QQ", index, chunk)
            offset = (index * 2654435761 + chunk * 40503) % POOL_BYTES
            handle.write(header[:length])
            if length > len(header):
                handle.write(pool[offset:offset + length - len(header)])


def write(dataset: Dataset, directory: Path) -> Path:
    """Write `dataset` into `directory` (made if needed; nothing else is kept in it) and a
    manifest. A directory whose manifest and file sizes already match is left as it is."""
    manifest = {"spec": dataset.spec, "seed": dataset.seed, "sizes": list(dataset.sizes)}
    if (directory / MANIFEST).exists() and not problems(dataset, directory):
        try:
            if json.loads((directory / MANIFEST).read_text()) == manifest:
                return directory
        except ValueError:
            pass
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pool = memoryview(_pool(dataset.seed))
    for index, (name, size) in enumerate(zip(dataset.names(), dataset.sizes, strict=True)):
        _write_file(directory / name, index, size, pool)
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return directory


def problems(dataset: Dataset, directory: Path) -> list[str]:
    """What is not whole in `directory`: each missing file or file of the wrong size."""
    found = []
    for name, size in zip(dataset.names(), dataset.sizes, strict=True):
        try:
            have = (directory / name).stat().st_size
        except FileNotFoundError:
            found.append(f"{name}: missing")
            continue
        if have != size:
            found.append(f"{name}: {have} of {size} bytes")
    return found


def place(bed: Testbed, site: str, dataset: Dataset) -> Path:
    """Write `dataset` in `site`'s directory (served by its GridFTP server); its directory."""
    return write(dataset, bed.site_dir(site) / "datasets" / dataset.dirname)
