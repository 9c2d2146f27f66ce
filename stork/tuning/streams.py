"""The paper-001 EOS as an optimizer of datasets: streams only, from samples.

The EOS of the Stork paper chooses one parameter, the parallel streams of one file, from
sample transfers (`stork.tuning.sampling`: `guided` places the samples, `decide` takes the
fewest measured streams within the tolerance of the best). Under the optimizer interface a
sample is a probe with real files of the dataset at (cc = 1, p = n, pp = 1): the same
transfer the paper samples, so the streams-only EOS can be compared with HARP on the same
datasets (`optimization = "eos"`). It reads no history (the paper's EOS learns only from
its own samples; `use_history` reuse lives in the EOS service for single files), keeps cc and
pp at 1, and predicts the chosen count's measured throughput.
"""

from __future__ import annotations

from collections.abc import Sequence

from stork.dataset.chunks import Params
from stork.translog import TransferRecord
from stork.tuning.base import DatasetDescription, Decision, Limits, Optimizer, Probe
from stork.tuning.sampling import Sample, decide, guided

TOLERANCE = 0.03  # EOS_TOLERANCE's default
MAX_SAMPLES = 4  # EOS_MAX_SAMPLES's default
BAND = 0.25  # an achieved throughput this far off the measured one asks again


class StreamsOptimizer(Optimizer):
    name = "eos"

    def __init__(self, tolerance: float = TOLERANCE, max_samples: int = MAX_SAMPLES) -> None:
        self.tolerance = tolerance
        self.max_samples = max_samples

    def optimize(self, history: Sequence[TransferRecord], dataset: DatasetDescription,
                 limits: Limits, probe: Probe) -> Decision:
        probes = []
        # a probe of about twice the BDP (at least 1 MiB): past TCP's start-up
        size = max(int(2 * (dataset.bdp_bytes or 0)), 1 << 20)
        allowed = limits.allowed(1)

        def measure(n: int) -> Sample:
            result = probe(limits.nearest(Params(1, n, 1)), size)
            probes.append(result)
            return Sample(result.params.p, result.throughput_mbps, result.duration_s,
                          result.bytes_moved)

        samples = guided(measure, max(allowed), self.tolerance, self.max_samples,
                         levels=allowed)
        chosen = decide(samples, max(allowed), self.tolerance, levels=allowed)
        params = Params(1, chosen.streams, 1)
        mbps = chosen.throughput_mbps
        return Decision(self.name, params, mbps, (mbps * (1 - BAND), mbps * (1 + BAND)),
                        tuple(probes), f"streams only (paper 001): {chosen.reason}", mbps)
