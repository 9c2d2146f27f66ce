"""ASM's persisted state and the offline analysis as a job (stork_server's scheduler, and
`stork_history analyze`).

Two files in `<STORK_STATE_DIR>/asm/`:

* `state.json`: the additive tallies (`stork.tuning.asm_analysis.Aggregate`) and the id of the
  newest transfer log row folded in. Each run reads only the rows added after it
  (`JobStore.transfers_after`), folds them in and writes the file again (a new file renamed
  over the old one: a crash leaves the old state whole).
* `model.json`: the model built from the tallies (clusters, surfaces, sampling points and
  regions), what the online optimizer loads (`asm_optimizer`) without analysing anything.

A lock file keeps the scheduled job and a `stork_history analyze` from folding the same rows
in twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stork.dataset.chunks import Params
from stork.errors import AsmError
from stork.store.base import JobStore
from stork.tuning.asm_analysis import Aggregate, Cluster, Model, build_model
from stork.tuning.asm_surface import Surface

if TYPE_CHECKING:  # (stork.tuning imports stork.tuning.asm_analysis)
    from stork.tuning.asm import AsmOptimizer

DIRECTORY = "asm"
STATE_FILE = "state.json"
MODEL_FILE = "model.json"
LOCK_FILE = "lock"
READ_ROWS = 50_000  # rows read from the store at a time
FORMAT = 1


def directory(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / DIRECTORY


@dataclass(frozen=True)
class AnalysisRun:
    rows_read: int  # new transfer log rows read
    rows_added: int  # of them, completed rows folded in
    rows_total: int
    clusters: int
    seconds: float
    model: Model


def analyze(store: JobStore, where: str | os.PathLike[str]) -> AnalysisRun:
    """Fold the rows added since the last run into the state in `where` and rebuild the
    model there."""
    started = time.monotonic()
    folder = Path(where)
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        agg = load_aggregate(folder)
        read = added = 0
        while True:
            rows = store.transfers_after(agg.last_row_id, READ_ROWS)
            if not rows:
                break
            read += len(rows)
            added += agg.add(r for _, r in rows)
            agg.last_row_id = rows[-1][0]
        model = build_model(agg)
        # the model first: a crash between the two leaves the old tallies, which the next
        # run completes and rebuilds the same model from
        _write(folder / MODEL_FILE, model_to_json(model))
        _write(folder / STATE_FILE, {"format": FORMAT, **agg.to_json()})
    return AnalysisRun(read, added, agg.rows, len(model.clusters),
                       time.monotonic() - started, model)


def load_aggregate(folder: Path) -> Aggregate:
    data = _read(folder / STATE_FILE)
    return Aggregate() if data is None else Aggregate.from_json(data)


def load_model(where: str | os.PathLike[str]) -> Model | None:
    """The model the last analysis wrote, None before the first."""
    data = _read(Path(where) / MODEL_FILE)
    return None if data is None else model_from_json(data)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AsmError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AsmError(str(path), f"not JSON (line {exc.lineno}): {exc.msg}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise AsmError(str(path), f"not an ASM file of format {FORMAT}")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".new")
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(data, out, separators=(",", ":"))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


# -- the model as JSON -------------------------------------------------------------------

def model_to_json(model: Model) -> dict[str, Any]:
    return {"format": FORMAT, "rows": model.rows,
            "network_scores": {str(k): v for k, v in model.network_scores.items()},
            "clusters": [{
                "id": c.id, "network": list(c.network), "dataset": list(c.dataset),
                "groups": list(c.groups), "rows": list(c.rows),
                "samples": [_p(s) for s in c.samples],
                "region": [[*_p(p), d] for p, d in c.region],
                "surfaces": [{"cc": list(s.cc), "p": list(s.p), "pp": list(s.pp),
                              "values": s.values.tolist(), "sigma": s.sigma,
                              "intensity": s.intensity} for s in c.surfaces],
            } for c in model.clusters]}


def model_from_json(data: dict[str, Any]) -> Model:
    clusters = tuple(Cluster(
        int(c["id"]), tuple(c["network"]), tuple(c["dataset"]), tuple(c["groups"]),
        tuple(Surface(tuple(s["cc"]), tuple(s["p"]), tuple(s["pp"]),
                      np.array(s["values"], dtype=np.float64), float(s["sigma"]),
                      float(s["intensity"])) for s in c["surfaces"]),
        tuple(int(n) for n in c["rows"]), tuple(Params(*s) for s in c["samples"]),
        tuple((Params(*r[:3]), float(r[3])) for r in c["region"]),
    ) for c in data["clusters"])
    return Model(clusters, {int(k): float(v) for k, v in data["network_scores"].items()},
                 int(data["rows"]))


def _p(p: Params) -> list[int]:
    return [p.cc, p.p, p.pp]


def asm_optimizer(state_dir: str | os.PathLike[str]) -> AsmOptimizer:
    """The "asm" optimizer with the model the scheduled analysis persisted (none before the
    first analysis: it then analyses the history it is given)."""
    from stork.tuning.asm import AsmOptimizer

    model = load_model(directory(state_dir))
    return AsmOptimizer(model=model if model is not None and model.clusters else None)
