"""The tuning layer: every optimizer of (cc, p, pp) and its numerics, in one package that
imports none of the services that use it (the EOS, ASM's analysis job, the daemon). The
probing optimizers share one interface (`base.Optimizer`) and are chosen by name from
`OPTIMIZERS`; the controllers of a running flow (`online`) from `CONTROLLERS`; the submit
attribute `optimization` and `EOS_OPTIMIZER` name one of either."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stork.errors import ConfigError
from stork.tuning.asm import AsmOptimizer
from stork.tuning.base import (
    DatasetDescription,
    Decision,
    Limits,
    Optimizer,
    Probe,
    ProbeResult,
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

# controllers of a running flow (`stork.tuning.online`): not an `Optimizer`, they are
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
