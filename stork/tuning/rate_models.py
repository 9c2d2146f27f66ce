"""The three regression families of section IV (Sen, Rao et al.) over a `Table`: polynomial
with interaction terms, bagging and boosting of regression trees (scikit-learn). Pure: arrays
in, fitted models and figures out; no I/O, no clock (every random choice is seeded).

* Predictors are scaled to [0, 1] (as the paper's bound assumes); the counts (flows,
  concurrency, pipelining) and the file size enter as log2 before scaling: the measured
  levels are 1, 2, 4 ... 64, which on a linear scale crowd into the first tenth of the range.
* polynomial: every term of total degree at most M in the predictors (the interactions
  included), least squares; M in DEGREES chosen by k-fold cross-validated RMSE.
* bagging: B unpruned trees on bootstrap samples, averaged; B in BAGGING_B chosen by k-fold
  cross-validated RMSE; the out-of-bag RMSE of the chosen B is reported (each row predicted by
  the trees whose bootstrap sample left it out; rows no tree left out are not counted).
* boosting: B trees of depth BOOST_DEPTH fitted in sequence to the residuals, each shrunk by
  lambda; (B, lambda) in BOOSTING_B x SHRINKAGE chosen by k-fold cross-validated RMSE (one
  fit per fold and lambda, every B read from its stages).
* importance: for the trees, the decrease of the RSS by splits on a predictor, averaged over
  the trees (the paper's measure), as shares; for the polynomial, which has no splits, the
  increase of the MSE when the predictor's column is shuffled (permutation importance), as
  shares.
* R^2 on the whole table (the fit) and cross-validated (out of sample); the bound of
  `stork.tuning.rate_bound` with C = the largest rate measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from stork.errors import AnalyticsError
from stork.tuning.rate_bound import Bound, bound
from stork.tuning.rate_table import RTT, Table

K_FOLDS = 5
MIN_ROWS = 20  # below this, 5 folds of 4 rows tell nothing
DEGREES = (1, 2, 3, 4, 5)
BAGGING_B = (10, 25, 50, 100)
BOOSTING_B = (50, 100, 250, 500)
SHRINKAGE = (0.05, 0.1, 0.2)
BOOST_DEPTH = 3
SEED = 0
FAMILIES = ("polynomial", "bagging", "boosting")

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Scaler:
    """log2 of the counts, then each predictor onto [0, 1] by the table's range."""

    columns: tuple[str, ...]
    low: Array
    high: Array

    @classmethod
    def of(cls, table: Table) -> Scaler:
        raw = _logs(table.columns, table.x)
        return cls(table.columns, raw.min(axis=0), raw.max(axis=0))

    def __call__(self, x: Array) -> Array:
        span = np.where(self.high > self.low, self.high - self.low, 1.0)
        return (_logs(self.columns, x) - self.low) / span


def _logs(columns: Sequence[str], x: Array) -> Array:
    out = np.array(x, dtype=float, copy=True)
    for i, c in enumerate(columns):
        if c != RTT:
            out[:, i] = np.log2(np.maximum(out[:, i], 1e-9))
    return out


@dataclass(frozen=True)
class Fit:
    """One family fitted to a table, with its figures."""

    family: str
    setting: str  # the hyper-parameters chosen by cross-validation
    cv_rmse: float  # Mbit/s
    cv_r2: float
    r2: float  # on the whole table
    oob_rmse: float | None  # bagging
    importance: dict[str, float]  # shares, summing to 1
    bound: Bound
    cv_curve: dict[str, float]  # every setting tried -> its cross-validated RMSE
    scaler: Scaler = field(repr=False)
    model: Any = field(repr=False, compare=False)

    def predict(self, x: Array) -> Array:
        return np.asarray(self.model.predict(self.scaler(x)), dtype=float)


def check(table: Table, k: int = K_FOLDS) -> None:
    """AnalyticsError when the table is too small or too uniform to fit."""
    if len(table) < max(MIN_ROWS, 2 * k):
        raise AnalyticsError(table.source, f"{len(table)} usable rows ({table.skipped} "
                                           f"skipped); fitting with {k}-fold cross-validation "
                                           f"needs at least {max(MIN_ROWS, 2 * k)}")
    if len(np.unique(table.column("flows"))) < 2:
        raise AnalyticsError(table.source, "every row has the same number of flows: the rate "
                                           "cannot be modelled as a function of flows")


def fit_all(table: Table, k: int = K_FOLDS, families: Sequence[str] = FAMILIES) -> list[Fit]:
    """Each family fitted to `table`, its hyper-parameters chosen by k-fold CV."""
    check(table, k)
    fitters = {"polynomial": fit_polynomial, "bagging": fit_bagging, "boosting": fit_boosting}
    return [fitters[f](table, k) for f in families]


def _folds(rows: int, k: int) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
    from sklearn.model_selection import KFold

    return list(KFold(n_splits=k, shuffle=True, random_state=SEED).split(np.arange(rows)))


def _rmse(a: Array, b: Array) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _r2(y: Array, predicted: Array) -> float:
    total = float(np.sum((y - y.mean()) ** 2))
    return 1 - float(np.sum((y - predicted) ** 2)) / total if total > 0 else 0.0


def _shares(values: Array, columns: Sequence[str]) -> dict[str, float]:
    values = np.maximum(np.asarray(values, dtype=float), 0.0)
    total = float(values.sum())
    return {c: (float(v) / total if total > 0 else 0.0) for c, v in zip(columns, values,
                                                                         strict=True)}


def _poly(degree: int) -> Any:
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures

    return make_pipeline(PolynomialFeatures(degree), LinearRegression())


def fit_polynomial(table: Table, k: int = K_FOLDS) -> Fit:
    from sklearn.inspection import permutation_importance

    scaler = Scaler.of(table)
    x, y = scaler(table.x), table.y
    folds = _folds(len(y), k)
    curve: dict[int, Array] = {}
    for degree in DEGREES:
        predicted = np.empty_like(y)
        for train, test in folds:
            predicted[test] = _poly(degree).fit(x[train], y[train]).predict(x[test])
        curve[degree] = predicted
    best = min(DEGREES, key=lambda d: (_rmse(curve[d], y), d))
    model = _poly(best).fit(x, y)
    importance = permutation_importance(model, x, y, n_repeats=5, random_state=SEED,
                                        scoring="neg_mean_squared_error")
    c = float(y.max())
    lipschitz = _lipschitz(lambda z: np.asarray(model.predict(z)) / c, x.shape[1])
    return Fit("polynomial", f"degree {best}", _rmse(curve[best], y), _r2(y, curve[best]),
               _r2(y, model.predict(x)), None,
               _shares(importance.importances_mean, table.columns),
               bound("polynomial", len(y), c, lipschitz),
               {f"degree {d}": round(_rmse(p, y), 3) for d, p in curve.items()}, scaler, model)


def _lipschitz(f: Any, dims: int, h: float = 1e-3) -> float:
    """The largest gradient norm of f over the unit cube (central differences on a grid of
    41 points a side for up to two predictors, 4,000 seeded random points for more)."""
    if dims <= 2:
        axis = np.linspace(h, 1 - h, 41)
        points = np.array(np.meshgrid(*[axis] * dims)).reshape(dims, -1).T
    else:
        points = np.random.default_rng(SEED).uniform(h, 1 - h, (4000, dims))
    grads = np.empty_like(points)
    for i in range(dims):
        step = np.zeros(dims)
        step[i] = h
        grads[:, i] = (f(points + step) - f(points - step)) / (2 * h)
    return float(np.max(np.linalg.norm(grads, axis=1)))


def _bagging(trees: int) -> Any:
    from sklearn.ensemble import BaggingRegressor
    from sklearn.tree import DecisionTreeRegressor

    return BaggingRegressor(DecisionTreeRegressor(random_state=SEED), n_estimators=trees,
                            bootstrap=True, random_state=SEED)


def fit_bagging(table: Table, k: int = K_FOLDS) -> Fit:
    import warnings

    scaler = Scaler.of(table)
    x, y = scaler(table.x), table.y
    folds = _folds(len(y), k)
    curve: dict[int, Array] = {b: np.empty_like(y) for b in BAGGING_B}
    with warnings.catch_warnings():  # few trees leave some rows never out of bag
        warnings.simplefilter("ignore", UserWarning)
        for train, test in folds:
            model = _bagging(BAGGING_B[0])
            model.set_params(warm_start=True)
            for trees in BAGGING_B:  # the same trees grown on, one fit per fold
                model.set_params(n_estimators=trees)
                model.fit(x[train], y[train])
                curve[trees][test] = model.predict(x[test])
        best = min(BAGGING_B, key=lambda b: (_rmse(curve[b], y), b))
        model = _bagging(best).fit(x, y)
    oob, seen = _out_of_bag(model, x)
    importance = np.mean([t.feature_importances_ for t in model.estimators_], axis=0)
    return Fit("bagging", f"B = {best}", _rmse(curve[best], y), _r2(y, curve[best]),
               _r2(y, model.predict(x)), _rmse(oob[seen], y[seen]) if seen.any() else None,
               _shares(importance, table.columns), bound("trees", len(y), float(y.max())),
               {f"B = {b}": round(_rmse(p, y), 3) for b, p in curve.items()}, scaler, model)


def _out_of_bag(model: Any, x: Array) -> tuple[Array, npt.NDArray[np.bool_]]:
    """Each row's prediction by the trees that did not see it, and which rows had any
    (scikit-learn's `oob_prediction_` gives 0 to a row every tree saw)."""
    sums = np.zeros(len(x))
    counts = np.zeros(len(x))
    for tree, samples in zip(model.estimators_, model.estimators_samples_, strict=True):
        out = np.ones(len(x), dtype=bool)
        out[samples] = False
        if out.any():
            sums[out] += tree.predict(x[out])
            counts[out] += 1
    seen = counts > 0
    return np.divide(sums, counts, out=np.zeros(len(x)), where=seen), seen


def _boosting(trees: int, shrinkage: float) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(n_estimators=trees, learning_rate=shrinkage,
                                     max_depth=BOOST_DEPTH, random_state=SEED)


def fit_boosting(table: Table, k: int = K_FOLDS) -> Fit:
    scaler = Scaler.of(table)
    x, y = scaler(table.x), table.y
    folds = _folds(len(y), k)
    curve = {(b, s): np.empty_like(y) for b in BOOSTING_B for s in SHRINKAGE}
    for shrinkage in SHRINKAGE:
        for train, test in folds:
            model = _boosting(max(BOOSTING_B), shrinkage).fit(x[train], y[train])
            for stage, predicted in enumerate(model.staged_predict(x[test]), start=1):
                if stage in BOOSTING_B:
                    curve[(stage, shrinkage)][test] = predicted
    best = min(curve, key=lambda bs: (_rmse(curve[bs], y), bs))
    model = _boosting(*best).fit(x, y)
    return Fit("boosting", f"B = {best[0]}, shrinkage {best[1]:g}", _rmse(curve[best], y),
               _r2(y, curve[best]), _r2(y, model.predict(x)), None,
               _shares(model.feature_importances_, table.columns),
               bound("trees", len(y), float(y.max())),
               {f"B = {b}, shrinkage {s:g}": round(_rmse(p, y), 3)
                for (b, s), p in curve.items()}, scaler, model)


@dataclass(frozen=True)
class Prediction:
    """Each model's estimate at one point, and whether the point lies outside the data."""

    point: dict[str, float]
    estimates: dict[str, float]  # family -> Mbit/s
    outside: tuple[str, ...]  # "rtt_ms 120 outside 40..80", ...

    @property
    def extrapolated(self) -> bool:
        return bool(self.outside)


def predict(fits: Sequence[Fit], table: Table, rtt_ms: float, flows: float,
            others: dict[str, float] | None = None) -> Prediction:
    """The estimates at (rtt_ms, flows), the other predictors at `others` or their most
    frequent value; a predictor outside the table's range is named in `outside`."""
    if rtt_ms < 0 or flows < 1:
        raise AnalyticsError(table.source, f"cannot predict at RTT {rtt_ms:g} ms and "
                                           f"{flows:g} flows: RTT >= 0 and flows >= 1")
    point = {**table.typical(), **(others or {}), RTT: rtt_ms, "flows": flows}
    outside = tuple(f"{c} {point[c]:g} outside the measured {low:g}..{high:g}"
                    for c, (low, high) in table.ranges().items()
                    if not low - 1e-9 <= point[c] <= high + 1e-9)
    x = np.array([[point[c] for c in table.columns]], dtype=float)
    return Prediction({c: point[c] for c in table.columns},
                      {f.family: float(f.predict(x)[0]) for f in fits}, outside)
