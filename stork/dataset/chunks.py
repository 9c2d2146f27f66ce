"""A dataset's files in chunks by size class, each with its own (cc, p, pp). Pure.

Size classes are relative to the path's bandwidth-delay product (BDP), as in the HARP
paper's partitioning: a file smaller than the BDP is *small* (its transfer is over before
TCP fills the pipe: concurrency and pipelining help, streams do not), one of 16 BDPs or more
is *large* (parallel streams help, pipelining does not), the rest are *medium*. A file whose
size is not known yet (a gsiftp listing, a url_list) counts as medium.

Defaults per class, when `arguments` gives none (`-cc`, `-p`, `-pp` given there win for
every chunk). They start from the heuristics HARP starts its sample transfers from (its
reference [4]): pipelining depth = ceil(BDP / mean size), streams = ceil(mean size / BDP).
The medium and large concurrencies and the bounds come from the best cells of our own
(cc, p, pp) sweeps on the emulated wan40 and lan10 paths (docs/BENCHMARKS.md, section 5),
where pipelining helped medium files too and 4 streams per file were enough: at most
8 x 4 = 32 streams, the EOS's default for one file. Small files take their streams as
concurrency alone (a file under one BDP gains nothing from streams of its own), so their
chunk gets the same 32 as 32 files in flight: in every dataset of small files in the
(cc, p, pp) grids of real paths we did not measure (`bench/bench_presets.py`,
docs/BENCHMARKS.md 5.1), the rate at one stream per file rose up to cc 32, the largest
level measured, and cc 16 made 0.72-0.89 of it. Section 5's sweep had stopped at cc 16.

    small   cc 32   p 1                           pp ceil(BDP/mean), at least 2 (on)
    medium  cc 8    p ceil(mean/BDP), 1 to 4      pp ceil(BDP/mean), at least 2 (on)
    large   cc 8    p ceil(mean/BDP), 1 to 4      pp 1 (off)

and no more streams per file than the chunk's files in flight need to fill the path
(`streams_to_fill`): on a path of a short round trip a stream carries the link alone, so a
chunk there takes p 1 and its concurrency, not 4 streams for each of its 8 files (a 2 ms,
200 Mbit/s path: 3 streams fill it; a 1 Gbit/s LAN of 0.16 ms: 2).

Streams to fill a path: Mathis et al.'s bound on one TCP stream's rate, MSS x C / (RTT x
sqrt(loss)) with C = sqrt(3/2), makes the streams that fill a link of rate R: R x RTT x
sqrt(loss) / (C x MSS) = BDP x sqrt(loss) / (C x MSS). At the loss bound LOSS_BOUND (1%,
chosen before any measurement: a path that loses more is broken for bulk TCP, and every
path of the testbed loses less, 0 to 0.5%) and a 1460-byte MSS, a stream fills about 12
segments of the BDP (17.9 KB). The bound counts loss only: a path whose streams are held
back by something else (a host's rate per stream, as on loni's 10 Gbit/s with 2 ms:
459 Mbit/s for one stream) is not told apart, so it stays at the caps above; what the
bound changes is where the BDP is small: under about 430 KB a chunk of 8 files in flight
takes fewer than 4 streams each, under about 560 KB a file sent whole fewer than 32.

Pipelining depth: globus-url-copy's ``-pp`` takes no depth; it switches pipelining on (the
client queues transfer commands ahead on each control channel). A depth of 1 is off, 2 or
more is on: `pipelining_flag`. The chunk's label records both (``pp=4 (on)``).

Batches: each chunk runs as a sequence of globus-url-copy runs over batches of its files;
the files of a batch are recorded done as soon as it ends, so a daemon killed mid-dataset
resends at most the batch that was running. A batch holds at least ``4 * cc`` files and at
least BATCH_BYTES bytes (fewer when the chunk runs out), at most BATCH_MAX_FILES files.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

LOSS_BOUND = 0.01  # the loss `streams_to_fill` assumes: see the module's text
MSS_BYTES = 1460
MATHIS_C = math.sqrt(1.5)
SMALL_BELOW_BDP = 1.0  # size < 1 BDP: small
LARGE_FROM_BDP = 16.0  # size >= 16 BDPs: large
MAX_DEFAULT_PP = 32
MAX_DEFAULT_P = 4
BATCH_BYTES = 64 << 20
BATCH_MAX_FILES = 1000
BATCH_FILES_PER_CC = 4


class SizeClass(enum.Enum):
    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"


DEFAULT_CC = {SizeClass.SMALL: 32, SizeClass.MEDIUM: 8, SizeClass.LARGE: 8}


@dataclass(frozen=True)
class Params:
    """Concurrency (files in flight), parallelism (streams per file), pipelining depth."""

    cc: int
    p: int
    pp: int

    @property
    def pipelining(self) -> bool:
        return pipelining_flag(self.pp)

    def label(self) -> str:
        return f"cc={self.cc} p={self.p} pp={self.pp} ({'on' if self.pipelining else 'off'})"


@dataclass(frozen=True)
class Chunk:
    size_class: SizeClass
    indexes: tuple[int, ...]  # the files' indexes in the dataset, in dataset order
    total_bytes: int  # known sizes only
    params: Params

    def label(self) -> str:
        return f"{self.size_class.value} {self.params.label()}"


def pipelining_flag(pp: int) -> bool:
    """What globus-url-copy can do with a depth: -pp on from 2, off at 1."""
    return pp >= 2


def size_class(size_bytes: int | None, bdp_bytes: float) -> SizeClass:
    if size_bytes is None:
        return SizeClass.MEDIUM
    if size_bytes < SMALL_BELOW_BDP * bdp_bytes:
        return SizeClass.SMALL
    if size_bytes >= LARGE_FROM_BDP * bdp_bytes:
        return SizeClass.LARGE
    return SizeClass.MEDIUM


def streams_to_fill(bdp_bytes: float) -> int | None:
    """The TCP streams that fill a path of `bdp_bytes` at the loss bound (see the module's
    text), at least 1; None for a BDP of 0 or less, a path whose round trip was not
    measured (a single file's convention, `FileRun`), which the bound leaves at the caps."""
    if bdp_bytes <= 0:
        return None
    per_stream = MATHIS_C * MSS_BYTES / math.sqrt(LOSS_BOUND)
    return max(1, math.ceil(bdp_bytes / per_stream))


def default_params(cls: SizeClass, mean_bytes: float, bdp_bytes: float) -> Params:
    """The defaults for a chunk of files of `mean_bytes` on a path of `bdp_bytes` (see the
    module's text)."""
    mean = max(mean_bytes, 1.0)
    bdp = max(bdp_bytes, 1.0)
    cc = DEFAULT_CC[cls]
    pp = 1 if cls is SizeClass.LARGE else min(max(math.ceil(bdp / mean), 2), MAX_DEFAULT_PP)
    fill = streams_to_fill(bdp_bytes) or cc * MAX_DEFAULT_P  # (no bound: the cap)
    p = 1 if cls is SizeClass.SMALL else min(math.ceil(mean / bdp), MAX_DEFAULT_P,
                                             math.ceil(fill / cc))
    return Params(cc=cc, p=max(p, 1), pp=pp)


def plan_chunks(sizes: Sequence[tuple[int, int | None]], bdp_bytes: float, *,
                cc: int | None = None, p: int | None = None, pp: int | None = None
                ) -> list[Chunk]:
    """(index, size) of the files to send -> chunks, small first; given values of cc, p,
    pp override the defaults in every chunk. Empty classes make no chunk."""
    groups: dict[SizeClass, list[tuple[int, int | None]]] = {c: [] for c in SizeClass}
    for index, size in sizes:
        groups[size_class(size, bdp_bytes)].append((index, size))
    chunks = []
    for cls, members in groups.items():
        if not members:
            continue
        known = [s for _, s in members if s is not None]
        total = sum(known)
        mean = total / len(known) if known else bdp_bytes * 4
        d = default_params(cls, mean, bdp_bytes)
        params = Params(cc=cc or d.cc, p=p or d.p, pp=pp or d.pp)
        chunks.append(Chunk(cls, tuple(i for i, _ in members), total, params))
    return chunks


def batches(indexes: Sequence[int], sizes: dict[int, int | None], cc: int) -> list[list[int]]:
    """The chunk's files in runs of globus-url-copy (see the module's text)."""
    least_files = BATCH_FILES_PER_CC * cc
    out: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index in indexes:
        current.append(index)
        current_bytes += sizes.get(index) or 0
        full = len(current) >= least_files and current_bytes >= BATCH_BYTES
        if full or len(current) >= BATCH_MAX_FILES:
            out.append(current)
            current, current_bytes = [], 0
    if current:
        out.append(current)
    return out
