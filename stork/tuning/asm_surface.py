"""A throughput surface over (cc, p, pp): piecewise cubic spline interpolation. Pure.

The paper (../shared/seeds/002_c698804e012e3a95.txt, section 3.1.1) builds, for each
pipelining value, a relaxed (natural) bicubic spline surface over (cc, p) through the
measured grid points, and a one-dimensional relaxed cubic spline over pipelining. That is a
tensor product of natural cubic splines, one along each axis, here in log2 of each parameter
(the measured levels are 1, 2, 4 ... 32: on raw values five of six crowd into the first
sixth of the range). A natural cubic spline through fixed nodes is linear in the node values,
so each axis is a matrix `basis(nodes, x)` (one row per query point, one column per node),
and the surface on any lattice of query points is one `einsum` of three such matrices with
the grid of node values. With three nodes or more an axis is cubic, with two linear, with one
constant. It passes through every grid point exactly.

The confidence band (section 3.1.1, equations 15-17): the measurements of one surface's
cells spread around the cell's value with a relative standard deviation `sigma`; the band at
a point is value x (1 -/+ Z sigma), Z = 1.96 (95% of a Gaussian).

Maxima (section 3.1.2): on a bounded integer domain the global maximum is the largest value
on the lattice of whole numbers the limits allow inside the measured range (never outside:
no extrapolation), which is where the paper's second-derivative test over all local maxima
ends; evaluated directly, every lattice point at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import CubicSpline

from stork.dataset.chunks import Params
from stork.errors import ConfigError

Z = 1.96  # the band is value x (1 -/+ Z sigma)
SIGMA_FLOOR = 0.05  # a band no narrower than +-9.8%: three repeats are not a distribution

Floats = NDArray[np.float64]


def basis(nodes: Floats, x: Floats) -> Floats:
    """The natural cubic spline through `nodes` as a matrix: `basis(nodes, x) @ y` is the
    spline through (nodes, y) at `x` (`len(x)` x `len(nodes)`)."""
    n = len(nodes)
    if n == 1:
        return np.ones((len(x), 1))
    if n == 2:  # the natural cubic through two points is the line
        t = (x - nodes[0]) / (nodes[1] - nodes[0])
        return np.stack([1 - t, t], axis=1)
    spline = CubicSpline(nodes, np.eye(n), bc_type="natural")
    return np.asarray(spline(x), dtype=np.float64)


@dataclass(frozen=True)
class Surface:
    """Throughput (Mbit/s) over a grid of measured (cc, p, pp) levels, for one cluster and
    one level of load."""

    cc: tuple[int, ...]  # the grid's levels on each axis, ascending
    p: tuple[int, ...]
    pp: tuple[int, ...]
    values: Floats  # (len(cc), len(p), len(pp)) Mbit/s at the grid points
    sigma: float  # relative standard deviation of measurements around the surface
    intensity: float  # the load intensity the surface stands for, 0 (none) .. 1
    _cache: dict[tuple[object, ...], tuple[Params, float]] = field(
        default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        shape = (len(self.cc), len(self.p), len(self.pp))
        if self.values.shape != shape:
            raise ConfigError(f"surface values of shape {self.values.shape}, grid {shape}")

    def on(self, cc: Floats, p: Floats, pp: Floats) -> Floats:
        """The surface on the lattice cc x p x pp (whole numbers inside the grid's range)."""
        axes = []
        for nodes, x in ((self.cc, cc), (self.p, p), (self.pp, pp)):
            axes.append(basis(np.log2(np.asarray(nodes, dtype=np.float64)),
                              np.log2(np.asarray(x, dtype=np.float64))))
        out = np.einsum("ai,bj,ck,ijk->abc", axes[0], axes[1], axes[2], self.values)
        return np.asarray(out, dtype=np.float64)

    def at(self, params: Params) -> float:
        """The surface's value at `params`, each clamped into the grid's range."""
        point = [float(np.clip(v, nodes[0], nodes[-1]))
                 for v, nodes in ((params.cc, self.cc), (params.p, self.p),
                                  (params.pp, self.pp))]
        return float(self.on(np.array([point[0]]), np.array([point[1]]),
                             np.array([point[2]]))[0, 0, 0])

    def band(self, params: Params) -> tuple[float, float]:
        value = self.at(params)
        return value * (1 - Z * self.sigma), value * (1 + Z * self.sigma)

    def ranked(self, max_streams: int) -> list[Params]:
        """The grid points (where the surface passes through measurements) with cc * p at
        most `max_streams`, best first."""
        order = np.argsort(-self.values, axis=None, kind="stable")
        points = (Params(self.cc[i], self.p[j], self.pp[k]) for i, j, k in
                  (np.unravel_index(int(n), self.values.shape) for n in order))
        return [c for c in points if c.cc * c.p <= max_streams]

    def maximum(self, cc_values: list[int], p_values: list[int], pp_values: list[int],
                max_streams: int) -> tuple[Params, float]:
        """The largest value on the lattice of the given values (those inside the grid's
        range; the nearest grid end when none is) with cc * p <= max_streams."""
        key = (tuple(cc_values), tuple(p_values), tuple(pp_values), max_streams)
        if key in self._cache:
            return self._cache[key]
        axes = [_inside(values, nodes) for values, nodes in
                ((cc_values, self.cc), (p_values, self.p), (pp_values, self.pp))]
        grid = self.on(*(np.clip(np.asarray(a, dtype=np.float64), nodes[0], nodes[-1])
                         for a, nodes in zip(axes, (self.cc, self.p, self.pp), strict=True)))
        streams = np.outer(axes[0], axes[1])[:, :, None] * np.ones(len(axes[2]))
        grid = np.where(streams <= max_streams, grid, -np.inf)
        i, j, k = np.unravel_index(int(np.argmax(grid)), grid.shape)
        best = (Params(int(axes[0][i]), int(axes[1][j]), int(axes[2][k])), float(grid[i, j, k]))
        self._cache[key] = best
        return best


def _inside(values: list[int], nodes: tuple[int, ...]) -> list[int]:
    inside = [v for v in values if nodes[0] <= v <= nodes[-1]]
    if inside:
        return inside
    return [min(values, key=lambda v: min(abs(v - nodes[0]), abs(v - nodes[-1])))]
