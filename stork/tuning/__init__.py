"""The tuning layer: every optimizer of (cc, p, pp) and its numerics, in one package that
imports none of the services that use it (the EOS, ASM's analysis job, the daemon). The
probing optimizers share one interface (`base.Optimizer`) and are chosen by name from
`OPTIMIZERS`; the controllers of a running flow (`online`) from `CONTROLLERS`; the submit
attribute `optimization` and `EOS_OPTIMIZER` name one of either."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stork.tuning.base import (
        DatasetDescription,
        Decision,
        Limits,
        Optimizer,
        Probe,
        ProbeResult,
    )
    from stork.tuning.registry import CONTROLLERS, OPTIMIZERS, get

# what the package gives by name, from the module that holds it; loaded when first asked
# for, so that a module of the layer (the EOS's sampling rules, a controller) does not load
# every optimizer and scikit-learn with it
_BASE = ("DatasetDescription", "Decision", "Limits", "Optimizer", "Probe", "ProbeResult")
_FROM = {"CONTROLLERS": "registry", "OPTIMIZERS": "registry", "get": "registry",
         **dict.fromkeys(_BASE, "base")}


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module 'stork.tuning' has no attribute {name!r}")
    return getattr(importlib.import_module(f"stork.tuning.{_FROM[name]}"), name)


__all__ = ["CONTROLLERS", "OPTIMIZERS", "DatasetDescription", "Decision", "Limits", "Optimizer",
           "Probe", "ProbeResult", "get"]
