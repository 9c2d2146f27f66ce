"""The table of optimizers by name: the probing ones (`OPTIMIZERS`, one `base.Optimizer`
each) and the controllers of a running flow (`CONTROLLERS`). Importing it loads every
optimizer (and scikit-learn): `stork.tuning` itself reaches it only when asked."""


from __future__ import annotations

from typing import TYPE_CHECKING

from stork.errors import ConfigError
from stork.tuning.asm import AsmOptimizer
from stork.tuning.base import (
    Optimizer,
)
from stork.tuning.dw import DwIntervalOptimizer, DwOptimizer
from stork.tuning.harp import HarpOptimizer
from stork.tuning.online import Climb
from stork.tuning.streams import StreamsOptimizer

if TYPE_CHECKING:
    from stork.config import Settings

OPTIMIZERS: dict[str, type[Optimizer]] = {
    HarpOptimizer.name: HarpOptimizer,
    StreamsOptimizer.name: StreamsOptimizer,
    AsmOptimizer.name: AsmOptimizer,
    DwOptimizer.name: DwOptimizer,
    DwIntervalOptimizer.name: DwIntervalOptimizer,
}

# controllers of a running flow (`stork.tuning.online.Climb`): not an `Optimizer`, they are
# stepped on the engine's measurements (`stork.server.flow_tuning`). Each name says where
# its prior comes from: the optimizer of OPTIMIZERS whose choice from the transfer log alone
# (`path_history.prior_from_optimizer`: HARP's surfaces, ASM's load-matched cluster) it starts at,
# or None for the path's own history pooled per setting (`path_history.prior_from_history`)
CONTROLLERS: dict[str, str | None] = {Climb.name: None, "harp-climb": HarpOptimizer.name,
                                      "asm-climb": AsmOptimizer.name}


def get(name: str, settings: Settings | None = None) -> Optimizer:
    """A new optimizer by its name (with its knobs from `settings`, when given); ConfigError
    naming the known ones otherwise."""
    try:
        kind = OPTIMIZERS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown optimizer {name!r}: known are "
                          f"{', '.join(sorted(OPTIMIZERS))}") from None
    return kind() if settings is None else kind.from_settings(settings)


__all__ = ["CONTROLLERS", "OPTIMIZERS", "get"]
