"""d-w fast probing (stork/tuning/dw.py) on fixed curves: where it stops, what it probes,
and why depth matters on a noisy curve."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest

from stork import tuning as optimizers
from stork.config import load
from stork.dataset.chunks import Params
from stork.eos.samplers import Sampler
from stork.eos.service import EosService
from stork.eos.types import EstimateRequest
from stork.errors import ConfigError, SamplingError
from stork.tuning.base import DatasetDescription, Limits, ProbeResult
from stork.tuning.dw import (
    DwIntervalOptimizer,
    DwOptimizer,
    interval_search,
    window_search,
)
from stork.tuning.sampling import Sample

LEVELS = list(range(1, 9))  # the paper's Lustre default I/O: 1..8 flows


def curve_peaking_at(peak: int) -> dict[int, float]:
    """Unimodal over 1..8: up by 100 a flow to `peak`, down by 80 a flow after it."""
    return {n: 1000 + 100 * min(n, peak) - 80 * max(0, n - peak) for n in LEVELS}


class Recorder:
    """measure(level): the k-th call at a level gives the k-th listed value (cycling)."""

    def __init__(self, values: dict[int, Sequence[float]]) -> None:
        self.values = values
        self.calls: list[int] = []
        self.seen: dict[int, int] = defaultdict(int)

    def __call__(self, level: int) -> float:
        self.calls.append(level)
        k = self.seen[level]
        self.seen[level] += 1
        values = self.values[level]
        return float(values[k % len(values)])


@pytest.mark.parametrize(("peak", "depth", "width", "probed_levels"), [
    # windows {7,8} {6,7} ... down to the first two windows where fewer flows do worse
    (8, 3, 2, [8, 7, 6]),  # {7,8} and {6,7} both fall: chosen in {7,8}
    (4, 3, 2, [8, 7, 6, 5, 4, 3, 2]),  # {3,4} and {2,3} fall: chosen in {3,4}
    (1, 3, 2, LEVELS[::-1]),  # never falls: down to {1,2}, the best measured
    (4, 5, 3, [8, 7, 6, 5, 4, 3, 2]),  # {3,4,5} and {2,3,4} fall: chosen in {3,4,5}
    (6, 3, 3, [8, 7, 6, 5, 4]),
])
def test_window_search_finds_the_peak_with_the_expected_probes(
        peak: int, depth: int, width: int, probed_levels: list[int]) -> None:
    curve = curve_peaking_at(peak)
    measure = Recorder({n: [v] for n, v in curve.items()})
    found = window_search(measure, LEVELS, depth, width)
    assert found.chosen == peak
    assert found.mean_mbps == found.peak_mbps == curve[peak]
    # each level measured depth times in a row, from the top down, and never again
    assert measure.calls == [n for n in probed_levels for _ in range(depth)]
    assert found.probes == depth * len(probed_levels)
    assert found.stopped == (peak > 1)


def test_window_search_slides_over_levels_that_are_not_consecutive() -> None:
    levels = [1, 2, 4, 8, 16, 32, 64]  # the loni sweeps
    curve = {1: 400.0, 2: 800.0, 4: 1300.0, 8: 1450.0, 16: 1480.0, 32: 1460.0, 64: 1300.0}
    measure = Recorder({n: [v] for n, v in curve.items()})
    found = window_search(measure, levels, 3, 2)
    # {32,64} fewer do better; {16,32} better; {8,16} worse; {4,8} worse: chosen in {8,16}
    assert found.chosen == 16
    assert measure.calls == [n for n in (64, 32, 16, 8, 4) for _ in range(3)]


def noisy_curve() -> dict[int, list[float]]:
    """Peak at 3 flows, but the first measurement at 6 and at 5 is a deep dip: one
    measurement per level sees the rate fall twice with fewer flows from 7 on."""
    curve = curve_peaking_at(3)
    values = {n: [v, v, v] for n, v in curve.items()}
    values[6] = [curve[6] - 400, curve[6] + 150, curve[6] + 150]
    values[5] = [curve[5] - 500, curve[5] + 200, curve[5] + 200]
    return values


def test_depth_survives_a_noisy_curve_that_one_measurement_stops_early_on() -> None:
    values = noisy_curve()
    single = window_search(Recorder(values), LEVELS, 1, 2)
    assert single.stopped and single.chosen == 7  # stopped at {5,6} after {6,7}: wrong
    measure = Recorder(values)
    deep = window_search(measure, LEVELS, 3, 2)
    assert deep.chosen == 3 and deep.stopped
    assert deep.measurements[5] == tuple(values[5])  # the dip is averaged in, not dropped
    assert deep.probes == 3 * 8  # down to {1,2}: {2,3} and {1,2} fall


def test_interval_search_jumps_levels_and_stops_after_two_falls() -> None:
    curve = curve_peaking_at(4)
    measure = Recorder({n: [v] for n, v in curve.items()})
    found = interval_search(measure, LEVELS, 3, 2)
    # 8, 6, 4, 2: 2 is the first fall; the levels run out before a second one
    assert measure.calls == [n for n in (8, 6, 4, 2) for _ in range(3)]
    assert found.chosen == 4 and not found.stopped
    measure = Recorder({n: [v] for n, v in curve_peaking_at(7).items()})
    found = interval_search(measure, LEVELS, 2, 2)
    assert measure.calls == [n for n in (8, 6, 4) for _ in range(2)]
    assert found.chosen == 8 and found.stopped  # 7 is jumped over: the variant's weakness


def test_a_measure_that_runs_out_stops_the_search_with_what_it_has() -> None:
    curve = curve_peaking_at(2)
    budget = [5]

    def measure(level: int) -> float | None:
        budget[0] -= 1
        return curve[level] if budget[0] >= 0 else None

    found = window_search(measure, LEVELS, 2, 2)
    assert found.exhausted and not found.stopped
    assert found.measurements == {8: (curve[8], curve[8]), 7: (curve[7], curve[7]),
                                  6: (curve[6],)}
    assert found.chosen == 6
    with pytest.raises(SamplingError, match="measured nothing"):
        window_search(lambda level: None, LEVELS, 2, 2)


def test_bad_depth_or_width_is_refused_with_the_knob_named() -> None:
    with pytest.raises(ConfigError, match="DW_DEPTH"):
        window_search(lambda n: 1.0, LEVELS, 0, 2)
    with pytest.raises(ConfigError, match="DW_WIDTH"):
        DwOptimizer(3, 1)


def test_knobs_are_read_once_into_settings_and_reach_the_optimizer(tmp_path) -> None:
    config = tmp_path / "stork_config"
    config.write_text("DW_DEPTH = 5\nDW_WIDTH = 3\n")
    settings = load(str(config), env={})
    optimizer = optimizers.get("dw", settings)
    assert isinstance(optimizer, DwOptimizer)
    assert (optimizer.depth, optimizer.width) == (5, 3)
    assert isinstance(optimizers.get("DW-interval"), DwIntervalOptimizer)
    config.write_text("DW_WIDTH = 1\n")
    with pytest.raises(ConfigError, match="DW_WIDTH"):
        load(str(config), env={})


def test_the_optimizer_probes_streams_then_concurrency_with_real_parameters() -> None:
    """Rate over p peaks at 4 (cc = 1); over cc (at p = 4) at 8; a probe reports the
    parameters it ran with, as the daemon's does."""
    by_p = {1: 100.0, 2: 180.0, 4: 300.0, 8: 280.0, 16: 250.0, 32: 200.0}
    by_cc = {1: 300.0, 2: 550.0, 4: 900.0, 8: 1200.0, 16: 1100.0, 32: 1000.0, 64: 900.0}
    ran: list[Params] = []

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        ran.append(params)
        mbps = by_p[params.p] if params.cc == 1 else by_cc[params.cc]
        return ProbeResult(params, mbps, size_bytes, 1.0, max(params.cc, 1))

    dataset = DatasetDescription.of(50e6, 1000, rtt_s=0.04, bandwidth_bps=10e9)  # cc <= 125
    limits = Limits(max_cc=64, max_p=32, max_pp=32, max_streams=256)
    decision = DwOptimizer(2, 2).optimize([], dataset, limits, probe)
    assert decision.params == Params(8, 4, 1)
    assert decision.predicted_mbps == 1200.0 and decision.unit_mbps == 300.0
    assert decision.band_mbps == (900.0, 1500.0)
    assert all(p.pp == 1 for p in ran)
    p_stage = [p.p for p in ran if p.cc == 1]
    # streams: 32 down to 1, each twice, from the top ({2,4} and {1,2} fall: p = 4)
    assert p_stage[:12] == [32, 32, 16, 16, 8, 8, 4, 4, 2, 2, 1, 1]
    # concurrency: at most 256 // 4 = 64, from the top, at p = 4
    cc_stage = [p for p in ran if p.cc > 1]
    assert cc_stage[0] == Params(64, 4, 1) and {p.p for p in cc_stage} == {4}
    assert len(decision.probes) == len(ran)
    assert "d=2, w=2" in decision.reason


def test_the_eos_samples_a_single_files_stream_count_with_dw(tmp_path) -> None:
    """EOS_SAMPLING = dw: the stream count of a transfer or estimation, from samples placed
    by d-w probing over 1, 2, 4, 8, 16 (EOS_MAX_STREAMS 16), the choice d-w's own."""
    curve = {1: 100.0, 2: 180.0, 4: 250.0, 8: 220.0, 16: 150.0}
    measured: list[int] = []

    class Curve(Sampler):
        name = "fake-curve"

        def measure(self, n: int) -> Sample:  # a stand-in network (the logic is under test)
            measured.append(n)
            return Sample(n, curve[n])

    settings = load(None, env={"HOME": str(tmp_path), "_STORK_EOS_SAMPLING": "dw",
                               "_STORK_DW_DEPTH": "2", "_STORK_EOS_MAX_STREAMS": "16",
                               "_STORK_EOS_SAMPLING_BUDGET": "0"})
    eos = EosService(settings, None, sampler_factory=lambda r: Curve())
    try:
        result = eos.estimate(EstimateRequest("ftp://10.9.9.1:2811/a", "ftp://10.9.9.2:2811/b"))
    finally:
        eos.shutdown()
    # windows {8,16} {4,8} better with fewer; {2,4} and {1,2} worse: chosen in {2,4}
    assert measured == [16, 16, 8, 8, 4, 4, 2, 2, 1, 1]
    assert result.optimal_streams == 4 and result.model == "dw"
    assert result.estimated_throughput_mbps == 250.0
    assert "d-w probing (d=2, w=2)" in result.reason
