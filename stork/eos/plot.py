"""A picture of one estimation: samples, the fitted curve(s) and the chosen optimum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stork.eos.types import EstimateResult
from stork.tuning.models import DynamicOrder, SecondOrder, fit_dynamic_order, fit_second_order


@dataclass(frozen=True)
class Curve:
    """A model fitted to the samples, evaluated on the figure's stream counts."""

    name: str  # the model's name ("second_order", "dynamic_order")
    chosen: bool  # the model the estimate used
    style: str  # matplotlib line style (the status page draws the same)
    throughput_mbps: np.ndarray


def fitted_curves(samples: Sequence[Sequence[float]], chosen_model: str,
                  optimal_streams: int, points: int = 400,
                  log_spaced: bool = False) -> tuple[np.ndarray, list[Curve]]:
    """The stream counts of the figure and the models fitted to `samples` ([streams,
    Mbit/s, ...] rows) over them: the `--plot` figure and the status page both draw these
    (the page with fewer points, evenly spaced on its log axis)."""
    data = np.asarray([row[:2] for row in samples], dtype=float).reshape(-1, 2)
    n, th = data[:, 0], data[:, 1]
    top = max(int(n.max()) * 2 if len(n) else 0, optimal_streams * 2, 8)
    grid = np.geomspace(1, top, points) if log_spaced else np.linspace(1, top, points)
    curves: list[Curve] = []
    if len(set(n.tolist())) >= 3:
        for fit, style in ((fit_second_order, "-"), (fit_dynamic_order, "--")):
            try:
                model: SecondOrder | DynamicOrder = fit(n, th)
            except ValueError:
                continue
            curves.append(Curve(model.name, model.name == chosen_model, style,
                                np.asarray(model.predict(grid), dtype=float)))
    return grid, curves


def plot_estimate(result: EstimateResult | Mapping[str, Any], path: str, title: str = "") -> None:
    """Draw `result` (or its JSON form, as a job's `result` holds it) into the PNG `path`."""
    estimate = EstimateResult.of(result)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = np.asarray(estimate.samples, dtype=float)
    n, th = samples[:, 0], samples[:, 1]
    grid, curves = fitted_curves(estimate.samples, estimate.model, estimate.optimal_streams)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.scatter(n, th, color="black", zorder=3, label="samples (measured)")
    for curve in curves:
        chosen = " (chosen)" if curve.chosen else ""
        ax.plot(grid, curve.throughput_mbps, curve.style,
                label=f"{curve.name.replace('_', ' ')}{chosen}")
    ax.axvline(estimate.optimal_streams, color="tab:red", linestyle=":",
               label=f"optimum: {estimate.optimal_streams} streams, "
                     f"{estimate.estimated_throughput_mbps:.0f} Mbit/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("parallel streams")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "EOS estimation", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
