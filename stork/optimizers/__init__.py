"""Optimizers of (cc, p, pp): one interface (`base.Optimizer`), one implementation per file,
chosen by name from `OPTIMIZERS` (the submit attribute `optimization` and `EOS_OPTIMIZER`
name one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from stork.optimizers.dw import DwIntervalOptimizer, DwOptimizer
from stork.optimizers.harp import HarpOptimizer
from stork.optimizers.online import Climb
from stork.optimizers.streams import StreamsOptimizer

if TYPE_CHECKING:
    from stork.config import Settings

OPTIMIZERS: dict[str, type[Optimizer]] = {
    HarpOptimizer.name: HarpOptimizer,
    StreamsOptimizer.name: StreamsOptimizer,
    AsmOptimizer.name: AsmOptimizer,
    DwOptimizer.name: DwOptimizer,
    DwIntervalOptimizer.name: DwIntervalOptimizer,
}

# controllers of a running flow (`stork.optimizers.online`): not an `Optimizer`, they are
# stepped on the engine's measurements (`stork.server.flow_tuning`)
CONTROLLERS: dict[str, type[Climb]] = {Climb.name: Climb}


def get(name: str, settings: Settings | None = None) -> Optimizer:
    """A new optimizer by its name (with its knobs from `settings`, when given); ConfigError
    naming the known ones otherwise."""
    try:
        kind = OPTIMIZERS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown optimizer {name!r}: known are "
                          f"{', '.join(sorted(OPTIMIZERS))}") from None
    return kind() if settings is None else kind.from_settings(settings)


__all__ = ["CONTROLLERS", "OPTIMIZERS", "DatasetDescription", "Decision", "Limits", "Optimizer",
           "Probe", "ProbeResult", "get"]
