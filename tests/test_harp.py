"""HARP's pure parts on small fixed tables: similarity, selection and groups, degree selection,
the argmax within limits, the guard, relaxation, probing and the optimizer as a whole."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from stork.dataset.chunks import Params, SizeClass
from stork.errors import ConfigError
from stork.translog import FAILED, TransferRecord
from stork.tuning import (
    OPTIMIZERS,
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
    get,
)
from stork.tuning.base import best_probe
from stork.tuning.harp import (
    HarpOptimizer,
    HarpSettings,
    _Choice,
    _Model,
    first_probe,
    probe_weights,
    share_concurrency,
)
from stork.tuning.similarity import PAPER_WEIGHTS, Group, features, select, similarity
from stork.tuning.surfaces import (
    Surface,
    fit_surface,
    integer_best,
    lattice,
    maximize,
    monomials,
    optima,
    predict,
    relax,
    to_u,
)

LEVELS = (1, 2, 4, 8, 16, 32)
GRID = list(itertools.product(LEVELS, LEVELS, LEVELS))
U = np.log2(np.array(GRID, dtype=float))


def bump(cc: float, p: float, pp: float, *, at: tuple[float, float, float] = (16, 4, 2),
         top: float = 1000.0) -> float:
    """A throughput surface that is exactly quadratic in log2 (cc, p, pp), peaking at `at`."""
    d = np.log2([cc, p, pp]) - np.log2(at)
    return float(top * (1 - 0.02 * d[0] ** 2 - 0.015 * d[1] ** 2 - 0.005 * d[2] ** 2))


def record(cc: int, p: int, pp: int, mbps: float, *, size: float = 3e6, count: int = 1000,
           rtt: float | None = 0.04, origin: str = "t.csv", outcome: str = "completed"
           ) -> TransferRecord:
    return TransferRecord(time=0.0, src_host="a", dest_host="b", rtt_s=rtt,
                          bandwidth_bps=1e10, buffer_bytes=32 << 20, file_size_bytes=size,
                          file_count=count, cc=cc, p=p, pp=pp, fast=False,
                          bytes_moved=round(size * count), duration_s=1.0,
                          throughput_mbps=mbps, outcome=outcome, origin=origin)


def sweep(at: tuple[float, float, float], top: float = 1000.0, **kw: object
          ) -> list[TransferRecord]:
    return [record(cc, p, pp, bump(cc, p, pp, at=at, top=top), **kw)
            for cc, p, pp in GRID]


def small_dataset(rtt: float | None = 0.04) -> DatasetDescription:
    return DatasetDescription.of(3e6, 1000, rtt_s=rtt, bandwidth_bps=1e10,
                                 buffer_bytes=32 << 20, src_host="a", dest_host="b")


GRID_LIMITS = Limits(values=LEVELS)


# -- similarity --------------------------------------------------------------------------------

def test_similarity_is_one_for_equal_features_and_falls_with_distance() -> None:
    q = features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000)
    rows = np.array([
        features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000),
        features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 5e6, 1000),
        features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 25e6, 1000),
        features(0.04, 1e10, 32 << 20, SizeClass.LARGE, 3e9, 1000),
    ])
    sims = similarity(q, rows)
    assert sims[0] == pytest.approx(1.0)
    assert 1.0 > sims[1] > sims[2] > sims[3]


def test_similarity_is_the_weighted_mean_of_feature_cosines() -> None:
    q = np.array([0.5, 0.5, 0.5, 0.0, 0.5, 0.0])
    row = q.copy()
    row[5] = 1.0  # file count at the other end of its scale: cos(pi/2) = 0
    total = sum(w * w for w in PAPER_WEIGHTS)
    assert similarity(q, row[None, :])[0] == pytest.approx((total - 1.0) / total)
    row[3] = 0.5  # and a size class one step away: cos(pi/4), weight 10
    expected = (total - 1.0 - 100 * (1 - math.cos(math.pi / 4))) / total
    assert similarity(q, row[None, :])[0] == pytest.approx(expected)


def test_an_unknown_feature_counts_for_neither_side() -> None:
    q = features(None, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000)
    assert np.isnan(q[1]) and np.isnan(q[2])  # no RTT: no RTT and no BDP/buffer
    row = features(0.5, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000)
    assert similarity(q, row[None, :])[0] == pytest.approx(1.0)


# -- selection and groups ----------------------------------------------------------------------

def test_selection_takes_the_nearest_datasets_until_enough_rows() -> None:
    near = sweep((16, 1, 8), size=3e6, origin="near.csv")
    middle = sweep((16, 4, 2), size=20e6, origin="middle.csv")
    far = sweep((4, 32, 1), size=3e9, count=10, origin="far.csv")
    q = features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 3.1e6, 1000)
    one = select(far + middle + near, q, min_rows=200)
    assert [g.label.split("(")[1].split(")")[0] for g in one.groups] == ["near.csv"]
    assert one.rows == 216 and one.datasets == 1
    two = select(far + middle + near, q, min_rows=300)
    assert {g.label.split("(")[1].split(")")[0] for g in two.groups} == {"near.csv",
                                                                        "middle.csv"}
    # the paper's rule: from 0.99 down; here everything small is above 0.99 at once
    paper = select(far + middle + near, q, min_rows=200, threshold=0.99)
    assert paper.threshold == 0.99 and paper.datasets == 2


def test_failed_records_are_not_history() -> None:
    rows = [record(1, 1, 1, 500.0, outcome=FAILED)]
    assert select(rows, features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000)).groups == ()


def test_passes_split_where_a_cell_comes_again_and_small_ones_are_pooled() -> None:
    light = sweep((16, 4, 2), top=1000.0)
    heavy = sweep((4, 16, 2), top=400.0)
    chunks = [record(8, 2, 4, 700.0), record(8, 2, 1, 650.0), record(32, 1, 4, 800.0)]
    q = features(0.04, 1e10, 32 << 20, SizeClass.SMALL, 3e6, 1000)
    groups = select(light + heavy + chunks, q, min_cells=20).groups
    assert [g.label.rsplit(" ", 2)[-2:] for g in groups] == [["pass", "2/3"], ["pass", "1/3"],
                                                              ["(t.csv)", "pooled"]]
    latest, first, pooled = groups
    assert len(latest.cells) == len(first.cells) == 216 and len(pooled.cells) == 3
    assert latest.mbps.max() == pytest.approx(400.0)  # the latest pass comes first
    assert first.mbps.max() == pytest.approx(1000.0)
    assert pooled.rows == 3


# -- surfaces: degree selection, argmax, relaxation --------------------------------------------

def test_degree_two_for_a_quadratic_surface() -> None:
    y = np.array([bump(*c) for c in GRID])
    surface, why = fit_surface(U, y)
    assert surface is not None and surface.degree == 2, why
    assert surface.cv_r2 == pytest.approx(1.0)
    assert surface.predict(U) == pytest.approx(y)


def test_degree_three_for_a_cubic_with_noise() -> None:
    rng = np.random.default_rng(1)
    cc, p, pp = U.T
    y = 500 + 40 * cc ** 3 - 150 * cc ** 2 + 30 * p + 5 * cc * p * pp
    noisy = y * (1 + rng.normal(0, 0.01, len(y)))
    surface, why = fit_surface(U, noisy)
    assert surface is not None and surface.degree == 3, why


def test_noise_fails_the_goodness_of_fit_gate() -> None:
    rng = np.random.default_rng(2)
    surface, why = fit_surface(U, rng.uniform(100, 1000, len(U)))
    assert surface is None
    assert "R^2" in why and "< 0.6" in why


def test_too_few_cells_for_any_degree() -> None:
    surface, why = fit_surface(U[:8], np.arange(8.0))
    assert surface is None and "too few" in why


def test_argmax_stays_inside_the_box_and_the_streams_limit() -> None:
    # throughput rising in cc and p without end: the limits decide
    coef = np.zeros(len(monomials(np.zeros((1, 3)))[0]))
    coef[0], coef[1], coef[2] = 100.0, 50.0, 40.0  # 100 + 50 u_cc + 40 u_p
    lower, upper = np.zeros(3), np.full(3, 5.0)
    u, value = maximize(coef, lower, upper, math.log2(64), [np.zeros(3)])
    assert u[0] + u[1] <= 6 + 1e-6 and u[0] == pytest.approx(5.0, abs=1e-6)
    assert value == pytest.approx(100 + 50 * 5 + 40 * 1, rel=1e-6)
    limits = Limits(max_cc=32, max_p=32, max_pp=32, max_streams=64, values=LEVELS)
    params, _ = integer_best(coef, u, limits, upper)
    assert params == Params(32, 2, 1) or params.cc * params.p <= 64
    assert limits.admits(params)


def test_argmax_finds_an_interior_peak_in_whole_numbers() -> None:
    y = np.array([bump(*c, at=(8, 4, 2)) for c in GRID])
    surface, _ = fit_surface(U, y)
    assert surface is not None
    u, _ = maximize(surface.coef, np.zeros(3), np.full(3, 5.0), 10.0, [np.full(3, 2.5)])
    assert 2 ** u == pytest.approx([8, 4, 2], rel=1e-3)
    params, value = integer_best(surface.coef, u, Limits(), np.full(3, 5.0))
    assert params == Params(8, 4, 2) and value == pytest.approx(1000.0)


def test_relaxation_drops_what_barely_helps() -> None:
    # pipelining worth 1% at most, streams worth a lot up to p = 8
    def f(cc: int, p: int, pp: int) -> float:
        return 1000 - 50 * (math.log2(p) - 3) ** 2 - 2 * (math.log2(pp) - 5) ** 2 - (
            10 * (math.log2(cc) - 5) ** 2)
    surface, _ = fit_surface(U, np.array([f(*c) for c in GRID]))
    assert surface is not None
    relaxed, value = relax(surface.coef, Params(32, 8, 32), GRID_LIMITS, 0.95)
    # 64 streams is the fewest within 5% (cc 8 costs 4%), and then pp 8 (1%; pp 1 costs 5%)
    assert relaxed == Params(8, 8, 8)
    assert value >= 0.95 * float(surface.predict(to_u(Params(32, 8, 32))[None, :])[0])
    # a surface that must agree, and loses 40% at cc = 8, keeps cc at 32
    steep = np.zeros_like(surface.coef)
    steep[1] = 300.0  # 300 * u_cc
    kept, _ = relax(surface.coef, Params(32, 8, 32), GRID_LIMITS, 0.94, [steep])
    assert kept == Params(32, 4, 8)


# -- probing and the guard ---------------------------------------------------------------------

def _surface(at: tuple[float, float, float], top: float) -> Surface:
    s, _ = fit_surface(U, np.array([bump(*c, at=at, top=top) for c in GRID]))
    assert s is not None
    return s


def test_probe_weights_favour_the_surface_that_predicted_the_probe() -> None:
    light, heavy = _surface((16, 4, 2), 1000.0), _surface((4, 16, 2), 400.0)
    point = to_u(Params(8, 8, 2))[None, :]
    measured = np.array([bump(8, 8, 2, at=(4, 16, 2), top=400.0)])
    weights, scales, errors = probe_weights([light, heavy], point, measured, 0.1, (0.25, 4.0))
    assert errors[1] == pytest.approx(0.0, abs=1e-9) and errors[0] > 0.5
    assert weights[1] > weights[0]
    assert scales[1] == pytest.approx(1.0)


def test_the_guard_refuses_a_maximum_nothing_observed() -> None:
    group = Group("g", 1.0, U, np.array([bump(*c) for c in GRID]), len(GRID))
    wild = _surface((16, 4, 2), 1000.0).coef.copy()
    wild[1] += 2000.0  # + 2000 u_cc: promises 11,000 Mbit/s at cc = 32
    model = _Model(group, Surface(wild, 2, 0.9, 0.05))
    choice = HarpOptimizer()._choose([model], [], GRID_LIMITS)
    assert any("guard" in n for n in choice.notes)
    assert choice.predicted_mbps <= 1000.0 + 1e-6  # never above what was observed
    assert GRID_LIMITS.admits(choice.params)


# -- the optimizer -----------------------------------------------------------------------------

def _probe_from(at: tuple[float, float, float], top: float, log: list[Params]) -> Probe:
    def probe(params: Params, size_bytes: int) -> ProbeResult:
        log.append(params)
        return ProbeResult(params, bump(params.cc, params.p, params.pp, at=at, top=top),
                           size_bytes, 1.0, 2)
    return probe


def test_harp_follows_the_history_that_matches_the_probes() -> None:
    history = sweep((16, 4, 2), top=1000.0) + sweep((4, 16, 2), top=400.0)
    probed: list[Params] = []
    decision = HarpOptimizer().optimize(history, small_dataset(), GRID_LIMITS,
                                        _probe_from((4, 16, 2), 400.0, probed))
    assert isinstance(decision, Decision) and decision.optimizer == "harp"
    assert 1 <= len(decision.probes) <= 3 and [r.params for r in decision.probes] == probed
    best = bump(4, 16, 2, at=(4, 16, 2), top=400.0)
    got = bump(decision.params.cc, decision.params.p, decision.params.pp, at=(4, 16, 2),
               top=400.0)
    assert got >= 0.9 * best, decision.reason
    assert decision.predicted_mbps is not None and decision.predicted_mbps <= 1000.0
    assert decision.unit_mbps is not None and decision.unit_mbps >= 0
    assert GRID_LIMITS.admits(decision.params)


def test_harp_without_history_probes_the_heuristic() -> None:
    probed: list[Params] = []
    decision = HarpOptimizer().optimize([], small_dataset(), GRID_LIMITS,
                                        _probe_from((8, 1, 8), 900.0, probed))
    assert probed == [first_probe(small_dataset(), GRID_LIMITS)] == [decision.params]
    assert "no usable history" in decision.reason


def test_harp_without_a_surface_probes_the_historys_best_cells_and_the_heuristic() -> None:
    """Two similar datasets with too few cells for any surface: HARP probes each one's best
    measured cell (the more similar first) and the heuristic's parameters, and keeps the
    best probe."""
    history = [record(4, 1, 1, 200.0), record(16, 4, 2, 900.0), record(32, 2, 1, 500.0),
               record(8, 8, 1, 700.0, size=6e6, origin="u.csv"),
               record(2, 2, 1, 100.0, size=6e6, origin="u.csv")]
    heuristic = first_probe(small_dataset(), GRID_LIMITS)
    assert heuristic not in (Params(16, 4, 2), Params(8, 8, 1))
    today = {Params(16, 4, 2): 400.0, Params(8, 8, 1): 650.0, heuristic: 500.0}
    probed: list[Params] = []

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        probed.append(params)
        return ProbeResult(params, today[params], size_bytes, 1.0, 2)

    decision = HarpOptimizer().optimize(history, small_dataset(), GRID_LIMITS, probe)
    assert probed == [Params(16, 4, 2), Params(8, 8, 1), heuristic]
    assert decision.params == Params(8, 8, 1) and decision.predicted_mbps == 650.0
    assert "0 surfaces" in decision.reason and "best measured cells" in decision.reason
    # a single probe allowed: the heuristic's parameters alone
    probed.clear()
    one = HarpOptimizer(HarpSettings(max_probes=1)).optimize(history, small_dataset(),
                                                             GRID_LIMITS, probe)
    assert probed == [heuristic] and one.params == heuristic


def test_harp_uses_at_most_its_probes() -> None:
    history = sweep((16, 4, 2), top=1000.0)
    for n in (1, 2, 3):
        probed: list[Params] = []
        HarpOptimizer(HarpSettings(max_probes=n)).optimize(
            history, small_dataset(), GRID_LIMITS, _probe_from((2, 32, 1), 300.0, probed))
        assert 1 <= len(probed) <= n


def test_each_surfaces_best_cell_on_the_ladder_lattice() -> None:
    # every integer allowed: candidates on the ladder 1, 2, 3, 4, 6, 8, 12, 16, 24, 32
    cells = lattice(Limits(max_streams=64), np.log2([32.0, 16.0, 8.0]))
    assert sorted({c.cc for c in cells}) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert sorted({c.p for c in cells}) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert sorted({c.pp for c in cells}) == [1, 2, 3, 4, 6, 8]
    assert all(c.cc * c.p <= 64 for c in cells)
    grid = lattice(GRID_LIMITS, np.full(3, 5.0))
    assert len(grid) == 216
    a, b = _surface((16, 4, 2), 1000.0), _surface((4, 16, 8), 400.0)
    assert optima([a.coef, b.coef], grid) == [Params(16, 4, 2), Params(4, 16, 8)]


def test_after_the_choice_was_probed_the_heaviest_surfaces_best_cells_come_next() -> None:
    choice = _Choice(Params(8, 8, 2), 900.0, 0.15, np.zeros(35),
                     optima=(Params(16, 4, 2), Params(8, 8, 2), Params(4, 16, 8)))
    harp = HarpOptimizer()

    def probed(*cells: Params) -> list[ProbeResult]:
        return [ProbeResult(c, 500.0, 1, 1.0, 1) for c in cells]

    assert harp._next(choice, []) == Params(8, 8, 2)  # the choice first
    assert harp._next(choice, probed(Params(8, 8, 2))) == Params(16, 4, 2)
    assert harp._next(choice, probed(Params(8, 8, 2), Params(16, 4, 2))) == Params(4, 16, 8)
    assert harp._next(choice, probed(Params(8, 8, 2), Params(16, 4, 2),
                                     Params(4, 16, 8))) is None
    # without exploring, probing ends when the choice repeats (the rule before)
    assert HarpOptimizer(HarpSettings(explore=False))._next(
        choice, probed(Params(8, 8, 2))) is None


def test_harp_answers_the_best_measured_probe() -> None:
    history = sweep((16, 4, 2), top=1000.0) + sweep((4, 16, 2), top=400.0)
    probed: list[Params] = []
    truth = _probe_from((4, 16, 2), 800.0, probed)
    decision = HarpOptimizer().optimize(history, small_dataset(), GRID_LIMITS, truth)
    assert len(probed) == 3 and len(set(probed)) == 3  # every probe spent, none twice
    best = max(decision.probes, key=lambda r: r.throughput_mbps)
    assert decision.params == best.params
    assert decision.predicted_mbps == pytest.approx(best.throughput_mbps)
    # the rule before: the surfaces' choice unless a probe measured more than predicted
    before = HarpOptimizer(HarpSettings(explore=False, pick="choice")).optimize(
        history, small_dataset(), GRID_LIMITS, _probe_from((4, 16, 2), 800.0, []))
    assert len(before.probes) <= 3


def test_an_empty_probe_ends_harp_probing_and_is_not_kept() -> None:
    history = sweep((16, 4, 2), top=1000.0)
    asked: list[Params] = []

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        asked.append(params)
        if len(asked) == 1:
            return ProbeResult(params, bump(params.cc, params.p, params.pp, top=900.0), size_bytes,
                               1.0, 2)
        return ProbeResult(params, 0.0)  # no file left

    decision = HarpOptimizer().optimize(history, small_dataset(), GRID_LIMITS, probe)
    assert len(asked) == 2 and [r.params for r in decision.probes] == asked[:1]
    assert "no file left to probe" in decision.reason
    nothing = HarpOptimizer().optimize([], small_dataset(), GRID_LIMITS,
                                       lambda params, n: ProbeResult(params, 0.0))
    assert nothing.probes == () and nothing.predicted_mbps is None


def test_harp_concurrency_is_at_most_the_file_count() -> None:
    history = sweep((32, 4, 2), top=1000.0)
    few = DatasetDescription.of(3e6, 8, rtt_s=0.04, bandwidth_bps=1e10,
                                buffer_bytes=32 << 20, src_host="a", dest_host="b")
    probed: list[Params] = []
    decision = HarpOptimizer().optimize(history, few, GRID_LIMITS,
                                        _probe_from((32, 4, 2), 1000.0, probed))
    assert decision.params.cc <= 8 and all(c.cc <= 8 for c in probed)


def test_best_probe_takes_the_fewest_streams_within_the_tolerance() -> None:
    probes = [ProbeResult(Params(32, 32, 1), 1000.0), ProbeResult(Params(32, 8, 4), 970.0),
              ProbeResult(Params(32, 8, 1), 960.0), ProbeResult(Params(4, 4, 1), 500.0)]
    assert best_probe(probes).params == Params(32, 32, 1)
    assert best_probe(probes, 0.05).params == Params(32, 8, 1)  # 256 streams, then pp 1
    assert best_probe(probes, 0.035).params == Params(32, 8, 4)
    assert not probes[0].empty and ProbeResult(Params(1, 1, 1), 0.0).empty
    assert not ProbeResult(Params(1, 1, 1), 0.0, 1 << 20, 1.0, 2).empty  # a failed batch


def test_no_retune_and_no_empty_probe_on_the_ad_when_no_file_is_left() -> None:
    from types import SimpleNamespace

    from stork.server.tuning import Tuning

    asked: list[Params] = []
    left = [5]

    class Once(Optimizer):
        name = "once"

        def optimize(self, history: object, dataset: object, limits: Limits,
                     probe: Probe) -> Decision:
            first = probe(Params(2, 2, 1), 100)  # kept even when empty, as "eos" does
            return Decision("once", Params(2, 2, 1), 1000.0, (900.0, 1100.0), (first,), "x")

    def probe(params: Params, size_bytes: int) -> ProbeResult:
        asked.append(params)
        return ProbeResult(params, 1000.0, size_bytes, 1.0, 1) if left[0] else (
            ProbeResult(params, 0.0))

    saved: dict[str, dict[str, object]] = {}
    run = SimpleNamespace(job=SimpleNamespace(id=7), store=SimpleNamespace(
        update_result=lambda job_id, result: saved.update(result)))
    now = [0.0]
    tuning = Tuning(run, SimpleNamespace(size_class=SizeClass.SMALL),
                    Once(), [], small_dataset(), probe, files_left=lambda: left[0],
                    clock=lambda: now[0])
    tuning.decide(Params(1, 1, 1))
    left[0] = 0  # the last batch took the chunk's last files
    assert tuning.after_batch(Params(2, 2, 1), 10.0) == Params(2, 2, 1)  # outside the band
    assert len(asked) == 1 and tuning.retunes == 0
    left[0], now[0] = 3, 20.0
    tuning.after_batch(Params(2, 2, 1), 10.0)  # the second batch in a row outside
    assert len(asked) == 2 and tuning.retunes == 1
    left[0] = 0
    tuning.decide(Params(2, 2, 1))  # an optimizer that probes with nothing left
    assert len(asked) == 3 and tuning.decisions[-1].probes[0].empty
    tuning.record()
    probes = saved["optimizer_small"]["probes"]
    assert isinstance(probes, list) and len(probes) == 2
    assert not any("over 0 files" in p for p in probes)


def test_a_chunk_is_retuned_on_a_drift_not_on_one_batch_and_not_too_often() -> None:
    """RETUNE_AFTER batches in a row outside the band ask the optimizer again, RETUNE_GAP_S
    after its last decision at the soonest, MAX_RETUNES times at most."""
    from types import SimpleNamespace

    from stork.server.tuning import MAX_RETUNES, RETUNE_AFTER, RETUNE_GAP_S, Tuning

    class Fixed(Optimizer):
        name = "fixed"

        def optimize(self, history: object, dataset: object, limits: Limits,
                     probe: Probe) -> Decision:
            return Decision("fixed", Params(2, 2, 1), 1000.0, (900.0, 1100.0), (), "x")

    now = [0.0]
    run = SimpleNamespace(job=SimpleNamespace(id=7))
    tuning = Tuning(run, SimpleNamespace(size_class=SizeClass.SMALL), Fixed(), [],
                    small_dataset(), lambda params, n: ProbeResult(params, 0.0),
                    clock=lambda: now[0])
    tuning.decide(Params(1, 1, 1))
    assert RETUNE_AFTER == 2

    def batch(at: float, mbps: float) -> int:
        now[0] = at
        tuning.after_batch(Params(2, 2, 1), mbps)
        return len(tuning.decisions) - 1  # the decisions after the first

    assert batch(1.0, 500.0) == 0  # one batch outside: noise
    assert batch(2.0, 1000.0) == 0  # back inside: the count starts again
    assert batch(3.0, 500.0) == 0 and batch(4.0, 1500.0) == 0  # two outside, too soon
    assert batch(RETUNE_GAP_S, 500.0) == 1  # still outside, and the gap has passed
    assert batch(RETUNE_GAP_S + 1, 500.0) == 1  # a new decision starts a new count
    at = RETUNE_GAP_S
    for _ in range(3 * MAX_RETUNES):
        at += RETUNE_GAP_S
        batch(at, 500.0)
    assert tuning.retunes == MAX_RETUNES == len(tuning.decisions) - 1


def test_retune_when_the_achieved_rate_leaves_the_band() -> None:
    d = Decision("harp", Params(8, 2, 4), 1000.0, (800.0, 1200.0), (), "x")
    harp = HarpOptimizer()
    assert not harp.retune(d, 1000.0) and not harp.retune(d, 800.0)
    assert harp.retune(d, 700.0) and harp.retune(d, 1300.0)
    assert not harp.retune(Decision("x", Params(1, 1, 1), None, None, (), ""), 1.0)


def test_share_concurrency_follows_algorithm_1() -> None:
    # two chunks, same bytes; the one slower per channel gets more of maxCC = 16
    assert share_concurrency([(1e9, 16, 100.0), (1e9, 4, 300.0)]) == [12, 4]
    assert share_concurrency([(1e9, 2, 100.0)]) == [2]
    assert share_concurrency([(1.0, 8, 100.0), (1e12, 8, 100.0)]) == [1, 7]
    assert share_concurrency([]) == []


def test_chunks_tuned_together_share_and_hand_back_their_channels() -> None:
    from stork.server.tuning import SharedConcurrency

    shared = SharedConcurrency()
    shared.update("small", 1e9, 16, 100.0)
    assert shared.cc("small", 16) == 16  # alone: what its optimizer chose
    shared.update("large", 1e9, 4, 300.0)
    assert (shared.cc("small", 16), shared.cc("large", 4)) == (12, 4)
    shared.update("large", 1e6, 4, 300.0)  # nearly done: its weight, and share, shrink
    assert (shared.cc("small", 16), shared.cc("large", 4)) == (15, 1)
    shared.leave("large")
    assert shared.cc("small", 16) == 16
    assert shared.cc("unknown", 3) == 3


# -- the interface -----------------------------------------------------------------------------

def test_limits_at_most_cc() -> None:
    assert GRID_LIMITS.at_most_cc(8).allowed(0) == [1, 2, 4, 8]
    assert GRID_LIMITS.at_most_cc(10).allowed(0) == [1, 2, 4, 8]
    assert GRID_LIMITS.at_most_cc(0).max_cc == 1
    assert GRID_LIMITS.at_most_cc(100) == GRID_LIMITS


def test_limits_nearest_and_streams() -> None:
    limits = Limits(max_cc=32, max_p=32, max_pp=32, max_streams=64, values=LEVELS)
    assert limits.nearest(Params(11, 3, 100)) == Params(8, 4, 32)
    assert limits.nearest(Params(32, 32, 1)) == Params(8, 8, 1)  # the larger comes down
    assert limits.nearest(Params(1, 32, 1)) == Params(1, 32, 1)
    free = Limits(max_cc=10, max_p=10, max_pp=4, max_streams=40)
    assert free.nearest(Params(7, 7, 9)) == Params(6, 6, 4)
    assert free.admits(Params(6, 6, 4)) and not free.admits(Params(7, 7, 4))
    with pytest.raises(ConfigError):
        Limits(max_cc=0)


def test_dataset_description_size_class() -> None:
    assert small_dataset().size_class is SizeClass.SMALL  # 3 MB < BDP 50 MB
    big = DatasetDescription.of(3e9, 8, rtt_s=0.04, bandwidth_bps=1e10)
    assert big.size_class is SizeClass.LARGE and big.total_bytes == 24_000_000_000
    assert DatasetDescription.of(3e9, 8).size_class is SizeClass.MEDIUM  # no path known


def test_registry() -> None:
    assert isinstance(get("HARP"), HarpOptimizer) and "harp" in OPTIMIZERS
    with pytest.raises(ConfigError,
                       match="unknown optimizer 'nope': known are asm, dw, dw-interval, eos, harp"):
        get("nope")


def test_probe_bytes_are_about_two_seconds_of_the_link() -> None:
    harp = HarpOptimizer()
    d = DatasetDescription.of(3e6, 100_000, rtt_s=0.04, bandwidth_bps=1e10)
    assert harp.probe_bytes(d) == int(2 * 1e10 / 8)
    tiny = DatasetDescription.of(3e6, 10, rtt_s=0.04, bandwidth_bps=1e10)
    assert harp.probe_bytes(tiny) == int(3e7 * 0.25)  # at most a quarter of the dataset
    assert predict(np.zeros(35), np.zeros((2, 3))).tolist() == [0.0, 0.0]
