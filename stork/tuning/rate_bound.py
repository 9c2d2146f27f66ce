"""The probabilistic bound on the generalization error of section IV-D (Sen, Rao et al.).
Pure functions of numbers.

The rates are divided by C, the bound on the rate (theta <= C; here the largest rate
measured), so C = 1 in these units and epsilon, the excess of the expected squared error
I(f) over the best in the class I(f*), is a share of C^2. With l measurements:

    P{ I(f) > I(f*) + eps } <= 16 N(eps/C, F) l exp(-eps^2 l / (4C)^2)

* polynomials, whose gradient is at most L (the Lipschitz constant, predictors scaled to
  [0, 1], rate in units of C): N(eps, F_poly) < (2 L / eps) 2^[eps^2 / C^2], [x] read as the
  integer part;
* bagging and boosting (functions of total variation at most 2C):

    P{ I(f) > I(f*) + eps } < 32 (l / eps^2)^((1 + C/eps) log2(4 eps / C)) l exp(-eps^2 l / (2C)^2)

as printed in the paper (its exponent log2(4 eps/C), not the log2(2 eps/C) of the cover it
starts from). Below eps = C/4 that exponent is negative and the factor (l/eps^2)^(...) falls
below 1, which a covering number cannot (a cover holds one function at least): the factor is
taken as at least 1 here, else the printed formula would promise any eps, however small.
Together with the empirical error: with probability at least 1 - delta,
I(f) <= I_hat(f) + I(f*) + eps. `delta` may exceed 1: the bound then says nothing
(`vacuous`). Everything is computed in logarithms, so large l do not overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DELTA = 0.05  # the confidence asked for: eps such that delta <= 0.05
_GRID = np.geomspace(1e-4, 1.0, 2000)  # eps searched, as a share of C^2


def log_delta_poly(eps: float, rows: int, lipschitz: float, c: float = 1.0) -> float:
    """ln of 16 N(eps/C, F_poly) l exp(-eps^2 l / (4C)^2)."""
    e = eps / c
    log_cover = math.log(2 * max(lipschitz, 1e-12) / e) + math.floor(e * e / (c * c)) * math.log(2)
    return math.log(16) + log_cover + math.log(rows) - eps * eps * rows / (4 * c) ** 2


def log_delta_trees(eps: float, rows: int, c: float = 1.0) -> float:
    """ln of 32 (l/eps^2)^((1 + C/eps) log2(4 eps/C)) l exp(-eps^2 l / (2C)^2)."""
    power = (1 + c / eps) * math.log2(4 * eps / c)
    cover = max(0.0, power * math.log(rows / (eps * eps)))  # a cover has one function at least
    return math.log(32) + cover + math.log(rows) - eps * eps * rows / (2 * c) ** 2


@dataclass(frozen=True)
class Bound:
    """The bound for one fitted model (rates in units of C)."""

    family: str  # "polynomial" or "trees"
    rows: int  # l
    c_mbps: float  # C
    lipschitz: float | None  # L (polynomials)
    epsilon: float | None  # the smallest eps (share of C^2) with delta <= DELTA; None: none
    delta_at_epsilon: float | None

    @property
    def vacuous(self) -> bool:
        return self.epsilon is None

    def text(self) -> str:
        const = (f"C = {self.c_mbps:.1f} Mbit/s, l = {self.rows}"
                 + (f", L = {self.lipschitz:.3g}" if self.lipschitz is not None else ""))
        if self.epsilon is None:
            return (f"vacuous: no eps <= C^2 gives delta <= {DELTA} ({const})")
        return (f"with probability >= {1 - DELTA:.2f}: I(f) <= I_hat(f) + I(f*) + eps, "
                f"eps = {self.epsilon:.4g} C^2 = {self.epsilon * self.c_mbps ** 2:.4g} "
                f"(Mbit/s)^2 ({const})")


def bound(family: str, rows: int, c_mbps: float, lipschitz: float | None = None) -> Bound:
    """The smallest eps on a fine grid in (0, C^2] whose delta is at most DELTA."""
    if family == "polynomial":
        if lipschitz is None:
            raise ValueError("the polynomial bound needs the Lipschitz constant")
        values = [log_delta_poly(float(e), rows, lipschitz) for e in _GRID]
    else:
        values = [log_delta_trees(float(e), rows) for e in _GRID]
    target = math.log(DELTA)
    for eps, value in zip(_GRID, values, strict=True):
        if value <= target:
            return Bound(family, rows, c_mbps, lipschitz, float(eps), math.exp(value))
    return Bound(family, rows, c_mbps, lipschitz, None, None)
