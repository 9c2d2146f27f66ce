"""The throughput models and sampling strategies, against synthetic curves with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stork.errors import EosError, FitError, StorkError
from stork.tuning.models import (
    DynamicOrder,
    SecondOrder,
    estimate,
    fit_dynamic_order,
    fit_second_order,
    pick,
)
from stork.tuning.sampling import Measure, Sample, decide, doubling, guided


def test_second_order_exact_solve_recovers_parameters() -> None:
    truth = SecondOrder(4e-4, -6e-3, 3e-2)
    n = [1, 4, 16]
    fitted = fit_second_order(n, truth.predict(np.array(n)).tolist())
    assert fitted.a == pytest.approx(truth.a, rel=1e-9)
    assert fitted.b == pytest.approx(truth.b, rel=1e-9)
    assert fitted.c == pytest.approx(truth.c, rel=1e-9)
    assert truth.analytic_optimum() == pytest.approx(10.0)  # n* = -2c/b


def test_second_order_least_squares_with_noise() -> None:
    truth = SecondOrder(2e-5, -1e-3, 1.6e-2)
    n = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
    rng = np.random.default_rng(7)
    noisy = truth.predict(n) * (1 + rng.normal(0, 0.005, len(n)))
    fitted = fit_second_order(n, noisy)
    assert fitted.analytic_optimum() == pytest.approx(truth.analytic_optimum(), rel=0.1)


def test_dynamic_order_recovers_parameters_and_optimum() -> None:
    truth = DynamicOrder(1e-5, 3.0, 4e-4)
    n = [1, 2, 8]
    fitted = fit_dynamic_order(n, truth.predict(np.array(n)).tolist())
    assert fitted.k == pytest.approx(3.0, rel=1e-4)
    assert fitted.a == pytest.approx(1e-5, rel=1e-3)
    assert fitted.b == pytest.approx(4e-4, rel=1e-3)
    expected = (2 * truth.b / (truth.a * (truth.k - 2))) ** (1 / truth.k)
    assert fitted.analytic_optimum() == pytest.approx(expected, rel=1e-3)


def test_estimate_picks_the_integer_optimum() -> None:
    truth = SecondOrder(3e-4, -5e-3, 3e-2)  # peak at n = -2c/b = 12
    n = [1, 4, 16, 32]
    result = estimate(n, truth.predict(np.array(n)).tolist(), n_max=64)
    best = max(range(1, 65), key=lambda k: float(truth.predict(k)))
    assert best == 12 and result.streams == best
    assert result.model in ("second_order", "dynamic_order")
    assert result.throughput_mbps == pytest.approx(float(truth.predict(best)), rel=1e-6)


def test_rising_curve_goes_to_the_right_end() -> None:
    n = [1, 2, 4]
    result = estimate(n, [10.0, 19.0, 36.0], n_max=8)
    assert result.streams == 8


def test_guards_fall_back_and_say_why() -> None:
    # wildly inconsistent samples: every model either fails or over-promises
    result = estimate([1, 2, 3], [100.0, 5.0, 400.0], n_max=64)
    assert result.model == "best_sample" and result.streams == 3
    assert "no usable model" in result.reason
    with pytest.raises(FitError, match="3 or more different"):
        fit_second_order([1, 1, 2], [1.0, 1.0, 2.0])
    with pytest.raises(FitError, match="at least 3"):
        fit_dynamic_order([1, 2], [1.0, 2.0])
    with pytest.raises(FitError, match="positive"):
        fit_second_order([1, 2, 4], [1.0, -2.0, 3.0])
    with pytest.raises(StorkError):  # in the project's one tree, under EosError
        decide([], n_max=8, tolerance=0.05)
    assert issubclass(FitError, EosError)


def test_pick_with_tolerance_prefers_fewer_streams() -> None:
    flat = SecondOrder(1e-4, 0.0, 0.0)  # Th = n / (0.01 n) = 100 for every n
    assert pick(flat, range(1, 65)) == (1, pytest.approx(100.0))
    nearly = SecondOrder(1e-4, 0.0, 1e-5)  # rises towards 100; within 1% of it from n = 3
    assert pick(nearly, range(1, 65), tolerance=0.01)[0] == 3
    assert pick(nearly, range(1, 65))[0] == 64


curve = st.tuples(st.floats(1e-7, 1e-3), st.floats(-1e-2, 1e-2), st.floats(1e-4, 1e-1))


@settings(max_examples=300, deadline=None)
@given(curve, st.lists(st.integers(1, 64), min_size=3, max_size=6, unique=True),
       st.floats(0, 0.05))
def test_optimum_never_worse_than_a_sample_under_the_fit(params: tuple[float, float, float],
                                                         ns: list[int], noise: float) -> None:
    truth = SecondOrder(*params)
    n = np.array(sorted(ns), dtype=float)
    assume(np.all(truth.denominator(np.arange(1, 65, dtype=float)) > 0))
    th = truth.predict(n) * (1 + noise * np.sin(n))
    assume(np.all(th > 0) and np.all(np.isfinite(th)))
    result = estimate(n, th, n_max=64)
    assert math.isfinite(result.throughput_mbps) and 1 <= result.streams <= 64
    if result.model == "best_sample":
        assert result.throughput_mbps == pytest.approx(float(th.max()))
        return
    model = (SecondOrder if result.model == "second_order" else DynamicOrder)(**result.params)
    at_choice = float(model.predict(result.streams))
    for sampled in n:
        assert at_choice >= float(model.predict(sampled)) - 1e-9 * abs(at_choice)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 128), st.floats(1e-3, 1e5)), min_size=3, max_size=8))
def test_estimate_never_returns_nan(points: list[tuple[int, float]]) -> None:
    n = [p[0] for p in points]
    assume(len(set(n)) >= 3)
    result = estimate(n, [p[1] for p in points], n_max=128)
    assert math.isfinite(result.throughput_mbps) and 1 <= result.streams <= 128


def measure_from(truth: SecondOrder, log: list[int]) -> Measure:
    def measure(n: int) -> Sample:
        log.append(n)
        return Sample(n, float(truth.predict(n)))

    return measure


def test_doubling_stops_when_the_slope_flattens() -> None:
    truth = SecondOrder(4e-4, -6e-3, 3e-2)  # peak at 10
    log: list[int] = []
    samples = doubling(measure_from(truth, log), n_max=64, slope_threshold=0.02)
    assert log == [1, 2, 4, 8, 16]  # 16 is lower than 8: throughput dropped
    assert [s.streams for s in samples] == log
    # a curve that flattens slowly: the gain per added stream, as a share of the one-stream
    # throughput, is 0.97, 0.88, 0.64, 0.28, 0.07, 0.01 for each doubling
    gentle = SecondOrder(1e-4, 0.0, 1e-2)
    for threshold, last in ((0.5, 16), (0.1, 32), (0.02, 64)):
        log.clear()
        doubling(measure_from(gentle, log), n_max=64, slope_threshold=threshold)
        assert log[-1] == last, threshold


def test_guided_sampling_finds_the_peak_with_few_samples() -> None:
    truth = SecondOrder(4e-4, -6e-3, 3e-2)
    log: list[int] = []
    samples = guided(measure_from(truth, log), n_max=64, tolerance=0.0, max_samples=4)
    assert log[:3] == [1, 4, 16] and len(log) == 4 and log[3] == 10
    decision = decide(samples, 64, 0.0)
    assert decision.streams == 10


def test_guided_stops_on_a_flat_path_and_chooses_one_stream() -> None:
    log: list[int] = []
    samples = guided(lambda n: (log.append(n), Sample(n, 900.0 + n * 0.1))[1], n_max=64,
                     tolerance=0.03)
    assert log == [1, 4, 16]  # flat only once a far count agrees (1 and 4 can be noise)
    assert decide(samples, 64, 0.03).streams == 1


def test_sampling_respects_levels_and_n_max() -> None:
    truth = SecondOrder(1e-6, -1e-4, 3e-2)  # peak far out at 600
    log: list[int] = []
    guided(measure_from(truth, log), n_max=8, tolerance=0.0, max_samples=4)
    assert max(log) <= 8
    log.clear()
    samples = guided(measure_from(truth, log), n_max=64, tolerance=0.0,
                     levels=[1, 2, 4, 8, 16, 32, 64])
    assert set(log) <= {1, 2, 4, 8, 16, 32, 64}
    assert decide(samples, 64, 0.0, [1, 2, 4, 8, 16, 32, 64]).streams == 64
