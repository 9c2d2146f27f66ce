"""ASM (issue 15): clustering and the Calinski-Harabasz index on logs with known clusters,
spline surfaces through their grid points, the halving jump between load surfaces, surface
switching on drift, additivity of the offline analysis (through a real store and the state
files), and `stork_history analyze --report`."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stork.asm import state
from stork.dataset.chunks import Params
from stork.errors import AsmError
from stork.store import SqliteStore, open_store
from stork.translog import TransferRecord, write_grid_csv
from stork.tuning import DatasetDescription, Decision, Limits, ProbeResult, get
from stork.tuning.asm import AsmOptimizer, AsmSettings
from stork.tuning.asm_analysis import Aggregate, Cluster, Model, build_model, cluster, maximum
from stork.tuning.asm_surface import Surface
from tests.pgcluster import PostgresCluster

LEVELS = (1, 2, 4, 8, 16, 32)
GRID = Limits(max_cc=32, max_p=32, max_pp=32, max_streams=1024, values=LEVELS)


def shape(cc: float, p: float, pp: float, peak: tuple[float, float, float]) -> float:
    """A smooth single-peaked throughput (Mbit/s) in log2 space."""
    d = sum((math.log2(v) - math.log2(c)) ** 2 for v, c in zip((cc, p, pp), peak, strict=True))
    return 1000.0 * math.exp(-d / 8) + 50.0


def rows(src: str, dest: str, rtt_s: float, size: float, count: int,
         peak: tuple[float, float, float], *, scale: float = 1.0, sharing: int = 0,
         repeats: int = 1, t0: float = 0.0) -> list[TransferRecord]:
    out = []
    for n, (cc, p, pp) in enumerate(itertools.product((1, 4, 16), (1, 4, 16), (1, 4))):
        for r in range(repeats):
            mbps = shape(cc, p, pp, peak) * scale * (1 + 0.01 * r)
            out.append(TransferRecord(
                time=t0 + n, src_host=src, dest_host=dest, rtt_s=rtt_s, bandwidth_bps=1e10,
                buffer_bytes=2**25, file_size_bytes=size, file_count=count, cc=cc, p=p, pp=pp,
                fast=True, bytes_moved=round(size * count), duration_s=size * count * 8 / mbps
                / 1e6, throughput_mbps=mbps, sharing=sharing))
    return out


def two_networks() -> list[TransferRecord]:
    """Four datasets: small and large files on a 10 ms and on a 100 ms path."""
    return (rows("a", "b", 0.01, 1e6, 1000, (16, 1, 4))
            + rows("a", "b", 0.01, 1e9, 10, (4, 16, 1))
            + rows("c", "d", 0.1, 1e6, 1000, (16, 4, 4))
            + rows("c", "d", 0.1, 1e9, 10, (16, 16, 1)))


# -- phase 1 ------------------------------------------------------------------------------

def test_calinski_harabasz_finds_three_known_clusters() -> None:
    rng = np.random.default_rng(1)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    points = np.concatenate([c + rng.normal(0, 0.3, (8, 2)) for c in centers])
    found = cluster(points)
    assert found.k == 3
    assert found.scores[2] < found.scores[3] > found.scores[4]  # its first local maximum
    labels = np.array(found.labels)
    for i in range(3):  # each known cluster is exactly one found cluster
        assert len(set(labels[i * 8:(i + 1) * 8])) == 1
    assert len(set(labels)) == 3


def test_points_within_the_tolerance_are_one_cluster() -> None:
    assert cluster(np.array([[1.0, 1.0], [1.1, 1.0], [1.0, 1.2], [1.2, 1.1]])).k == 1


def test_hierarchy_network_then_dataset_and_lookup() -> None:
    agg = Aggregate()
    assert agg.add(two_networks()) == 4 * 18
    model = build_model(agg)
    assert len(model.clusters) == 4
    assert model.network_scores == {}  # two networks: two clusters, no index needed
    for rtt, size, group in ((0.01, 1e6, "a->b 1 MB"), (0.01, 2e9, "a->b 1 GB"),
                             (0.12, 8e5, "c->d 1 MB"), (0.09, 1e9, "c->d 1 GB")):
        found = model.lookup(DatasetDescription.of(size, 100, rtt_s=rtt, bandwidth_bps=1e10))
        assert [g.split(" x")[0] for g in found.groups] == [group]
    # the surface of the large files on the long path peaks where its rows do
    big = model.lookup(DatasetDescription.of(1e9, 10, rtt_s=0.1, bandwidth_bps=1e10))
    assert maximum(big.surfaces[0], Limits(max_cc=16, max_p=16, max_pp=4,
                                           values=(1, 4, 16)))[0] == Params(16, 16, 1)


# -- phases 2 and 3 -----------------------------------------------------------------------

def test_spline_surface_passes_through_its_grid_points() -> None:
    rng = np.random.default_rng(7)
    values = rng.uniform(100, 1000, (4, 3, 2))
    s = Surface((1, 2, 8, 32), (1, 4, 16), (1, 8), values, 0.1, 0.0)
    got = s.on(np.array([1.0, 2, 8, 32]), np.array([1.0, 4, 16]), np.array([1.0, 8]))
    assert np.allclose(got, values)
    assert s.at(Params(8, 4, 8)) == pytest.approx(values[2, 1, 1])
    between = s.at(Params(4, 4, 1))  # smooth, not a step: strictly between its neighbours
    assert between != pytest.approx(values[1, 1, 0]) and between != pytest.approx(values[2, 1, 0])
    low, high = s.band(Params(8, 4, 8))
    assert low == pytest.approx(values[2, 1, 1] * (1 - 1.96 * 0.1))
    assert high == pytest.approx(values[2, 1, 1] * (1 + 1.96 * 0.1))


def test_maximum_on_the_whole_number_lattice_within_limits() -> None:
    grid = [1, 4, 16, 64]
    values = np.array([[[shape(cc, p, 1, (8, 8, 1))] for p in grid] for cc in grid])
    s = Surface(tuple(grid), tuple(grid), (1,), values, 0.05, 0.0)
    best, top = s.maximum(list(range(1, 65)), list(range(1, 33)), [1], 4096)
    assert 6 <= best.cc <= 11 and 6 <= best.p <= 11  # the peak at 8 lies between grid points
    assert top > values.max() * 0.95
    capped, _ = s.maximum(list(range(1, 65)), list(range(1, 33)), [1], 16)
    assert capped.cc * capped.p <= 16


def test_grid_points_ranked_best_first_within_the_streams_limit() -> None:
    values = np.array([[[100.0], [300.0]], [[200.0], [400.0]]])  # (cc 1, 8) x (p 1, 8) x pp 1
    s = Surface((1, 8), (1, 8), (1,), values, 0.05, 0.0)
    assert s.ranked(64) == [Params(8, 8, 1), Params(1, 8, 1), Params(8, 1, 1), Params(1, 1, 1)]
    assert s.ranked(8) == [Params(1, 8, 1), Params(8, 1, 1), Params(1, 1, 1)]


def test_load_levels_from_known_contending_transfers_and_from_deviation() -> None:
    free = rows("a", "b", 0.01, 1e6, 1000, (16, 1, 4), repeats=3)
    known = rows("a", "b", 0.01, 1e6, 1000, (16, 1, 4), scale=0.5, sharing=1)  # 1 known: 0.5
    deviating = rows("a", "b", 0.01, 1e6, 1000, (16, 1, 4), scale=0.75)  # unknown load 0.25
    agg = Aggregate()
    agg.add(free + known + deviating)
    [c] = build_model(agg).clusters
    assert [s.intensity for s in c.surfaces] == pytest.approx([0.0, 0.25, 0.5], abs=0.02)
    at = Params(16, 1, 4)
    light, _, heavy = (s.at(at) for s in c.surfaces)
    assert heavy == pytest.approx(light * 0.5 / 1.01, rel=0.02)
    assert c.samples and len(c.samples) == 3 and c.region


# -- Algorithm 1 --------------------------------------------------------------------------

def fixed_cluster() -> Cluster:
    """Four load surfaces, each with its maximum in its own place (to see which one a probe
    or a decision came from)."""
    peaks = [(32, 1, 8), (16, 4, 4), (8, 8, 2), (4, 16, 1)]
    surfaces = []
    for level, peak in enumerate(peaks):
        # lighter load is faster everywhere (250 Mbit/s a level, the shape adds 0 to 100)
        values = np.array([[[1000 * (1 - level / 4) + (shape(cc, p, pp, peak) - 50) / 10
                             for pp in LEVELS] for p in LEVELS] for cc in LEVELS])
        surfaces.append(Surface(LEVELS, LEVELS, LEVELS, values, 0.05, level / 4))
    samples = tuple(maximum(s, GRID)[0] for s in surfaces)
    return Cluster(0, (0.0, 0.0, 0.0), (0.0, 0.0), ("fixed",), tuple(surfaces),
                   (10, 10, 10, 10), samples, ((samples[0], 0.5),))


def run_on(true_level: int, *, known_load: int = 0, max_probes: int = 3,
           explore: bool = False, bonus: dict[Params, float] | None = None,
           files: int = 1000) -> tuple[AsmOptimizer, list[int], Decision]:
    """ASM on `fixed_cluster` with the transfer behaving as surface `true_level` (plus
    `bonus` Mbit/s at some cells); `explore=False`: Algorithm 1 alone."""
    c = fixed_cluster()
    probed: list[int] = []

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        probed.append(c.samples.index(params) if params in c.samples else -1)
        mbps = c.surfaces[true_level].at(params) + (bonus or {}).get(params, 0.0)
        return ProbeResult(params, mbps, size_bytes, 1.0, 4)

    asm = AsmOptimizer(AsmSettings(max_probes=max_probes, explore=explore),
                       Model((c,), {}, 40))
    d = DatasetDescription.of(1e7, files, rtt_s=0.04, bandwidth_bps=1e10,
                              known_load=known_load)
    return asm, probed, asm.optimize([], d, GRID, probe)


@pytest.mark.parametrize(("true_level", "visited"), [
    (1, [1]),  # the median surface is right: converged on the first sample
    (0, [1, 0]),  # lighter: only surface 0 is left
    (2, [1, 2]),  # heavier: 2 and 3 are left, 2 is closest to the measurement
    (3, [1, 3]),
])
def test_halving_jump_between_load_surfaces(true_level: int, visited: list[int]) -> None:
    _, probed, decision = run_on(true_level)
    assert probed == visited
    assert decision.params == fixed_cluster().samples[true_level]  # that surface's maximum
    assert "converged" in decision.reason
    assert decision.band_mbps is not None
    low, high = decision.band_mbps
    assert low < fixed_cluster().surfaces[true_level].at(decision.params) < high


def test_the_samples_left_go_to_the_other_maxima_nearest_in_load_first() -> None:
    # converged on surface 1 with one sample; the two left: the maxima of 0, then of 2
    _, probed, decision = run_on(1, explore=True)
    assert probed == [1, 0, 2] and len(decision.probes) == 3
    assert decision.params == fixed_cluster().samples[1]  # the best measured of the three
    assert "converged" in decision.reason and "best sample" in decision.reason


def test_a_sample_that_measured_more_than_the_chosen_surface_is_kept() -> None:
    # the transfer behaves as surface 1, but surface 0's maximum runs 300 Mbit/s faster
    best_elsewhere = fixed_cluster().samples[0]
    _, probed, decision = run_on(1, explore=True, bonus={best_elsewhere: 300.0})
    assert probed == [1, 0, 2]
    assert decision.params == best_elsewhere
    assert decision.predicted_mbps == pytest.approx(
        fixed_cluster().surfaces[1].at(best_elsewhere) + 300.0)


def test_no_exploring_when_algorithm_1_spent_every_sample() -> None:
    _, probed, decision = run_on(3, explore=True, max_probes=2)
    assert probed == [1, 3] and decision.params == fixed_cluster().samples[3]


def test_an_empty_probe_ends_the_sampling_and_is_not_kept() -> None:
    c = fixed_cluster()
    asked: list[Params] = []

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        asked.append(params)
        if len(asked) == 1:
            return ProbeResult(params, c.surfaces[2].at(params), size_bytes, 1.0, 4)
        return ProbeResult(params, 0.0)  # no file left

    asm = AsmOptimizer(AsmSettings(), Model((c,), {}, 40))
    decision = asm.optimize([], DatasetDescription.of(1e7, 1000), GRID, probe)
    assert len(asked) == 2 and len(decision.probes) == 1
    assert all(not r.empty for r in decision.probes)
    assert "no file left to probe" in decision.reason
    assert decision.params == c.samples[2]  # the surface the one sample pointed to


def test_concurrency_is_at_most_the_file_count() -> None:
    _, _, decision = run_on(0, files=8)  # surface 0's maximum is at cc = 32
    assert decision.params.cc <= 8 and all(r.params.cc <= 8 for r in decision.probes)
    _, _, free = run_on(0)
    assert free.params.cc == 32


def test_known_load_chooses_the_first_surface() -> None:
    _, probed, _ = run_on(3, known_load=3)  # fair share 3/4: the heaviest surface
    assert probed == [3]


def test_at_most_max_probes_then_the_closest_surface() -> None:
    _, probed, decision = run_on(0, max_probes=1)
    assert probed == [1] and decision.params == fixed_cluster().samples[0]
    assert "closest surface" in decision.reason


def test_drift_switches_surface_without_probing_and_counts_changes() -> None:
    asm, _, decision = run_on(1)
    c = fixed_cluster()
    achieved = c.surfaces[3].at(decision.params)  # the load grew during the transfer
    assert not asm.retune(decision, c.surfaces[1].at(decision.params))
    assert asm.retune(decision, achieved)

    def no_probe(params: Params, size_bytes: int) -> ProbeResult:
        raise AssertionError("a switch on drift must not probe")

    switched = asm.optimize([], DatasetDescription.of(1e7, 1000), GRID, no_probe)
    assert switched.params == c.samples[3] and switched.probes == ()
    assert asm.switches == 1 and "switches 1" in switched.reason


def test_without_a_model_it_analyses_the_history_it_is_given() -> None:
    history = two_networks()
    truth = build_model(_agg(history)).lookup(
        DatasetDescription.of(1e9, 10, rtt_s=0.1, bandwidth_bps=1e10))
    d = DatasetDescription.of(1e9, 10, rtt_s=0.1, bandwidth_bps=1e10)
    decision = get("asm").optimize(history, d, GRID, lambda params, n: ProbeResult(
        params, truth.surfaces[0].at(params)))
    # 10 files: cc at most 10 (the surface's maximum is at cc = 16)
    assert decision.optimizer == "asm"
    assert decision.params == maximum(truth.surfaces[0], GRID.at_most_cc(10))[0]
    uncapped = AsmOptimizer(AsmSettings(cc_at_most_files=False)).optimize(
        history, d, GRID, lambda params, n: ProbeResult(params, truth.surfaces[0].at(params)))
    assert uncapped.params == Params(16, 16, 1)
    with pytest.raises(AsmError, match="no transfers to learn from"):
        get("asm").optimize([], d, GRID, lambda params, n: ProbeResult(params, 1.0))


def _agg(records: list[TransferRecord]) -> Aggregate:
    agg = Aggregate()
    agg.add(records)
    return agg


# -- additivity and the persisted state ---------------------------------------------------

def test_analysing_a_then_b_gives_the_state_of_a_plus_b(tmp_path: Path) -> None:
    a = two_networks()[:40]
    b = two_networks()[40:] + rows("a", "b", 0.01, 1e6, 1000, (16, 1, 4), scale=0.6,
                                   t0=-100)  # started earlier, added later
    store = SqliteStore(str(tmp_path / "one.db"))
    store.add_transfers(a)
    first = state.analyze(store, tmp_path / "one")
    assert (first.rows_read, first.rows_added) == (40, 40)
    store.add_transfers(b)
    second = state.analyze(store, tmp_path / "one")
    assert second.rows_read == len(b)  # only the new rows were read
    again = state.analyze(store, tmp_path / "one")
    assert again.rows_read == 0 and again.rows_total == len(a) + len(b)
    store.close()

    whole = SqliteStore(str(tmp_path / "whole.db"))
    whole.add_transfers(a + b)
    state.analyze(whole, tmp_path / "whole")
    whole.close()

    for name in (state.STATE_FILE, state.MODEL_FILE):
        one = json.loads((tmp_path / "one" / name).read_text())
        two = json.loads((tmp_path / "whole" / name).read_text())
        assert one == two, name
    model = state.load_model(tmp_path / "one")
    assert model is not None
    assert state.model_to_json(state.model_from_json(state.model_to_json(model))) == two
    assert len(model.clusters) == 4


def test_in_memory_additivity_with_a_json_round_trip() -> None:
    a, b = two_networks()[:30], two_networks()[30:]
    stepwise = Aggregate.from_json(json.loads(json.dumps(_agg(a).to_json())))
    stepwise.add(b)
    assert stepwise.to_json() == _agg(a + b).to_json()


def test_a_damaged_state_file_is_named(tmp_path: Path) -> None:
    (tmp_path / state.MODEL_FILE).write_text("{not json")
    with pytest.raises(AsmError, match=r"model\.json: not JSON"):
        state.load_model(tmp_path)
    assert state.load_model(tmp_path / "none") is None


# -- stork_history analyze ----------------------------------------------------------------

def test_history_analyze_report_prints_clusters_and_draws_one_png_each(tmp_path: Path) -> None:
    table = tmp_path / "log.csv"
    write_grid_csv(two_networks(), table)
    result = subprocess.run(
        [sys.executable, "-m", "stork.cli.history", "analyze", "--report", str(tmp_path / "r"),
         "-csv", str(table)], capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "72 row(s) used" in out and "4 cluster(s)" in out
    assert out.count("\ncluster ") == 4 and "sampling region" in out and "band" in out
    pngs = sorted(p.name for p in (tmp_path / "r").glob("*.png"))
    assert pngs == [f"asm-cluster-{i}.png" for i in range(4)]
    assert all((tmp_path / "r" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def analyze(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    """`stork_history analyze` with this configuration (its state under tmp_path)."""
    cfg = tmp_path / "cfg"
    cfg.write_text(f"STORK_STATE_DIR = {tmp_path / 'state'}\n{config}")
    return subprocess.run(
        [sys.executable, "-m", "stork.cli.history", "analyze", "-c", str(cfg)],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


def test_history_analyze_without_a_transfer_log_creates_nothing(tmp_path: Path) -> None:
    result = analyze(tmp_path, "")
    assert result.returncode == 3
    assert "stork.db: no transfer log there" in result.stderr
    assert not (tmp_path / "state").exists()


def test_history_analyze_reads_the_transfer_log_of_a_postgresql_store(
        tmp_path: Path, postgres: PostgresCluster) -> None:
    url = postgres.new_database()
    store = open_store(url)
    try:
        store.add_transfers(two_networks())
    finally:
        store.close()
    result = analyze(tmp_path, f"STORK_DATABASE = {url}\n")
    assert result.returncode == 0, result.stderr
    assert "72 new transfer log row(s) read" in result.stdout, result.stdout
    assert "4 cluster(s)" in result.stdout
