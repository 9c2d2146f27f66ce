"""A picture of one estimation: samples, the fitted curve(s) and the chosen optimum."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from stork.eos.models import DynamicOrder, SecondOrder, fit_dynamic_order, fit_second_order
from stork.eos.types import EstimateResult


def plot_estimate(result: EstimateResult | Mapping[str, Any], path: str, title: str = "") -> None:
    """Draw `result` (or its JSON form, as a job's `result` holds it) into the PNG `path`."""
    estimate = EstimateResult.of(result)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = np.asarray(estimate.samples, dtype=float)
    n, th = samples[:, 0], samples[:, 1]
    top = max(int(n.max()) * 2, estimate.optimal_streams * 2, 8)
    grid = np.linspace(1, top, 400)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.scatter(n, th, color="black", zorder=3, label="samples (measured)")
    if len(set(n.tolist())) >= 3:
        for fit, style in ((fit_second_order, "-"), (fit_dynamic_order, "--")):
            try:
                model: SecondOrder | DynamicOrder = fit(n, th)
            except ValueError:
                continue
            chosen = " (chosen)" if model.name == estimate.model else ""
            label = f"{model.name.replace('_', ' ')}{chosen}"
            ax.plot(grid, model.predict(grid), style, label=label)
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
