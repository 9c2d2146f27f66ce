"""The task matrix (Algorithms 3-6 of the EOS paper).

Rows hold tasks on one unordered host pair; the first member of each row (its head) is the
row's candidate for running. Heads are pairwise 0 or alpha; the members of a row pairwise 1
or beta. Rows are indexed by host pair, so `add` is O(1) where the paper scans the first
column, with the same result (a row exists for a pair exactly when a head has that pair).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping

from stork.errors import SchedError
from stork.sched.relations import Task, check_weights, conf


class TaskMatrix:
    def __init__(self, alpha: float, beta: float, exclusive_pairs: bool = True) -> None:
        """`exclusive_pairs` (the paper's matrix): tasks on one host pair share a row and never
        run together. False gives every task its own row (used for transfers, which move
        different files): only `n` and the host penalties then limit what runs at once."""
        check_weights(alpha, beta)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.exclusive_pairs = exclusive_pairs
        self._rows: dict[Hashable, list[Task]] = {}  # insertion order = the first column's
        self._running: dict[Hashable, Task] = {}  # rows whose head runs
        self._load: dict[Hashable, float] = defaultdict(float)  # penalty of running heads
        self.last_selection: list[Task] = []

    def _key(self, task: Task) -> Hashable:
        return task.pair if self.exclusive_pairs else ("task", task.id)

    # -- Algorithm 3 ---------------------------------------------------------------------------

    def add(self, task: Task) -> None:
        """Append to the row of the task's host pair, or start a new row (a new head)."""
        row = self._rows.get(self._key(task))
        if row is None:
            self._rows[self._key(task)] = [task]
        else:
            row.append(task)

    # -- Algorithms 4 and 5 ----------------------------------------------------------------------

    def select(self, n: int, penalty_limit: float, algorithm: int = 5,
               elsewhere: Mapping[Hashable, float] | None = None) -> list[Task]:
        """Choose heads to start now, mark them running, and return them in order.

        `n` bounds the running heads in total (those still running count); a head is taken
        only while both its hosts' penalties, running heads included, stay within the limit
        with it added. Algorithm 5 first takes heads orthogonal to every running
        or chosen task, then fills up as Algorithm 4 does. `elsewhere` adds the penalties of
        tasks running outside this matrix (other nodes' transfers) to the hosts' own.
        """
        check_weights(self.alpha, self.beta, penalty_limit)
        if algorithm not in (4, 5):
            raise SchedError(f"algorithm must be 4 or 5, got {algorithm!r}")
        if not isinstance(n, int) or n < 0:
            raise SchedError(f"n must be a whole number >= 0, got {n!r}")
        chosen: list[Task] = []
        room = n - len(self._running)
        if room <= 0:  # all slots taken: nothing to scan
            self.last_selection = []
            return chosen
        penalty = dict(self._load)
        for host, load in (elsewhere or {}).items():
            penalty[host] = penalty.get(host, 0.0) + load
        waiting = [row[0] for pair, row in self._rows.items() if pair not in self._running]

        unfit: set[frozenset[Hashable]] = set()  # penalties only grow while selecting

        def fits(task: Task) -> bool:
            # the paper checks penal < limit before adding alpha; checking the sum keeps every
            # host at or below the limit for any alpha (identical when the limit is k alpha)
            if task.pair in unfit:
                return False
            if all(penalty.get(h, 0.0) + self.alpha <= penalty_limit + 1e-12 for h in task.pair):
                return True
            unfit.add(task.pair)
            return False

        def take(task: Task) -> None:
            chosen.append(task)
            for host in task.pair:
                penalty[host] = penalty.get(host, 0.0) + self.alpha

        if algorithm == 5:
            busy: set[Hashable] = {h for t in self._running.values() for h in t.pair}
            for head in waiting:
                if len(chosen) >= room:
                    break
                if not (head.pair & busy) and fits(head):
                    take(head)
                    busy |= head.pair
        for head in waiting:
            if len(chosen) >= room:
                break
            if head not in chosen and fits(head):
                take(head)
        for task in chosen:
            self._running[self._key(task)] = task
            for host in task.pair:
                self._load[host] += self.alpha
        self.last_selection = chosen
        return chosen

    # -- Algorithm 6 ----------------------------------------------------------------------------

    def complete(self, task: Task) -> list[Task]:
        """A running head finished: remove it and the members equal to it (they receive its
        result, and are returned); the next member becomes the row's head."""
        pair = self._key(task)
        if self._running.get(pair) is not task:
            raise SchedError(f"{task!r} is not running")
        del self._running[pair]
        for host in task.pair:
            self._load[host] -= self.alpha
            if self._load[host] <= 1e-12:
                del self._load[host]
        row = self._rows[pair]
        # equal = same pair (the row's) and same arguments; comparing cor with 1 would also
        # take approximate tasks when beta = 1
        served = [t for t in row[1:] if t.args == task.args]
        rest = [t for t in row[1:] if t.args != task.args]
        if rest:
            self._rows[pair] = rest
        else:
            del self._rows[pair]
        return served

    def discard(self, task: Task) -> bool:
        """Drop a waiting task (a removed job); False when it is not waiting here."""
        row = self._rows.get(self._key(task))
        if row is None or self._running.get(self._key(task)) is task:
            return False
        try:
            row.remove(task)
        except ValueError:
            return False
        if not row:
            del self._rows[self._key(task)]
        return True

    # -- inspection -------------------------------------------------------------------------------

    def rows(self) -> list[list[Task]]:
        """The matrix row by row (first column = heads)."""
        return [list(row) for row in self._rows.values()]

    def running(self) -> list[Task]:
        return list(self._running.values())

    def penalties(self) -> dict[Hashable, float]:
        """Penalty of every host touched by a running head."""
        return dict(self._load)

    def gain(self) -> float:
        """Equation 24 for the running heads: (k + sum of their rows' equal members) / k."""
        k = len(self._running)
        if k == 0:
            return 1.0
        # a row shares one host pair, so its members equal to the head are those with its args
        represented = sum(sum(1 for t in self._rows[p][1:] if t.args == head.args)
                          for p, head in self._running.items())
        return (k + represented) / k

    def wait_reason(self, task: Task, n: int, penalty_limit: float) -> str | None:
        """Why a waiting task is not running (None when it runs or is not here)."""
        row = self._rows.get(self._key(task))
        if row is None or self._running.get(self._key(task)) is task:
            return None
        head = self._running.get(self._key(task))
        if head is not None:
            kind = "equal task" if head.args == task.args else "same pair"
            return f"{kind} running ({head.id})"
        if row[0] is not task:
            return f"behind {row[0].id} on the same pair"
        full = [h for h in sorted(task.pair, key=str)
                if self._load.get(h, 0.0) + self.alpha > penalty_limit + 1e-12]
        if full:
            return f"host {full[0]} at penalty limit"
        if len(self._running) >= n:
            return "slots full"
        return "waiting for the next dispatch"

    def snapshot(self) -> dict[str, object]:
        """The matrix by host pair, the last selection, its confusion score and penalties."""
        def item(t: Task) -> dict[str, object]:
            return {"id": t.id, "src": str(t.src_host), "dest": str(t.dest_host),
                    "args": str(t.args), "running": self._running.get(self._key(t)) is t}

        return {
            "alpha": self.alpha, "beta": self.beta,
            "rows": [{"pair": " <-> ".join(sorted(str(h) for h in row[0].pair)),
                      "tasks": [item(t) for t in row]} for row in self._rows.values()],
            "last_selection": [item(t) for t in self.last_selection],
            "confusion": conf(self.last_selection, self.alpha, self.beta),
            "penalties": {str(h): v
                          for h, v in sorted(self._load.items(), key=lambda x: str(x[0]))},
            "gain": self.gain(),
        }

    def __len__(self) -> int:
        return sum(len(row) for row in self._rows.values())
