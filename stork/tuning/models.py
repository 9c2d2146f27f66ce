"""Throughput models of parallel TCP streams, as pure functions (numpy/scipy, no I/O).

Both models describe the effective loss p'(n) = n^2 / Th(n)^2 (section 3.3 of the EOS paper):

* full second order: p'(n) = a n^2 + b n + c, so Th(n) = n / sqrt(a n^2 + b n + c);
* dynamic order:     p'(n) = a n^k + b,       so Th(n) = n / sqrt(a n^k + b).

`fit_second_order` and `fit_dynamic_order` take three or more (streams, Mbit/s) samples (an
exact solve for three, least squares for more). `estimate` fits both, applies the guards and
picks the stream count, saying which path it took.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize

from stork.errors import FitError

Floats = NDArray[np.float64]

# A fit may not promise more than this many times the best throughput ever measured.
MAX_PROMISE = 2.0
# Smallest relative spread of sample stream counts for a usable fit.
_K_BOUNDS = (0.05, 12.0)


@dataclass(frozen=True)
class SecondOrder:
    a: float
    b: float
    c: float

    name = "second_order"

    def denominator(self, n: Floats) -> Floats:
        return self.a * n * n + self.b * n + self.c

    def predict(self, n: ArrayLike) -> Floats:
        arr = np.asarray(n, dtype=float)
        return _throughput(arr, self.denominator(arr))

    def analytic_optimum(self) -> float | None:
        """n* = -2c/b when it is a maximum (b < 0 < c), else None (monotone curve)."""
        if self.b < 0 < self.c:
            return -2.0 * self.c / self.b
        return None


@dataclass(frozen=True)
class DynamicOrder:
    a: float
    k: float
    b: float

    name = "dynamic_order"

    def denominator(self, n: Floats) -> Floats:
        return self.a * np.power(n, self.k) + self.b

    def predict(self, n: ArrayLike) -> Floats:
        arr = np.asarray(n, dtype=float)
        return _throughput(arr, self.denominator(arr))

    def analytic_optimum(self) -> float | None:
        """n* = (2b / (a (k - 2)))^(1/k) when it is a maximum (k > 2, a > 0, b > 0)."""
        if self.k > 2 and self.a > 0 and self.b > 0:
            return float((2.0 * self.b / (self.a * (self.k - 2.0))) ** (1.0 / self.k))
        return None


Model = SecondOrder | DynamicOrder


def _throughput(n: Floats, denominator: Floats) -> Floats:
    with np.errstate(divide="ignore", invalid="ignore"):
        th = n / np.sqrt(denominator)
    return np.where(denominator > 0, th, 0.0)


def _arrays(streams: ArrayLike, mbps: ArrayLike) -> tuple[Floats, Floats]:
    n = np.asarray(streams, dtype=float)
    th = np.asarray(mbps, dtype=float)
    if n.shape != th.shape or n.ndim != 1:
        raise FitError("streams and throughputs must be two lists of the same length")
    if len(n) < 3:
        raise FitError(f"need at least 3 samples, got {len(n)}")
    if len(np.unique(n)) < 3:
        raise FitError("need samples at 3 or more different stream counts")
    if not (np.all(np.isfinite(n)) and np.all(np.isfinite(th))) or np.any(n < 1) or np.any(th <= 0):
        raise FitError("stream counts must be >= 1 and throughputs positive and finite")
    return n, th


def fit_second_order(streams: ArrayLike, mbps: ArrayLike) -> SecondOrder:
    """Solve n^2/Th^2 = a n^2 + b n + c (exactly for 3 samples, least squares for more)."""
    n, th = _arrays(streams, mbps)
    y = (n / th) ** 2
    design = np.column_stack([n * n, n, np.ones_like(n)])
    scale = np.abs(design).max(axis=0)
    cond = np.linalg.cond(design / scale)
    if not math.isfinite(cond) or cond > 1e10:
        raise FitError(f"samples are ill-conditioned for the second-order model (cond {cond:.3g})")
    coef, *_ = np.linalg.lstsq(design / scale, y, rcond=None)
    a, b, c = (coef / scale).tolist()
    return SecondOrder(a, b, c)


def _linear_in_ab(n: Floats, y: Floats,
                  ks: Floats) -> tuple[Floats, Floats, Floats]:
    """For each order k: the least-squares (a, b) of y = a n^k + b and its squared residual
    (closed form of the two-parameter regression, vectorised over k)."""
    x = np.power(n[None, :], ks[:, None])
    x_mean = x.mean(axis=1, keepdims=True)
    dx = x - x_mean
    dy = y - y.mean()
    sxx = (dx * dx).sum(axis=1)
    a = (dx * dy).sum(axis=1) / np.where(sxx > 0, sxx, np.inf)
    b = y.mean() - a * x_mean[:, 0]
    resid = a[:, None] * x + b[:, None] - y
    return a, b, (resid * resid).sum(axis=1)


def fit_dynamic_order(streams: ArrayLike, mbps: ArrayLike) -> DynamicOrder:
    """Solve n^2/Th^2 = a n^k + b: for each k the fit is linear in (a, b); k minimises the
    squared residual (zero for three samples when an exact solution exists)."""
    n, th = _arrays(streams, mbps)
    y = (n / th) ** 2
    grid = np.linspace(*_K_BOUNDS, 60)
    errors = _linear_in_ab(n, y, grid)[2]
    i = int(np.argmin(errors))
    lo = grid[max(i - 1, 0)]
    hi = grid[min(i + 1, len(grid) - 1)]
    found = optimize.minimize_scalar(lambda k: float(_linear_in_ab(n, y, np.array([k]))[2][0]),
                                     bounds=(lo, hi), method="bounded",
                                     options={"xatol": 1e-6})
    k = float(found.x) if found.success else float(grid[i])
    a, b, _ = _linear_in_ab(n, y, np.array([k]))
    return DynamicOrder(float(a[0]), k, float(b[0]))


@dataclass(frozen=True)
class Estimate:
    """The chosen stream count and how it was chosen."""

    streams: int
    throughput_mbps: float  # predicted at `streams` (measured, for best_sample)
    model: str  # second_order, dynamic_order or best_sample
    reason: str  # why this path was taken (the fallbacks say what failed)
    params: dict[str, float]
    fit_error: float  # relative RMS error of the model at the samples (0 for best_sample)


def _relative_rms(model: Model, n: Floats, th: Floats) -> float:
    predicted = model.predict(n)
    return float(np.sqrt(np.mean(((predicted - th) / th) ** 2)))


def _check(model: Model, n: Floats, th: Floats, candidates: Floats) -> str | None:
    """None when the model is usable on the candidates; otherwise what is wrong with it."""
    den = model.denominator(candidates)
    if not np.all(np.isfinite(den)) or np.any(den <= 0):
        return "denominator not positive on the allowed stream counts"
    predicted = model.predict(candidates)
    if not np.all(np.isfinite(predicted)):
        return "prediction not finite"
    if predicted.max() > MAX_PROMISE * th.max():
        return (f"promises {predicted.max():.4g} Mbit/s, more than {MAX_PROMISE:g} x the best "
                f"measured {th.max():.4g}")
    return None


def pick(model: Model, candidates: Sequence[int], tolerance: float = 0.0) -> tuple[int, float]:
    """The stream count the model recommends among `candidates`.

    The argmax of the fitted curve over the candidates (so it is never worse, under the
    curve, than any sampled count); with `tolerance` > 0 the smallest count whose predicted
    throughput is within that fraction of the maximum (streams that add nothing cost hosts).
    """
    c = np.asarray(sorted(set(candidates)), dtype=float)
    predicted = model.predict(c)
    best = float(predicted.max())
    good = np.nonzero(predicted >= best * (1.0 - max(tolerance, 1e-9)))[0]  # 1e-9: rounding
    i = int(good[0]) if len(good) else int(np.argmax(predicted))
    return int(c[i]), float(predicted[i])


def estimate(streams: ArrayLike, mbps: ArrayLike, n_max: int,
             candidates: Sequence[int] | None = None, tolerance: float = 0.0) -> Estimate:
    """Fit both models and choose. Falls back to the best sample; never returns NaN.

    Among the models that pass the guards, the one that fits the samples best is used.
    """
    n = np.asarray(streams, dtype=float)
    th = np.asarray(mbps, dtype=float)
    if candidates is None:
        candidates = range(1, n_max + 1)
    allowed = np.asarray([c for c in candidates if 1 <= c <= n_max], dtype=float)
    if len(allowed) == 0:
        raise FitError(f"no allowed stream count in [1, {n_max}]")
    problems: list[str] = []
    usable: list[tuple[float, Model]] = []
    for fit in (fit_second_order, fit_dynamic_order):
        try:
            model = fit(n, th)
        except FitError as exc:
            problems.append(f"{fit.__name__[4:]}: {exc}")
            continue
        problem = _check(model, n, th, allowed)
        if problem:
            problems.append(f"{model.name}: {problem}")
            continue
        usable.append((_relative_rms(model, n, th), model))
    if usable:
        error, model = min(usable, key=lambda item: item[0])
        chosen, predicted = pick(model, allowed.astype(int).tolist(), tolerance)
        params = {key: float(getattr(model, key)) for key in model.__dataclass_fields__}
        reason = "best fit of the usable models"
        if problems:
            reason += "; " + "; ".join(problems)
        return Estimate(chosen, predicted, model.name, reason, params, error)
    valid = np.isfinite(th) & (th > 0) & (n >= 1) & (n <= n_max)
    if not np.any(valid):
        raise FitError("no valid sample to fall back on")
    i = int(np.argmax(np.where(valid, th, -np.inf)))
    return Estimate(int(n[i]), float(th[i]), "best_sample",
                    "no usable model: " + "; ".join(problems), {}, 0.0)
