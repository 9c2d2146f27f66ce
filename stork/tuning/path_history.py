"""PURE: what the transfer log says of a path, as an online controller reads it.

The settings the path's history measured, pooled per setting (`measured_from_history`);
where a job starts (`prior_from_history`, or a probing optimizer's choice from the log
alone, `prior_from_optimizer`); and the halvings the shape of the rate refuses without a
try (`past_knee`, `lost_above`), which `stork.tuning.online.Climb` also asks of what its
own flow measured; and what the history says of a climb's neighbour (`history_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np

from stork.dataset.chunks import SizeClass, size_class
from stork.transfer.worker import Setting
from stork.translog import COMPLETED, TransferRecord
from stork.tuning.base import DatasetDescription, Limits, Optimizer, ProbeResult
from stork.tuning.loads import Loads
from stork.tuning.moves import halving_order
from stork.tuning.verdicts import (
    AXES,
    MAX_WINDOWS,
    MIN_GAIN,
    NOISE_PRIOR,
    WINDOW_S,
    WINDOWS,
    Measured,
    Verdict,
    Z,
    against_best,
    judge,
    neighbour,
    no_room,
    pooled,
    pooled_noise,
    settled,
    streams,
)

HISTORY_MIN_S = 3.0  # a transfer log row shorter than this says little of its setting
SIZE_NEAR = 2.0  # rows of files within this factor of the job's own (`measured_from_history`)
KNEE_GAIN = 0.025  # a doubling that gained this much puts a halving past the knee
# (`past_knee`; chosen on the (cc, p, pp) grids of ../shared/data by `bench/bench_layout.py`)


def measured_from_history(history: Iterable[TransferRecord], *, src_host: str | None,
                          dest_host: str | None, cls: SizeClass, bdp_bytes: float, load: int,
                          limits: Limits, file_bytes: float | None = None,
                          near_only: bool = False) -> dict[Setting, Measured]:
    """What the transfer log knows of each setting on this path for this size class, pooled
    (`pooled`): of files within `SIZE_NEAR` times the job's mean `file_bytes` either way
    when there are such rows (with `near_only`, only those), and of those the rows at the
    same known load when there are any; a host of None: any. A row counts as its
    `duration_s` in WINDOW_S windows with its spread (a row without one, a whole transfer,
    as one window at its mean).

    A size class is wide (small files are anything under one BDP), and what a file needs
    changes inside it: on the Stampede->Gordon grids of ../shared/data (40 ms, 10 Gbps,
    small below 50 MB) files of 3.1 MB moved best at p 1 and pipelining 16, files of 23.6
    MB at p 8 and pipelining 2-8. Pooled over the class, a job of 3.1 MB files started
    at the 23.6 MB files' p 4 pp 4 and, small files climbing cc alone, held it at 0.49-0.86
    of the best cell (docs/BENCHMARKS.md 15.30). The factor is a doubling either way, not
    chosen on those grids."""
    rows = [r for r in history
            if (src_host is None or r.src_host == src_host)
            and (dest_host is None or r.dest_host == dest_host)
            and r.outcome == COMPLETED and r.duration_s >= HISTORY_MIN_S
            and r.throughput_mbps > 0
            and size_class(round(r.file_size_bytes), bdp_bytes) is cls]
    if file_bytes:
        rows = [r for r in rows if file_bytes / SIZE_NEAR <= r.file_size_bytes
                <= file_bytes * SIZE_NEAR] or ([] if near_only else rows)
    rows = [r for r in rows if r.sharing == load] or rows
    jobs: dict[Hashable, dict[Setting, list[Measured]]] = {}
    for i, r in enumerate(rows):
        setting = Setting(r.cc, r.p, r.pp)
        if setting.cc <= limits.max_cc and setting.p <= limits.max_p \
                and streams(setting) <= limits.max_streams:
            windows = max(int(r.duration_s / WINDOW_S), 1) if r.spread_mbps is not None else 1
            job = jobs.setdefault(("job", r.job_id) if r.job_id is not None else ("row", i), {})
            job.setdefault(setting, []).append(
                Measured(setting, r.throughput_mbps, r.spread_mbps or 0.0, windows))
    return pooled_jobs([{s: m for s, ms in job.items() if (m := pooled(s, ms)) is not None}
                        for job in jobs.values()])


def pooled_jobs(jobs: Sequence[Mapping[Setting, Measured]]) -> dict[Setting, Measured]:
    """What several jobs measured on a path, per setting, on one level (`job_levels`):
    each job's windows divided by its level, then pooled (`pooled`)."""
    parts: dict[Setting, list[Measured]] = {}
    for job, level in zip(jobs, job_levels(jobs), strict=True):
        for s, m in job.items():
            parts.setdefault(s, []).append(
                Measured(s, m.mean / level, m.stdev / level, m.count))
    out = {s: pooled(s, ms) for s, ms in parts.items()}
    return {s: m for s, m in out.items() if m is not None}


def job_levels(jobs: Sequence[Mapping[Setting, Measured]]) -> list[float]:
    """Each job's level on its path: the factor its rates ran at, the settings aside. A
    flow's rate moves with its files, its time and the other traffic as much as with its
    setting, so settings measured by different jobs differ by both, and pooled as they
    are a history compares settings no job compared (on the parallelism curves of
    ../shared/data, each file's flow the next one's history, this moved the climb from
    0.660 to 0.664 of the best on BTData and from 0.842 to 0.851 on SGData: small there,
    docs/BENCHMARKS.md 15.51). Fitted as log rate = level of the job + effect of the
    setting, least squares weighted by windows, over the jobs that measured two settings
    or more, the levels of each group of jobs linked by the settings they share averaging 1
    (geometric mean); the levels of the other jobs cannot be told apart from their one
    setting's effect, and are 1."""
    levels = [1.0] * len(jobs)
    multi = [i for i, job in enumerate(jobs) if len(job) >= 2
             and all(m.mean > 0 for m in job.values())]
    for group in _linked(multi, jobs):
        settings = sorted({s for i in group for s in jobs[i]},
                          key=lambda s: (s.cc, s.p, s.pp))
        column = {s: len(group) + k for k, s in enumerate(settings)}
        rows, values, weights = [], [], []
        for g, i in enumerate(group):
            for s, m in jobs[i].items():
                row = np.zeros(len(group) + len(settings))
                row[g], row[column[s]] = 1.0, 1.0
                rows.append(row)
                values.append(math.log(m.mean))
                weights.append(math.sqrt(m.count))
        row = np.zeros(len(group) + len(settings))  # the levels' logs sum to 0
        row[:len(group)] = 1.0
        rows.append(row)
        values.append(0.0)
        weights.append(1.0)
        w = np.array(weights)
        fit, *_ = np.linalg.lstsq(np.array(rows) * w[:, None], np.array(values) * w,
                                  rcond=None)
        for g, i in enumerate(group):
            levels[i] = math.exp(float(fit[g]))
    return levels


def _linked(indexes: Sequence[int], jobs: Sequence[Mapping[Setting, Measured]]
            ) -> list[list[int]]:
    """`indexes` of `jobs` in groups linked by a setting two of them measured."""
    groups: list[tuple[set[Setting], list[int]]] = []
    for i in indexes:
        settings, members = set(jobs[i]), [i]
        for group in [g for g in groups if g[0] & settings]:
            groups.remove(group)
            settings |= group[0]
            members = group[1] + members
        groups.append((settings, members))
    return [sorted(members) for _, members in groups]


def prior_from_history(known: Mapping[Setting, Measured], preset: Setting, *,
                       limits: Limits | None = None, axes: Sequence[str] = (),
                       windows: int = WINDOWS, max_windows: int = MAX_WINDOWS,
                       min_gain: float = MIN_GAIN, alike_axes: bool = False,
                       ceiling_mbps: float | None = None, halve: bool = True,
                       whose: str = "the path's history") -> tuple[Setting, str]:
    """Where to start: of the settings the path's history measured (`measured_from_history`;
    `whose` says whose history it is)
    the fewest streams within `min_gain` of the best, else `preset`; with why. Each setting
    is ranked by what it surely makes (`_lower`: its mean less `Z` standard errors), not by
    its mean: of many settings each seen a few times, the highest mean is the luckiest as
    often as the best (on the grids of ../shared/data, where a table's datasets are each
    other's history, the prior by the mean chose cc 8 p 32 pp 32 for the 1 GiB files from
    12 windows at 4538 ± 2212 Mbit/s, 0.44 of the best cell; docs/BENCHMARKS.md 13.5).
    A setting the climb would refuse against the best-ranked one (`settled`: a loss past
    `min_gain`, on the point estimate once measured over `max_windows`) is not chosen
    however close its bound: its own noise pulls the bound of the best down as much as its
    own (on wan40 a job refused cc 4 p 4 at -6.2% over 8 windows, and the next job started
    from it; docs/BENCHMARKS.md 15.25).

    With `axes` (and `limits`), a halving of that setting along the first of them (in
    `halving_order`: p first unless `alike_axes`) that the
    history has not measured over `windows` windows is where the job starts instead: the
    climb judges it as a try against the history's measurement of that setting. A
    job too short to judge a halving in its middle (the tail rule) can still measure one at
    its start, so the path's next jobs know whether fewer streams would do; each job on the
    path measures at most one setting it has not. With `alike_axes` (large files, see
    `stork.tuning.online`) no halving is started at whose streams are no more than those
    of a setting the history shows losing to the chosen one (`judge` refuses it).
    A job may start at a doubling of the chosen setting instead, along the first axis that
    the history has not measured, where the link's rate (`ceiling_mbps`, when known)
    leaves room for it to be kept (`no_room`) and the history measured no setting of as
    many streams or more (such a setting was not chosen, so it made no more than
    `min_gain` above the choice, and the rate rises with streams ever more slowly up to
    the knee and is flat past it): a doubling the climb tries in a job too short to judge
    it never reaches the history (on wan80 each of the default dataset's 25-s jobs tried
    cc 64 from cc 32 at 12 s and ended in the try, where the fixed runs held 280-295
    Mbit/s in most seconds at cc 64 and 204-286 at cc 32: docs/BENCHMARKS.md 15.34, run
    W80), so the path would hold the setting below its best for good. Where the link's
    rate is known and leaves that room, the doubling comes first, as in the climb: a flow
    short of the link by more than a doubling must gain has not shown that it has streams
    to spare, and below the knee the rate rises with streams (on the grids of
    ../shared/data, whose flows are far below their links' 10 Gbit/s, a halving of a cell
    kept its rate within 5% in 31% of 5184 cells and made 0.851 of it on average, a
    doubling gained more than 5% in 68% and made 1.260; on wan80 a start at half of cc 32
    lost 38.6%: docs/BENCHMARKS.md 15.35, run W80); the halving is tried by a later job,
    once the doubling is measured. Where the link's rate is not known, or leaves no room,
    halvings first: of two settings within `min_gain` the fewer streams win. Without
    `halve` no halving is started at, only a doubling (where the link, when its rate is
    known, leaves room): for a flow that holds its start to its end (`untuned_setting`)."""
    if not known:
        return preset, (f"no transfer of this size class on this path in the log: the "
                        f"preset {preset.label()}")
    share = pooled_noise(known.values())
    bound = {s: _lower(m, share) for s, m in known.items()}
    best = max(bound.values())
    top = max(known.values(), key=lambda m: bound[m.setting])

    def refused(ref: Measured, m: Measured) -> bool:
        return m is not ref and settled(ref, m, min_gain=min_gain, z=Z,
                                        max_windows=max_windows)[0] is Verdict.REFUSED

    near = [m for m in known.values()
            if bound[m.setting] >= best * (1 - min_gain) and not refused(top, m)]
    chosen = min(near, key=lambda m: (streams(m.setting), -bound[m.setting]))
    why = (f"{whose} ({len(known)} settings measured): {chosen.label()} over "
           f"{chosen.count} windows, at least {bound[chosen.setting]:.1f} Mbit/s: the fewest "
           f"streams within {min_gain:.0%} of the best such bound, {best:.1f} Mbit/s")
    too_few = max((streams(m.setting) for m in known.values() if alike_axes
                   and streams(m.setting) < streams(chosen.setting) and m.count >= windows
                   and refused(chosen, m)),
                  default=0)

    def doubled(why: str) -> tuple[Setting | None, str]:
        """The first doubling of the choice to start at (see above), else None; with why
        the others are not."""
        for axis in axes:
            assert limits is not None, "a doubling is bounded by the limits"
            more = neighbour(chosen.setting, axis, True, limits)
            if more is None or (more in known and known[more].count >= windows):
                continue
            if (full := no_room(chosen, more, ceiling_mbps, min_gain=min_gain, z=Z,
                                max_windows=max_windows)):
                why += f"; not starting at {more.label()}: {full}"
                continue
            wider = [m for m in known.values() if streams(m.setting) >= streams(more)
                     and m.count >= windows]
            if wider:  # (measured and not chosen: not `min_gain` better than the choice)
                why += (f"; not starting at {more.label()}: as many streams or more "
                        f"already measured, {wider[0].setting.label()}")
                continue
            return more, (f"{why}; starting at {more.label()}, twice its {axis}, which "
                          f"the history has not measured")
        return None, why

    if ceiling_mbps is not None:  # the link leaves room for more: more streams first
        more, why = doubled(why)
        if more is not None:
            return more, why
    for axis in halving_order(axes, alike_axes) if halve else ():
        assert limits is not None, "a halving is bounded by the limits"
        fewer = neighbour(chosen.setting, axis, False, limits)
        if fewer is not None and streams(fewer) <= too_few:
            why += f"; not starting at {fewer.label()}: {too_few} streams already lost"
            continue
        if fewer is not None and (knee := past_knee(chosen, known, axis, limits,
                                                    alike=alike_axes, windows=windows)):
            why += f"; not starting at {fewer.label()}: {knee}"
            continue
        if fewer is not None and (above := lost_above(chosen.setting, known, axis, limits,
                                                      min_gain=min_gain, windows=windows)):
            why += f"; not starting at {fewer.label()}: {above}"
            continue
        if fewer is not None and (fewer not in known or known[fewer].count < windows):
            return fewer, (f"{why}; starting at {fewer.label()}, half its {axis}, which the "
                           f"history has not measured")
    if ceiling_mbps is None:  # nothing fewer to measure: twice the streams
        more, why = doubled(why)
        if more is not None:
            return more, why
    return chosen.setting, why


def moved_start(prior: Setting, known: Mapping[Setting, Measured], axes: Sequence[str],
                limits: Limits, windows: int) -> tuple[str, bool, Setting] | None:
    """The axis along which `prior` halves (or else doubles: up) a setting the history
    (`known`) measured over `windows` windows, and that setting, when the history has not
    measured the prior itself (where `prior_from_history` starts a job on a known path),
    else None. A climb's start is then a try of that move against the history's
    measurement of the setting it came from (`stork.tuning.online`). A halving kept, the
    climb halves on and then tries the other axes halving first (not doubling first,
    which would try twice the streams of a setting the path's history already holds
    enough); a doubling kept, it doubles on; refused, it goes back to that setting and
    measures it again."""
    here = known.get(prior)
    if here is not None and here.count >= windows:
        return None
    for up in (False, True):
        for axis in axes:  # (a halving of p 3 is p 1, whose doubling is p 2)
            came = [m for s, m in known.items() if m.count >= windows
                    and neighbour(s, axis, up, limits) == prior]
            if came:  # (p 2 and p 3 both halve to p 1: the faster is the reference)
                return axis, up, max(came, key=lambda m: m.mean).setting
    return None


def history_verdict(reference: Measured | None, known: Mapping[Setting, Measured],
                    setting: Setting, *, ref_known: bool, loads: Loads, windows: int,
                    min_gain: float, z: float, max_windows: int,
                    best: Measured | None = None) -> tuple[Verdict, str]:
    """What the path's history (`known`) says of a climb's neighbour `setting` against its
    `reference`: the verdict of `judge` on its pooled windows (OPEN when it knows too
    little), against the reference's windows now and, unless the reference holds them
    already (`ref_known`), the history's of its setting, pooled (a load that changed
    between the two counts as noise, not as a gain); and with as many windows as a try may
    take (`max_windows`) an open one decided as a try's would be (the fewer streams win),
    unless the history's windows of `setting` spread more than `drift_z` times the path's
    noise (`loads`), and at least `NOISE_PRIOR`: a history pooled over datasets or loads
    that far apart decides nothing the flow can measure itself, and the neighbour is tried
    (on the grids of ../shared/data the 1.074 GB files of Stampede->Gordon held cc 8 p 32
    at 0.74 of the best cell, the other datasets' cc 16 p 32 passed over at +0.3% with
    windows spread 46%; docs/BENCHMARKS.md 15.34). The floor keeps a quiet path from trying
    again what its last job left open after `max_windows` (on wan40 cc 4 p 4 at -5.1%, its
    windows spread 10.2% against the start's 0.4%: 15.34's run D64). A neighbour of fewer
    streams keeps within `min_gain` of `best` too (`against_best`)."""
    measured = known.get(setting)
    if measured is None or measured.count < windows or reference is None:
        return Verdict.OPEN, ""
    ref = reference
    then = None if ref_known else known.get(ref.setting)
    if then is not None:  # the reference then and now: a load that moved is noise
        ref = pooled(ref.setting, [ref, then]) or ref
    verdict, why, _ = judge(ref, measured, min_gain=min_gain, z=z)
    if verdict is Verdict.OPEN and not loads.steady(measured, floor=NOISE_PRIOR):
        return verdict, why  # too noisy to decide
    verdict, why, figures = settled(ref, measured, min_gain=min_gain, z=z,
                                    max_windows=max_windows)
    verdict, why, _ = against_best(verdict, why, figures, ref, best, measured,
                                   min_gain=min_gain, z=z, max_windows=max_windows)
    return verdict, why


def lost_above(setting: Setting, known: Mapping[Setting, Measured], axis: str,
               limits: Limits, *, min_gain: float, windows: int) -> str:
    """Why halving `setting` along `axis` would lose past `min_gain` without a try, or "":
    the history measured that halving from a setting with the same `axis` and as much of
    the other axis or more, and it lost more than `min_gain` (point estimates, each over
    `windows` windows or more). With fewer streams on the other axis, each step of `axis`
    carries more of the rate, so the halving loses more: on the (cc, p, pp) grids of
    ../shared/data, after such a loss the halving below it lost more than 5% in 88-89% of
    the cases along cc and 81-89% along p for medium and large files (99% along cc for
    small ones), against 22-35% where the halving above kept within 5%
    (`bench/bench_layout.py`)."""
    other = "p" if axis == "cc" else "cc"
    for s, m in known.items():
        if getattr(s, axis) != getattr(setting, axis) \
                or getattr(s, other) < getattr(setting, other) or m.count < windows:
            continue
        half = neighbour(s, axis, False, limits)
        h = known.get(half) if half is not None else None
        if h is not None and h.count >= windows and m.mean > 0 \
                and h.mean / m.mean - 1 < -min_gain:
            return (f"halving {axis} lost {h.mean / m.mean - 1:+.1%} already at "
                    f"{s.label()} ({h.label()}), with as many streams on {other} or more")
    return ""


def past_knee(ref: Measured, known: Mapping[Setting, Measured], axis: str, limits: Limits,
              *, alike: bool, windows: int) -> str:
    """Why halving `ref`'s setting along `axis` would lose past `MIN_GAIN` without a try,
    or "": a doubling of it (along `axis`; with `alike`, large files, along either, as both
    add whole streams) measured over `windows` windows or more made `KNEE_GAIN` more than
    it (the point estimates). The rate rises with streams ever more slowly up to the knee,
    so a doubling that still gained puts the setting at the knee or below it, where half
    its streams lose more: on the (cc, p, pp) grids of ../shared/data, after a doubling
    that gained 2.5% or more the halving lost more than 5% in 90% of the cases for large
    files (79% along the other axis), 92% for medium and 79% for small ones, against
    22-71% after one that gained less (`bench/bench_layout.py`)."""
    if ref.mean <= 0:
        return ""
    for a in (AXES if alike else (axis,)):
        up = neighbour(ref.setting, a, True, limits)
        m = known.get(up) if up is not None else None
        if m is not None and m.count >= windows and m.mean / ref.mean - 1 >= KNEE_GAIN:
            return (f"past the knee: twice the streams, {m.label()}, made "
                    f"{m.mean / ref.mean - 1:+.1%} of {ref.setting.label()}'s "
                    f"{ref.mean:.1f}, {KNEE_GAIN:.1%} or more")
    return ""


def _lower(m: Measured, share: float) -> float:
    """What `m`'s setting surely makes: its mean less Z standard errors (its own spread, or
    the history's `share` of its mean when that is wider: one lucky row is not a rate)."""
    return m.mean - Z * max(m.stdev, share * m.mean) / math.sqrt(m.count)


def prior_from_optimizer(optimizer: Optimizer, history: Sequence[TransferRecord],
                         dataset: DatasetDescription, limits: Limits) -> tuple[Setting, str]:
    """A probing optimizer's choice from the transfer log alone, as a controller's prior:
    every probe it asks for is answered as sending nothing (`ProbeResult.empty`), so it
    stops probing and decides from its history (HARP's surfaces, ASM's cluster for the
    load); with why. `history` oldest first."""
    decision = optimizer.optimize(history, dataset, limits,
                                  lambda params, size_bytes: ProbeResult(params, 0.0))
    p = decision.params
    return Setting(p.cc, p.p, p.pp), (f"{optimizer.name}'s choice from the transfer log: "
                                      f"{decision.reason}")
