"""Optimizers of (cc, p, pp): one interface (`base.Optimizer`), one implementation per file,
chosen by name from `OPTIMIZERS` (the submit attribute `optimization` and `EOS_OPTIMIZER`
name one)."""

from __future__ import annotations

from stork.errors import ConfigError
from stork.optimizers.asm import AsmOptimizer
from stork.optimizers.base import (
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
)
from stork.optimizers.harp import HarpOptimizer
from stork.optimizers.streams import StreamsOptimizer

OPTIMIZERS: dict[str, type[Optimizer]] = {
    HarpOptimizer.name: HarpOptimizer,
    StreamsOptimizer.name: StreamsOptimizer,
    AsmOptimizer.name: AsmOptimizer,
}


def get(name: str) -> Optimizer:
    """A new optimizer by its name; ConfigError naming the known ones otherwise."""
    try:
        return OPTIMIZERS[name.lower()]()
    except KeyError:
        raise ConfigError(f"unknown optimizer {name!r}: known are "
                          f"{', '.join(sorted(OPTIMIZERS))}") from None


__all__ = ["OPTIMIZERS", "DatasetDescription", "Decision", "Limits", "Optimizer", "Probe",
           "ProbeResult", "get"]
