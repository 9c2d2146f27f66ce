"""Polynomial throughput surfaces over (cc, p, pp) and their maxima (HARP III-B2, III-B3). Pure.

A surface predicts throughput (Mbit/s) from u = log2(cc, p, pp). The paper fits raw values;
the history it learns from (and every grid we have) measures 1, 2, 4, ..., 32, so on raw
values five of the six levels of each parameter crowd into the first sixth of the range and a
cubic is decided by the 16s and 32s; on log2 the levels are evenly spaced and throughput
curves in streams (which rise fast, then flatten) are close to polynomial.

`fit_surface`: least squares on every monomial of degree <= d of u (scikit-learn's
`PolynomialFeatures` basis) for d in 2, 3, 4; d is the one with the smallest K-fold
cross-validated error (`KFold`, 5 folds, shuffled with a fixed seed), and the surface is
kept only when its cross-validated R^2 reaches `min_r2` (the paper's gate of 0.6, there on the
in-sample R^2: an out-of-sample R^2 cannot be bought with more terms).

`maximize`: the argmax of a surface (or a weighted sum of surfaces: still a polynomial in the
same basis) in a box, with cc * p at most the streams limit (linear in u:
u_cc + u_p <= log2 max_streams), by SciPy's SLSQP from several starts. `integer_best` turns
it into whole numbers the limits allow (the best of the 8 neighbours), and `relax` lowers the
parameters to the fewest streams (then the least pipelining) whose prediction stays within
`rho` of the maximum. `optima`: each of several surfaces' best cell on a lattice of
candidates (the allowed values on the ladder 1, 2, 3, 4, 6, 8, ... inside a box), the cells
HARP probes after its first choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import optimize
from sklearn.model_selection import KFold
from sklearn.preprocessing import PolynomialFeatures

from stork.dataset.chunks import Params
from stork.tuning.base import Limits

Floats = NDArray[np.float64]

MAX_DEGREE = 4
# exponents of the 35 monomials of degree <= 4 in (u_cc, u_p, u_pp), constant term first
BASIS: NDArray[np.int64] = PolynomialFeatures(MAX_DEGREE).fit(np.zeros((1, 3))).powers_
_DEGREE_OF = BASIS.sum(axis=1)


def monomials(u: Floats) -> Floats:
    """(n, 3) points -> (n, 35) values of the basis monomials."""
    points = np.atleast_2d(np.asarray(u, dtype=float))
    out: Floats = np.prod(points[:, None, :] ** BASIS[None, :, :], axis=2)
    return out


def predict(coef: Floats, u: Floats) -> Floats:
    return monomials(u) @ coef


def _gradient(coef: Floats, u: Floats) -> Floats:
    out = np.zeros(3)
    for j in range(3):
        e = BASIS[:, j]
        lowered = BASIS.copy()
        lowered[:, j] = np.maximum(e - 1, 0)
        out[j] = float((coef * e * np.prod(u[None, :] ** lowered, axis=1)).sum())
    return out


@dataclass(frozen=True)
class Surface:
    """A fitted polynomial in the 35-monomial basis (zeros above its degree)."""

    coef: Floats
    degree: int
    cv_r2: float  # cross-validated R^2
    cv_rel_rmse: float  # cross-validated RMS error / mean throughput

    def predict(self, u: Floats) -> Floats:
        return predict(self.coef, u)


def fit_surface(u: Floats, mbps: Floats, *, degrees: Sequence[int] = (2, 3, 4),
                folds: int = 5, min_r2: float = 0.6, seed: int = 0
                ) -> tuple[Surface | None, str]:
    """The surface of the degree that cross-validates best, or None and why not."""
    y = np.asarray(mbps, dtype=float)
    n = len(y)
    sst = float(((y - y.mean()) ** 2).sum())
    if sst <= 0:
        return None, f"{n} cells with one throughput"
    design = monomials(u)
    splits = list(KFold(n_splits=min(folds, n), shuffle=True, random_state=seed).split(design))
    best: tuple[float, int] | None = None
    for d in degrees:
        cols = d >= _DEGREE_OF
        if n < int(cols.sum()) + 3:
            continue
        sse = 0.0
        for train, test in splits:
            coef, *_ = np.linalg.lstsq(design[train][:, cols], y[train], rcond=None)
            sse += float(((design[test][:, cols] @ coef - y[test]) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, d)
    if best is None:
        return None, f"{n} cells: too few for degree {min(degrees)}"
    sse, d = best
    cv_r2 = 1.0 - sse / sst
    if cv_r2 < min_r2:
        return None, f"cross-validated R^2 {cv_r2:.2f} < {min_r2} (degree {d})"
    cols = d >= _DEGREE_OF
    coef_d, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
    coef = np.zeros(len(BASIS))
    coef[cols] = coef_d
    rel_rmse = math.sqrt(sse / n) / max(float(y.mean()), 1e-9)
    return Surface(coef, d, cv_r2, rel_rmse), f"degree {d}, cross-validated R^2 {cv_r2:.2f}"


def maximize(coef: Floats, lower: Floats, upper: Floats, max_log_streams: float,
             starts: Sequence[Floats]) -> tuple[Floats, float]:
    """(u*, value) maximizing the polynomial in [lower, upper] with u_cc + u_p <=
    `max_log_streams`, by SLSQP from each start (moved inside first)."""
    bounds = optimize.Bounds(lower, upper)
    streams = optimize.LinearConstraint(np.array([[1.0, 1.0, 0.0]]), -np.inf, max_log_streams)

    def loss(u: Floats) -> float:
        return -float(predict(coef, u)[0])

    def jac(u: Floats) -> Floats:
        return -_gradient(coef, u)

    best_u, best_v = None, -math.inf
    for start in starts:
        s = _inside(np.asarray(start, dtype=float), lower, upper, max_log_streams)
        result = optimize.minimize(loss, s, jac=jac, method="SLSQP", bounds=bounds,
                                   constraints=[streams])
        for u in (s, _inside(np.asarray(result.x, dtype=float), lower, upper,
                             max_log_streams)):
            v = float(predict(coef, u)[0])
            if v > best_v:
                best_u, best_v = u, v
    assert best_u is not None
    return best_u, best_v


def _inside(u: Floats, lower: Floats, upper: Floats, max_log_streams: float) -> Floats:
    u = np.array(np.clip(u, lower, upper), dtype=float)
    excess = u[0] + u[1] - max_log_streams
    if excess > 0:  # take it off p first, then cc
        cut_p = min(excess, u[1] - lower[1])
        u[1] -= cut_p
        u[0] = max(lower[0], u[0] - (excess - cut_p))
    return u


def to_u(params: Params) -> Floats:
    """log2 of (cc, p, pp): where surfaces are evaluated."""
    out: Floats = np.log2(np.array([params.cc, params.p, params.pp], dtype=float))
    return out


def _candidates(limits: Limits, axis: int, upper_value: float) -> list[int]:
    values = [v for v in limits.allowed(axis) if v <= upper_value * (1 + 1e-9)]
    return values or limits.allowed(axis)[:1]


def integer_best(coef: Floats, u: Floats, limits: Limits, upper: Floats) -> tuple[Params, float]:
    """The best whole-number neighbour of u* the limits allow (at most 2**upper per axis)."""
    options = []
    for axis in range(3):
        allowed = _candidates(limits, axis, 2 ** upper[axis])
        x = 2 ** u[axis]
        below = [v for v in allowed if v <= x]
        above = [v for v in allowed if v >= x]
        options.append(sorted({below[-1] if below else allowed[0],
                               above[0] if above else allowed[-1]}))
    combos = [Params(cc, p, pp) for cc in options[0] for p in options[1] for pp in options[2]
              if cc * p <= limits.max_streams]
    if not combos:
        fallback = limits.nearest(Params(options[0][0], options[1][0], options[2][0]))
        return fallback, float(predict(coef, to_u(fallback))[0])
    values = predict(coef, np.array([to_u(c) for c in combos]))
    k = int(np.argmax(values))
    return combos[k], float(values[k])


def _ladder(values: list[int], top: int) -> list[int]:
    """Candidates for relaxation: 1, 2, 3, 4, 6, 8, 12, ... (two a doubling) up to `top`."""
    def on_ladder(v: int) -> bool:
        return v & (v - 1) == 0 or (v % 3 == 0 and (v // 3) & (v // 3 - 1) == 0)
    return [v for v in values if v <= top and (v == top or on_ladder(v))]


def lattice(limits: Limits, upper: Floats) -> list[Params]:
    """Candidate cells: on each axis the allowed values on the ladder (two a doubling) up to
    2**upper, with cc * p within the streams limit."""
    axes = [_ladder(limits.allowed(i), max(_candidates(limits, i, 2 ** upper[i])))
            for i in range(3)]
    return [Params(cc, p, pp) for cc in axes[0] for p in axes[1] for pp in axes[2]
            if cc * p <= limits.max_streams]


def optima(coefs: Sequence[Floats], cells: Sequence[Params]) -> list[Params]:
    """The best of `cells` on each surface (one row of `coefs` per surface)."""
    if not cells or not coefs:
        return []
    values = monomials(np.array([to_u(c) for c in cells])) @ np.array(coefs).T
    return [cells[int(k)] for k in np.argmax(values, axis=0)]


def relax(coef: Floats, chosen: Params, limits: Limits, rho: float,
          others: Sequence[Floats] = ()) -> tuple[Params, float]:
    """The cheapest parameters, none above `chosen`'s, whose prediction is at least `rho` of
    `chosen`'s, on `coef` and on each of `others` (surfaces that must agree): fewest streams
    cc * p, then least pipelining, then the highest prediction."""
    top = float(predict(coef, to_u(chosen))[0])
    axes = [_ladder(limits.allowed(i), v) for i, v in enumerate((chosen.cc, chosen.p, chosen.pp))]
    grid = np.array([(cc, p, pp) for cc in axes[0] for p in axes[1] for pp in axes[2]
                     if cc * p <= limits.max_streams], dtype=float)
    if not len(grid):
        return chosen, top
    points = np.log2(grid)
    values = predict(coef, points)
    ok = values >= rho * top
    if others:
        each = monomials(points) @ np.array(others).T  # (candidates, surfaces)
        own = monomials(to_u(chosen)[None, :]) @ np.array(others).T  # (1, surfaces)
        ok &= np.all(each >= rho * own, axis=1)
    if not ok.any():
        return chosen, top
    streams = grid[:, 0] * grid[:, 1]
    order = np.lexsort((-values, grid[:, 2], streams))  # last key is the primary one
    k = next(i for i in order if ok[i])
    cc, p, pp = (int(v) for v in grid[k])
    return Params(cc, p, pp), float(values[k])
