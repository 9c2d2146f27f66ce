"""Deciding which EOS tasks and transfers run in parallel (section 4.3 of the EOS paper).

The public API: `Task`, `cor`, `conf`, `penal`, `TaskMatrix` and `SchedError`.
"""

from stork.sched.matrix import TaskMatrix
from stork.sched.relations import SchedError, Task, check_weights, conf, cor, penal

__all__ = ["SchedError", "Task", "TaskMatrix", "check_weights", "conf", "cor", "penal"]
