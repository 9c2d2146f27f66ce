"""Tasks as triples <source host, destination host, arguments> and how they relate.

Equations 10-15 and 19-21 of the EOS paper, with the reading its text and worked example
require (see docs/ARCHITECTURE.md): the host pair alone decides between unrelated (0) and
similar (alpha); the arguments only separate equal (1) from approximate (beta) tasks on the
same pair. Swapped source and destination count as the same pair.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from stork.errors import SchedError

_ids = itertools.count(1)


@dataclass(frozen=True, eq=False)
class Task:
    """One task. Two Task objects are distinct even when their triples are equal (two jobs)."""

    src_host: Hashable
    dest_host: Hashable
    args: Hashable = ""
    id: Hashable = field(default_factory=lambda: next(_ids))

    @cached_property
    def pair(self) -> frozenset[Hashable]:
        """The unordered host pair (equation 10 treats <S, D> and <D, S> alike); computed
        once, since every selection reads it for every waiting task."""
        return frozenset((self.src_host, self.dest_host))

    @property
    def triple(self) -> tuple[Hashable, Hashable, Hashable]:
        return (self.src_host, self.dest_host, self.args)

    def hosts(self) -> frozenset[Hashable]:
        return self.pair

    def __repr__(self) -> str:
        return f"<{self.src_host},{self.dest_host},{self.args}>#{self.id}"


def check_weights(alpha: float, beta: float, limit: float | None = None) -> None:
    """0 <= alpha <= beta <= 1 (equation 16) and a penalty limit >= 0."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, (int, float)) or math.isnan(value):
            raise SchedError(f"{name} must be a number, got {value!r}")
    if not 0 <= alpha <= beta <= 1:
        raise SchedError(f"need 0 <= alpha <= beta <= 1, got alpha = {alpha}, beta = {beta}")
    if limit is not None and (not isinstance(limit, (int, float)) or not limit >= 0):
        raise SchedError(f"the penalty limit must be a number >= 0, got {limit!r}")


def cor(t1: Task, t2: Task, alpha: float, beta: float) -> float:
    """Correlation score (equation 15): 1 equal, beta approximate, alpha similar, 0 else."""
    if t1.pair == t2.pair:
        return 1.0 if t1.args == t2.args else float(beta)
    if t1.pair & t2.pair:
        return float(alpha)
    return 0.0


def conf(tasks: Iterable[Task], alpha: float, beta: float) -> float:
    """Confusion score of a set of parallel tasks (equation 19)."""
    items = list(tasks)
    return float(sum(cor(items[i], items[j], alpha, beta)
                     for i in range(len(items)) for j in range(i + 1, len(items))))


def penal(host: Hashable, tasks: Iterable[Task], alpha: float) -> float:
    """Penalty of a host among parallel tasks (equations 20-21): alpha per task touching it."""
    return float(alpha) * sum(1 for t in tasks if host in t.pair)
