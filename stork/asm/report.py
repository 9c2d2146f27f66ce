"""What ASM's offline analysis found, for people: `stork_history analyze --report`.

`text` lists the clusters (their datasets, centroids, the Calinski-Harabasz indexes that
chose their count), each cluster's surfaces lightest load first (rows behind it, the spread
of its band, its maximum under the daemon's limits and the band there, its sampling point),
and the cluster's sampling region. `plot` draws one PNG per cluster: each load surface over
(cc, p) at the pipelining of its maximum, the maximum and the sampling point marked.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from stork.dataset.chunks import Params
from stork.tuning.asm_analysis import Cluster, Model, maximum
from stork.tuning.asm_surface import Z
from stork.tuning.base import Limits


def _cell(p: Params) -> str:
    return f"({p.cc},{p.p},{p.pp})"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _exp2(v: float) -> float:
    return math.nan if math.isnan(v) else 2 ** v


def text(model: Model, limits: Limits) -> str:
    out = [(f"ASM offline analysis: {model.rows:,} transfer log rows, "
            f"{len(model.clusters)} cluster(s); maxima under cc <= {limits.max_cc}, "
            f"p <= {limits.max_p}, pp <= {limits.max_pp}, cc x p <= {limits.max_streams}")]
    if model.network_scores:
        scores = ", ".join(f"{k}: {v:.1f}" for k, v in sorted(model.network_scores.items()))
        out.append(f"networks: Calinski-Harabasz index by cluster count: {scores}")
    for c in model.clusters:
        rtt, mbps, buf = (_exp2(v) for v in c.network)
        size, count = (_exp2(v) for v in c.dataset)
        out += ["", (f"cluster {c.id}: RTT {rtt:.3g} ms, {mbps:.4g} Mbit/s, buffer "
                     f"{buf:.3g} MiB; files of {_size(size)}, about {count:.0f} per transfer; "
                     f"{len(c.groups)} dataset(s): {', '.join(c.groups)}"),
                "  | load | rows | sigma | maximum | Mbit/s | band | sampling point |",
                "  |---|---|---|---|---|---|---|"]
        for s, rows, sample in zip(c.surfaces, c.rows, c.samples, strict=True):
            params, top = maximum(s, limits)
            low, high = top * (1 - Z * s.sigma), top * (1 + Z * s.sigma)
            out.append(f"  | {s.intensity:.2f} | {rows} | {s.sigma:.3f} | {_cell(params)} | "
                       f"{top:.0f} | {low:.0f}-{high:.0f} | {_cell(sample)} |")
        region = ", ".join(f"{_cell(p)} {d:.2f}" for p, d in c.region)
        out.append(f"  sampling region (point, least relative distance between surfaces): "
                   f"{region}")
    return "\n".join(out)


def plot(model: Model, limits: Limits, folder: Path) -> list[Path]:
    """One PNG per cluster in `folder`; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for c in model.clusters:
        path = folder / f"asm-cluster-{c.id}.png"
        _plot_cluster(plt, c, limits, path)
        written.append(path)
    return written


def _plot_cluster(plt: object, c: Cluster, limits: Limits, path: Path) -> None:
    n = len(c.surfaces)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)  # type: ignore[attr-defined]
    for ax, s, sample in zip(axes[0], c.surfaces, c.samples, strict=True):
        best, top = maximum(s, limits)
        cc = np.geomspace(s.cc[0], s.cc[-1], 40)
        p = np.geomspace(s.p[0], s.p[-1], 40)
        grid = s.on(cc, p, np.array([float(best.pp)]))[:, :, 0]
        mesh = ax.pcolormesh(p, cc, grid, shading="auto", cmap="viridis")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("p (streams per file)")
        ax.set_ylabel("cc (files in flight)")
        ax.set_title(f"load {s.intensity:.2f}, pp = {best.pp}\nmax {top:.0f} Mbit/s at "
                     f"{_cell(best)}", fontsize=9)
        ax.plot([best.p], [best.cc], "r*", markersize=12, label="maximum")
        ax.plot([sample.p], [sample.cc], "wo", markersize=7, markeredgecolor="k",
                label=f"sampling point {_cell(sample)}")
        ax.legend(fontsize=7, loc="lower left")
        fig.colorbar(mesh, ax=ax, label="Mbit/s")
    fig.suptitle(f"ASM cluster {c.id}: {', '.join(c.groups)[:120]}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)  # type: ignore[attr-defined]
