"""Deciding which EOS tasks and transfers run in parallel (section 4.3 of the EOS paper).

The public API: `Task`, `cor`, `conf`, `penal` and `TaskMatrix`; their errors are
`stork.errors.SchedError`.
"""

from stork.sched.matrix import TaskMatrix
from stork.sched.relations import Task, check_weights, conf, cor, penal

__all__ = ["Task", "TaskMatrix", "check_weights", "conf", "cor", "penal"]
