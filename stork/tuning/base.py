"""One interface for every optimizer of (cc, p, pp): a pure strategy over a probe.

An optimizer is given
* the history (`TransferRecord`s, oldest first: what past transfers achieved),
* the dataset's description (`DatasetDescription`: average file size, file count, total
  bytes, size class, and what is known of the path),
* the limits (`Limits`: cc, p and pp maxima, total streams cc * p, and, when the caller can
  only run some values, which),
* a `probe(params, size_bytes) -> ProbeResult` callable that transfers real files of the
  dataset not sent before (whole files, about `size_bytes`) with those parameters and says
  what it measured (`ProbeResult.empty` when no file was left to send: nothing measured, and
  an optimizer stops probing),
and returns a `Decision`: the parameters for the rest of the dataset, the throughput it
predicts and the band around it (an achieved throughput outside the band means: ask again,
`Optimizer.retune`), every probe it used with what it measured, its own name and a reason a
person can read. It does no I/O of its own and reads no clock: everything it learns comes
from its arguments, so it is tested and benchmarked against fixed tables and replays
(`bench/bench_grid.py`), and the EOS runs it unchanged with real probes.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from stork.dataset.chunks import Params, SizeClass, size_class
from stork.errors import ConfigError
from stork.translog import TransferRecord

if TYPE_CHECKING:
    from stork.config import Settings


@dataclass(frozen=True)
class DatasetDescription:
    """What an optimizer knows of the dataset (or chunk) to move and of its path."""

    avg_file_bytes: float
    file_count: int
    total_bytes: int
    size_class: SizeClass
    src_host: str = ""
    dest_host: str = ""
    rtt_s: float | None = None
    bandwidth_bps: float | None = None  # the path's bottleneck rate
    buffer_bytes: int | None = None  # TCP buffer
    known_load: int = 0  # other transfers the daemon itself runs on the same link now

    @classmethod
    def of(cls, avg_file_bytes: float, file_count: int, *, rtt_s: float | None = None,
           bandwidth_bps: float | None = None, buffer_bytes: int | None = None,
           src_host: str = "", dest_host: str = "", known_load: int = 0
           ) -> DatasetDescription:
        """A description whose size class is computed against the path's BDP (medium when
        the BDP is not known, as `stork.dataset.chunks` does for unknown sizes)."""
        bdp = bdp_bytes(rtt_s, bandwidth_bps)
        cls_ = size_class(round(avg_file_bytes), bdp) if bdp else SizeClass.MEDIUM
        return cls(avg_file_bytes, file_count, round(avg_file_bytes * file_count), cls_,
                   src_host, dest_host, rtt_s, bandwidth_bps, buffer_bytes, known_load)

    @property
    def bdp_bytes(self) -> float | None:
        return bdp_bytes(self.rtt_s, self.bandwidth_bps)


def bdp_bytes(rtt_s: float | None, bandwidth_bps: float | None) -> float | None:
    """The bandwidth-delay product in bytes, when both are known."""
    if not rtt_s or not bandwidth_bps:
        return None
    return rtt_s * bandwidth_bps / 8


@dataclass(frozen=True)
class Limits:
    """What the decision may use: cc, p and pp at most these, cc * p at most `max_streams`;
    `values`, when given, are the only values any of the three may take (a replay over a
    measured grid can only run the cells it has; a real transfer can run any whole number)."""

    max_cc: int = 32
    max_p: int = 32
    max_pp: int = 32
    max_streams: int = 1024
    values: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if min(self.max_cc, self.max_p, self.max_pp, self.max_streams) < 1:
            raise ConfigError(f"optimizer limits must be 1 or more: {self}")
        if self.values is not None and (not self.values or min(self.values) < 1):
            raise ConfigError(f"optimizer limit values must be whole numbers >= 1: {self}")

    def maxima(self) -> tuple[int, int, int]:
        return self.max_cc, self.max_p, self.max_pp

    def allowed(self, axis: int) -> list[int]:
        """The values axis 0 (cc), 1 (p) or 2 (pp) may take, ascending."""
        top = self.maxima()[axis]
        if self.values is None:
            return list(range(1, top + 1))
        inside = sorted(v for v in set(self.values) if v <= top)
        return inside or [min(self.values)]

    def admits(self, params: Params) -> bool:
        values = (params.cc, params.p, params.pp)
        return (all(v in self.allowed(i) for i, v in enumerate(values))
                and params.cc * params.p <= self.max_streams)

    def at_most_cc(self, files: int) -> Limits:
        """These limits with cc at most `files` (at least 1): a concurrency above the number
        of files to send has nothing to carry."""
        return dataclasses.replace(self, max_cc=max(1, min(self.max_cc, files)))

    def nearest(self, params: Params) -> Params:
        """The allowed parameters nearest to `params` on a log scale; past the streams limit,
        the larger of cc and p (p on a tie) comes down a value at a time until cc * p fits."""
        cc, p, pp = (_nearest(self.allowed(i), v)
                     for i, v in enumerate((params.cc, params.p, params.pp)))
        cc_values, p_values = self.allowed(0), self.allowed(1)
        while cc * p > self.max_streams and (p > p_values[0] or cc > cc_values[0]):
            if p > p_values[0] and (p >= cc or cc == cc_values[0]):
                p = max(v for v in p_values if v < p)
            else:
                cc = max(v for v in cc_values if v < cc)
        return Params(cc, p, pp)


def _nearest(values: Sequence[int], want: float) -> int:
    target = math.log(max(want, 1e-9))
    return min(values, key=lambda v: (abs(math.log(v) - target), v))


@dataclass(frozen=True)
class ProbeResult:
    """What one probe moved and measured."""

    params: Params
    throughput_mbps: float
    bytes_moved: int = 0
    duration_s: float = 0.0
    files: int = 0

    @property
    def empty(self) -> bool:
        """Nothing was sent (no file of the dataset was left, or the transfer is stopping):
        nothing was measured either."""
        return self.files == 0 and self.bytes_moved == 0 and not self.throughput_mbps


def best_probe(probes: Sequence[ProbeResult], tolerance: float = 0.0) -> ProbeResult:
    """The probe to keep: the highest measured, unless probes measured within `tolerance`
    (relative) of it use fewer streams; then the fewest streams cc * p of those, then the
    least pipelining, then the highest measured. `probes` holds one at least."""
    top = max(r.throughput_mbps for r in probes)
    near = [r for r in probes if r.throughput_mbps >= (1 - tolerance) * top]
    return min(near, key=lambda r: (r.params.cc * r.params.p, r.params.pp, -r.throughput_mbps))


# (parameters, about how many bytes of the dataset to send) -> what was measured
Probe = Callable[[Params, int], ProbeResult]


@dataclass(frozen=True)
class Decision:
    """An optimizer's answer for the rest of the dataset."""

    optimizer: str
    params: Params
    predicted_mbps: float | None
    band_mbps: tuple[float, float] | None  # an achieved throughput outside: ask again
    probes: tuple[ProbeResult, ...]
    reason: str
    # predicted throughput at cc = 1 with the same p and pp (HARP's unit throughput, which
    # shares concurrency among chunks run together); None when the optimizer has no model
    unit_mbps: float | None = None

    def outside_band(self, achieved_mbps: float) -> bool:
        if self.band_mbps is None:
            return False
        low, high = self.band_mbps
        return not low <= achieved_mbps <= high


class Optimizer(abc.ABC):
    """A strategy that chooses (cc, p, pp) for a dataset from history and probes."""

    name: ClassVar[str]

    @classmethod
    def from_settings(cls, settings: Settings) -> Optimizer:
        """The optimizer with its knobs from the settings (those without knobs: the default)."""
        return cls()

    @abc.abstractmethod
    def optimize(self, history: Sequence[TransferRecord], dataset: DatasetDescription,
                 limits: Limits, probe: Probe) -> Decision:
        """Parameters for the rest of `dataset` (see the module's text)."""

    def retune(self, decision: Decision, achieved_mbps: float) -> bool:
        """Whether a chunk that achieved `achieved_mbps` under `decision` calls for another
        `optimize` before the next chunk: the achieved throughput left the predicted band."""
        return decision.outside_band(achieved_mbps)
