"""PURE: the order of the moves a climb has left to try (`stork.tuning.online.Climb`).

A move is an axis and a way, `(axis, up)`: `("cc", True)` doubles cc, `("p", False)` halves
p. A climb starts with every move of its axes, each axis doubling first, the halvings in
`halving_order`. Both axes multiply the same streams (cc x p), so what one move showed
orders the others:
- a move kept goes on the same way, and the axes still to try start that way too (`went`:
  once halving one axis kept the rate, doubling the other first would ask for twice the
  streams of a setting just shown to be more than enough);
- a move refused leaves what is left of its axis first, then turns the other axes the other
  way first (`turned`: once twice the streams along one axis bought nothing, twice along the
  other would ask for the same count; once half lost the rate, so would half along the
  other), as does a start that halves a setting the history holds (`moved_start`);
- the halvings keep `halving_order` among themselves wherever they stand (`in_halving_order`).
"""

from __future__ import annotations

from collections.abc import Sequence

Move = tuple[str, bool]  # an axis, and up (doubling) or down (halving)


def halving_order(axes: Sequence[str], alike: bool) -> tuple[str, ...]:
    """The order in which a climb halves `axes` (it doubles them in their own order): as
    given for large files (`alike`, see `stork.tuning.online`), p first for the others. A
    file within a few bandwidth-delay products gains little from being split among streams,
    while the files in flight keep the pipe full between files: on the (cc, p, pp) grids of
    ../shared/data, from cells within 80% of their dataset's best with cc and p at 2 or
    more, halving p kept the rate within 5% in 76% of 54 cells of small files and made
    0.987 of it on average, halving cc in none (0.769); of 12 cells of medium files, p in
    17% (0.822), cc in none (0.787); for large files the two were alike (p 40%, 0.918; cc
    46%, 0.829; `bench/bench_layout.py`). On the testbed, halving p kept the rate where
    halving cc lost 11% (`short`, cc 4 p 4) and 25% (lan10, cc 8 p 2):
    docs/BENCHMARKS.md 15.36 and 15.37."""
    if alike:
        return tuple(axes)
    return tuple(sorted(axes, key=lambda axis: axis != "p"))


def in_halving_order(todo: Sequence[Move], halving: Sequence[str]) -> list[Move]:
    """`todo` with its halvings in `halving` order, each in the place of one of them (p
    before cc for small and medium files: `halving_order`), the doublings where they were."""
    downs = iter(sorted((m for m in todo if not m[1]), key=lambda m: halving.index(m[0])))
    return [m if m[1] else next(downs) for m in todo]


def went(todo: Sequence[Move], axis: str, up: bool, axes: Sequence[str]) -> list[Move]:
    """After a move along `axis` was kept: the same move again, then the other axes, each
    the same way first (see the module)."""
    rest = sorted((m for m in todo if m[0] != axis),
                  key=lambda m: (axes.index(m[0]), m[1] != up))
    return [(axis, up), *rest]


def turned(todo: Sequence[Move], axis: str, up: bool, axes: Sequence[str],
           halving: Sequence[str]) -> list[Move]:
    """After a move along `axis` was refused: what is left of `axis` first, then the other
    axes the other way than `up` first, the halvings in `halving` order (for small and
    medium files, after a refused doubling of cc, half the p comes before half the cc; see
    the module)."""
    same = [m for m in todo if m[0] == axis]
    rest = sorted((m for m in todo if m[0] != axis),
                  key=lambda m: (axes.index(m[0]), m[1] == up))
    return in_halving_order(same + rest, halving)
