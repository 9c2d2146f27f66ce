"""Fits against measurements, like the paper's Figs. 5, 7 and 9: one PNG per family.

Left: the rate over the flows at each measured RTT; right (with two RTTs or more): the rate
over the RTT at the fewest and the most flows. Measured means are solid lines with markers,
the fit is broken. The other predictors (concurrency, pipelining, file size) are held at their
most frequent value, and the measured means are taken over the rows at those values (all rows
when none is).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stork.errors import AnalyticsError
from stork.tuning.rate_models import Array, Fit
from stork.tuning.rate_table import FLOWS, RTT, Table


def _rows_at_typical(table: Table) -> Table:
    typical = table.typical()
    mask = np.ones(len(table), dtype=bool)
    for i, c in enumerate(table.columns):
        if c not in (RTT, FLOWS):
            mask &= np.isclose(table.x[:, i], typical[c])
    return table.only(mask, table.source) if mask.any() else table


def _mean(values: Array) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _points(table: Table, rtt: Array, flows: Array) -> Array:
    typical = table.typical()
    x = np.empty((len(rtt), len(table.columns)))
    for i, c in enumerate(table.columns):
        x[:, i] = rtt if c == RTT else flows if c == FLOWS else typical[c]
    return x


def draw(fits: Sequence[Fit], table: Table, directory: str | Path) -> list[Path]:
    """One PNG per fit in `directory` (made if missing); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AnalyticsError(str(out), f"cannot make the plot directory: "
                                       f"{exc.strerror or exc}") from None
    shown = _rows_at_typical(table)
    rtts = np.unique(shown.column(RTT))
    flows = np.unique(shown.column(FLOWS))
    written = []
    for fit in fits:
        panels = 2 if len(rtts) > 1 else 1
        fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
        left = axes[0][0]
        grid = np.geomspace(flows.min(), flows.max(), 60)
        for i, rtt in enumerate(rtts):
            color = f"C{i % 10}"
            at = shown.column(RTT) == rtt
            measured = [_mean(shown.y[at & (shown.column(FLOWS) == n)]) for n in flows]
            left.plot(flows, measured, "-o", color=color, label=f"{rtt:g} ms measured")
            left.plot(grid, fit.predict(_points(table, np.full_like(grid, rtt), grid)), "--",
                      color=color, label=f"{rtt:g} ms {fit.family}")
        left.set_xscale("log", base=2)
        left.set_xlabel("flows (streams per file)")
        left.set_ylabel("rate (Mbit/s)")
        left.legend(fontsize="small")
        if panels == 2:
            right = axes[0][1]
            line = np.linspace(rtts.min(), rtts.max(), 60)
            for i, n in enumerate(sorted({flows.min(), flows.max()})):
                color = f"C{i % 10}"
                at = shown.column(FLOWS) == n
                measured = [_mean(shown.y[at & (shown.column(RTT) == r)]) for r in rtts]
                right.plot(rtts, measured, "-o", color=color, label=f"{n:g} flows measured")
                right.plot(line, fit.predict(_points(table, line, np.full_like(line, n))), "--",
                           color=color, label=f"{n:g} flows {fit.family}")
            right.set_xlabel("RTT (ms)")
            right.set_ylabel("rate (Mbit/s)")
            right.legend(fontsize="small")
        fig.suptitle(f"{Path(table.source).name}: {fit.family} ({fit.setting}), "
                     f"CV RMSE {fit.cv_rmse:.1f} Mbit/s, R^2 {fit.r2:.3f}")
        fig.tight_layout()
        path = out / f"{fit.family}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
