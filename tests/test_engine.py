"""The transfer engine: items, the measured flow, and workers kept busy while the setting
changes, against a real GridFTP server."""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from stork.engine import Assembly, Engine, Flow, Taken, piece_bytes, plan_items, range_bytes, split
from stork.engine.engine import CUT_GAIN, LIST_MIN_BYTES, STAGGER, range_cut
from stork.engine.flow import SERIES_LAG_S, Stretch, series_flow
from stork.engine.items import RANGE_FLOOR_BYTES, gaps, guided, merged
from stork.engine.series import series
from stork.server.flow_report import stretch_records
from stork.transfer.gfal_worker import GfalWorker
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.remote import helper_available
from stork.transfer.worker import (
    FileWork,
    Item,
    ItemResult,
    Marks,
    Report,
    Setting,
    Worker,
    WorkerContext,
    cut_short,
)
from tests.support import GridFtpServer, make_file, md5, wait_for

MB = 1 << 20
S1 = Setting(1, 1, 1)


# -- items (pure) -------------------------------------------------------------------------

def test_ranges_are_many_bdps_and_at_least_the_floor() -> None:
    assert range_bytes(0) == RANGE_FLOOR_BYTES
    assert range_bytes(10 * MB) == 160 * MB  # 16 BDPs of 10 MiB
    assert range_bytes(10e6) == 153 * MB  # 160e6 bytes, rounded up to a whole MiB
    assert range_bytes(1.5 * MB, floor_bytes=MB) == 24 * MB
    assert piece_bytes(0, 16) == 16 * MB and piece_bytes(2 * MB, 16) == 32 * MB
    assert piece_bytes(2 * MB, 0) == 0  # STORK_PIECE_MIN_MB = 0: never cut


def test_a_file_is_split_only_when_it_holds_two_ranges() -> None:
    small = FileWork(0, "ftp://h/a", "file:///a", 2 * MB - 1)
    assert split(small, MB) == [Item(small)]
    big = FileWork(1, "ftp://h/b", "file:///b", 5 * MB + 3)
    items = split(big, 2 * MB)
    assert [(i.offset, i.length) for i in items] == [(0, 2 * MB), (2 * MB, 2 * MB),
                                                     (4 * MB, MB + 3)]
    assert sum(i.size_bytes for i in items) == big.size_bytes
    unknown = FileWork(2, "ftp://h/c", "file:///c", None)
    assert split(unknown, MB) == [Item(unknown)]


def test_what_landed_before_is_not_planned_and_assembly_says_when_a_file_is_whole() -> None:
    """A resumed file sends its gaps only (in ranges of at most the range size), whatever
    the pieces that landed: half a range landed is not sent again."""
    big = FileWork(7, "ftp://h/b", "file:///b", 4 * MB)
    other = FileWork(8, "ftp://h/o", "file:///o", 10)
    done = {7: [(0, MB), (2 * MB, 2 * MB + MB // 2)]}  # half of the third range
    items = plan_items([big, other], MB, done)
    assert [(i.file.index, i.offset, i.length) for i in items] == [
        (7, MB, MB), (7, 2 * MB + MB // 2, MB), (7, 3 * MB + MB // 2, MB // 2), (8, 0, None)]
    assembly = Assembly.of(items, done)
    assert assembly.bytes_landed(7) == MB + MB // 2
    assert [assembly.land(i) for i in items] == [False, False, True, True]
    assert assembly.spans(7) == [(0, 4 * MB)] and assembly.bytes_landed(7) == 4 * MB
    assert merged([(5, 9), (0, 2), (2, 4), (8, 12), (20, 20)]) == [(0, 4), (5, 12)]
    # a file planned whole whose pieces landed (cut at the end of a queue) sends its gaps
    cut = FileWork(9, "ftp://h/c", "file:///c", 3 * MB)
    assert [(i.offset, i.length) for i in plan_items([cut], 0, {9: [(MB, 3 * MB)]})] == [
        (0, MB)]
    assert gaps([(MB, 2 * MB), (3 * MB, 4 * MB)], 0, 5 * MB) == [
        (0, MB), (2 * MB, 3 * MB), (4 * MB, 5 * MB)]
    assert gaps([(0, 5 * MB)], 0, 5 * MB) == []


def test_guided_cuts_an_item_to_its_share_of_the_bytes_queued() -> None:
    """An item larger than the bytes queued over the workers gives its first share (at
    least the floor, whole MiB) and its rest; one smaller, or whose rest would be under
    the floor, is taken whole; a range's pieces keep its offsets."""
    f = FileWork(0, "ftp://h/f", "file:///f", 64 * MB)
    whole = Item(f)
    assert guided(whole, 20 * 64 * MB, 4, 16 * MB) == (whole, None)  # the middle of a queue
    assert guided(whole, 128 * MB, 4, 16 * MB) == (Item(f, 0, 32 * MB), Item(f, 32 * MB,
                                                                                32 * MB))
    assert guided(whole, 64 * MB, 8, 16 * MB) == (Item(f, 0, 16 * MB), Item(f, 16 * MB,
                                                                                48 * MB))
    assert guided(whole, 3 * 64 * MB, 4, 17 * MB) == (whole, None)  # a rest of 16 < 17
    part = Item(f, 32 * MB, 32 * MB)
    assert guided(part, 40 * MB, 4, 8 * MB) == (Item(f, 32 * MB, 10 * MB),
                                                Item(f, 42 * MB, 22 * MB))
    assert guided(whole, 64 * MB, 8, 0) == (whole, None)  # floor 0: never cut
    unknown = Item(FileWork(1, "ftp://h/u", "file:///u", None))
    assert guided(unknown, 64 * MB, 8, MB) == (unknown, None)


# -- the flow (pure) ------------------------------------------------------------------------

def test_reports_are_spread_over_their_interval_into_windows() -> None:
    flow = Flow(100.0, S1, window_s=1.0)
    flow.add(100.0, 102.0, 2_000_000)  # 8 Mbit/s over two windows
    flow.add(102.0, 102.5, 250_000)
    flow.tick(104.0)  # a quiet second is a window at 0
    rates = [round(w.rate_mbps, 3) for w in flow.windows()]
    assert rates == [8.0, 8.0, 2.0, 0.0]
    assert flow.total_bytes == 2_250_000


def test_a_change_of_setting_or_load_ends_the_window_and_the_stretch() -> None:
    flow = Flow(0.0, S1, window_s=1.0)
    for t in range(4):
        flow.add(t, t + 1, 1_000_000 + 250_000 * (t % 2))  # 8 and 10 Mbit/s in turn
    fast = Setting(4, 2, 1)
    flow.set(4.5, fast)
    flow.add(4.5, 6.5, 8_000_000)
    flow.set_load(6.5, 2)
    flow.add(6.5, 7.5, 1_000_000)
    first, second, third = flow.stretches(7.5)
    assert first.setting == S1 and first.windows == 4 and first.seconds == 4.5
    assert first.mean_mbps == pytest.approx(36 / 4.5)  # the half window at 0 counts
    assert first.stdev_mbps == pytest.approx(1.1547, abs=1e-3)  # of 8, 10, 8, 10
    assert second.setting == fast and second.load == 0 and second.mean_mbps == 32.0
    assert third.load == 2 and third.mean_mbps == 8.0
    flow.add(7.5, 7.75, 500_000)  # the window still open counts in the stretch as it stands
    assert flow.stretches(7.75)[-1].bytes == 1_500_000
    assert sum(s.bytes for s in flow.stretches(7.75)) == flow.total_bytes
    assert {w.setting for w in flow.windows(since_s=4.5)} == {fast}


def test_a_late_report_lands_in_the_windows_it_moved_in_until_they_are_final() -> None:
    """A list call says its bytes when it ends: with a lag the windows it spanned get them
    (and are read only once final); without one they all land in the open window."""
    late = Flow(0.0, S1, window_s=1.0, lag_s=5.0)
    late.add(0.0, 4.0, 4_000_000)  # 8 Mbit/s for 4 s, told at 4 s
    late.tick(4.5)
    assert late.windows() == []  # nothing final yet
    late.add(1.0, 4.5, 3_500_000)  # another call, from 1 s to 4.5 s
    late.tick(10.0)
    assert [round(w.rate_mbps, 3) for w in late.windows()] == [8.0, 16.0, 16.0, 16.0, 4.0]
    assert late.stretches(10.0)[0].bytes == late.total_bytes == 7_500_000
    now = Flow(0.0, S1, window_s=1.0)
    now.add(0.0, 1.0, 1_000_000)
    now.tick(3.0)
    now.add(0.0, 3.0, 3_000_000)  # told late: its first two seconds are in closed windows
    now.tick(4.0)
    assert [round(w.rate_mbps, 3) for w in now.windows()] == [8.0, 0.0, 0.0, 24.0]
    with pytest.raises(ValueError, match="lag_s"):
        Flow(0.0, S1, lag_s=-1.0)
    # an engine's flow: final when every call has told its bytes (`settle`), not by a lag
    told = Flow(0.0, S1, window_s=1.0, lag_s=math.inf)
    told.add(0.0, 3.0, 3_000_000)
    told.tick(6.0)
    assert told.windows() == []
    told.settle(2.0)
    assert [w.rate_mbps for w in told.windows()] == [8.0, 8.0]


def test_a_jobs_series_spreads_third_party_markers_over_the_windows_they_moved_in() -> None:
    """Calls that tell their bytes every 5 s (a GridFTP third-party transfer's performance
    markers), each at 100 Mbit/s: the job's series reads 300 Mbit/s in every window, where
    a series with no lag read bursts and empty seconds."""
    def fed(flow: Flow) -> list[float]:
        reports = []  # (told at, since): each call's markers, 5 s apart from its own phase
        for phase in (0.7, 2.4, 4.1):
            marks = [0.0, *(phase + 5.0 * k for k in range(8))]
            reports += list(zip(marks[1:], marks[:-1], strict=True))
        for t, since in sorted(reports):
            flow.add(since, t, 100e6 / 8 * (t - since))
        flow.tick(60.0)
        return [w.rate_mbps for w in flow.windows() if 5.0 <= w.start_s < 35.0]

    spread = fed(series_flow(0.0))
    assert len(spread) == 30 and all(w == pytest.approx(300.0) for w in spread), spread
    lumpy = fed(Flow(0.0))
    assert max(lumpy) > 400.0 and min(lumpy) <= 100.0  # what a job showed before
    assert SERIES_LAG_S > 5.0


def test_the_flow_keeps_a_bounded_series() -> None:
    flow = Flow(0.0, S1, window_s=1.0, keep=10)
    flow.add(0.0, 100.0, 100_000_000)
    assert len(flow.windows()) == 10
    assert flow.stretches()[0].windows == 100  # the stretch still counts them all


def test_the_series_a_job_keeps_is_its_last_windows_in_wall_time() -> None:
    flow = Flow(50.0, S1, window_s=1.0)
    flow.add(50.0, 52.0, 2_000_000)  # 8 Mbit/s for two windows
    flow.set(52.5, Setting(2, 1, 1))  # a change closes a window early
    flow.add(52.5, 54.5, 1_000_000)
    flow.tick(55.0)
    kept = series(flow.windows(), mono_s=60.0, wall_s=1000.0, points=4)
    assert kept["start_time"] == 1000.0 - (60.0 - 51.0)  # the last four windows: from 51
    assert kept["t"] == [0.0, 1.0, 1.5, 2.5]
    assert kept["mbps"] == [8.0, 0.0, 4.0, 4.0]
    assert series([], mono_s=1.0, wall_s=9.0) == {"start_time": 9.0, "t": [], "mbps": []}


def test_markers_of_a_list_call_count_each_file_from_zero() -> None:
    said: list[tuple[float, float, int]] = []
    marks = Marks(0.0)
    marks.reach(300, 1.0, lambda *a: said.append(a))  # the first file
    marks.reach(500, 2.0, lambda *a: said.append(a))
    marks.reach(100, 3.0, lambda *a: said.append(a))  # the second file, counted from 0
    marks.total(1200, 4.0, lambda *a: said.append(a))  # both files' sizes by 4 s
    assert said == [(0.0, 1.0, 300), (1.0, 2.0, 200), (2.0, 3.0, 100), (3.0, 4.0, 600)]
    assert sum(n for *_, n in said) == 1200
    # at a call's end what no marker said moved over the whole call (small files end
    # between markers), not in the last second
    calls: list[tuple[float, float, int]] = []
    whole = Marks(10.0)
    whole.reach(100, 11.0, lambda *a: calls.append(a))
    whole.rest(4000, 14.0, lambda *a: calls.append(a))
    assert calls == [(10.0, 11.0, 100), (10.0, 14.0, 3900)]


def test_a_list_call_followed_file_by_file_tells_each_file_when_the_next_begins() -> None:
    said: list[tuple[float, float, int]] = []
    marks = Marks(0.0, [300, 300, 500, 400])
    marks.next_file(0.0, lambda *a: said.append(a))  # the first begins: nothing landed
    marks.reach(300, 1.0, lambda *a: said.append(a))  # its last marker
    marks.next_file(1.0, lambda *a: said.append(a))  # the second: the marker said the first
    marks.next_file(2.0, lambda *a: said.append(a))  # the third: the second landed unsaid
    marks.reach(900, 2.5, lambda *a: said.append(a))  # never past the current file's size
    marks.next_file(3.0, lambda *a: said.append(a))
    marks.reach(100, 3.5, lambda *a: said.append(a))  # the fourth counted from 0
    marks.rest(1500, 4.0, lambda *a: said.append(a))  # the end: its rest since 3.5 s
    assert said == [(0.0, 1.0, 300), (1.0, 2.0, 300), (2.0, 2.5, 500), (3.0, 3.5, 100),
                    (3.5, 4.0, 300)]


# -- the engine, through a worker of the test's own ------------------------------------------

def moved_one_by_one(items: Sequence[Item], each_s: float, report: Report) -> list[ItemResult]:
    """A test worker's call: each item takes `each_s` and is told as it lands; all done."""
    for item in items:
        t0 = time.monotonic()
        time.sleep(each_s)
        report(t0, time.monotonic(), item.size_bytes)
    return [ItemResult(i, True) for i in items]


class CountingWorker(Worker):
    """Answers each item after a short sleep, reporting its bytes: the engine's scheduling
    alone, with no tool (the tools' own workers are tested below, with a real server)."""

    takes_lists = True
    alive = 0
    most = 0
    lock = threading.Lock()

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        with CountingWorker.lock:
            CountingWorker.alive += 1
            CountingWorker.most = max(CountingWorker.most, CountingWorker.alive)

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        return moved_one_by_one(items, self.delay_s, report)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        with CountingWorker.lock:
            CountingWorker.alive -= 1


def test_cc_changes_start_and_retire_workers_and_no_item_is_sent_twice() -> None:
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 2 * MB) for i in range(240)]  # 2 a call
    answered: Counter[int] = Counter()
    engine = Engine([Item(f) for f in files], CountingWorker, Setting(2, 1, 1),
                    lambda _, rs: answered.update(r.item.file.index for r in rs), call_s=0.0)
    CountingWorker.most = 0
    runner = threading.Thread(target=engine.run)
    runner.start()
    wait_for(lambda: sum(answered.values()) >= 10, 10, what="items answered")
    assert engine.workers() <= 2
    engine.set(Setting(6, 2, 1))
    wait_for(lambda: engine.workers() == 6, 10, what="six workers")
    engine.set(Setting(1, 1, 1))
    wait_for(lambda: engine.workers() <= 1, 10, what="the workers above cc retired")
    runner.join(60)
    assert not runner.is_alive()
    assert answered == Counter(range(240))  # every item once
    assert CountingWorker.most == 6 and CountingWorker.alive == 0
    settings = {w.setting for w in engine.flow.windows()}
    assert Setting(6, 2, 1) in settings and Setting(1, 1, 1) in settings


def at_two_mib_a_worker(files: int) -> Engine:
    """An engine of `files` files of 1 MiB at cc 4 (`call_s` 4 s, not started) whose flow
    has moved 8 MiB/s for 5 s: 2 MiB/s a worker."""
    work = [FileWork(i, f"x://s/{i}", f"x://d/{i}", MB) for i in range(files)]
    engine = Engine([Item(f) for f in work], CountingWorker, Setting(4, 1, 1),
                    lambda *_: None, call_s=4.0, clock=lambda: 0.0)
    engine.flow.add(0.0, 5.0, 5 * 8 * MB)
    engine.tick(5.0)
    return engine


def test_after_a_rise_of_cc_the_new_workers_lists_hold_a_call_of_one_workers_rate() -> None:
    """The lists are sized from one worker's share of each window at that window's cc: the
    workers started by cc 4 -> 12 get about `call_s` seconds of what one worker moved at
    cc 4, not the old rate split twelve ways (the floor, and a session every second)."""
    engine = at_two_mib_a_worker(400)
    engine.set(Setting(12, 1, 1))
    taken, _ = engine._take(5, lists=True)  # slot 5: a worker the rise started
    assert taken is not None and taken.setting.cc == 12
    stagger = STAGGER[5 % len(STAGGER)]
    assert len(taken.items) == math.ceil(2 * 4.0 * stagger)  # 2 MiB/s x 4 s, staggered
    assert len(taken.items) * MB > LIST_MIN_BYTES


def test_while_cut_s_is_set_a_range_is_taken_as_a_piece_of_that_many_seconds() -> None:
    """A lower cc or a change of p waits for the calls in flight: while the tuning layer
    sets `cut_s`, a 64 MiB range is taken as a piece of `cut_s` seconds of a worker's
    recent rate (2 MiB/s x 8 s) to 1.5 times that by slot, the rest first in the
    queue for the next worker; never below `short_piece_bytes`; and whole when `cut_s` is
    None, or before any rate is known (the first wave, whose calls measure the start)."""
    f = FileWork(0, "x://s/0", "x://d/0", 256 * MB)
    ranges = split(f, 64 * MB)
    engine = Engine(ranges, CountingWorker, Setting(4, 1, 1), lambda *_: None,
                    short_piece_bytes=4 * MB, clock=lambda: 0.0)
    taken, rest = engine._take(0, lists=False)
    assert taken is not None and taken.items == (Item(f, 0, 64 * MB),)  # cut_s None: whole
    engine.cut_s = 8.0  # before any rate is known: whole
    assert [engine._guided(ranges[1], engine.setting, slot) for slot in range(4)] == \
        [(ranges[1], None)] * 4
    engine.flow.add(0.0, 5.0, 5 * 8 * MB)  # 8 MiB/s at cc 4: 2 MiB/s a worker
    engine.tick(5.0)
    taken, rest = engine._take(0, lists=False)  # slot 0: 2 MiB/s x 8 s
    assert taken is not None and taken.items == (Item(f, 64 * MB, 16 * MB),)
    assert rest == (Item(f, 64 * MB, 64 * MB), Item(f, 80 * MB, 48 * MB))
    assert engine._guided(ranges[2], engine.setting, 3)[0] == Item(f, 128 * MB, 24 * MB)
    engine.cut_s = 1.0  # 2 MiB at most: the floor's 4 MiB
    assert engine._guided(ranges[2], engine.setting, 3)[0] == Item(f, 128 * MB, 4 * MB)
    small = Engine(ranges, CountingWorker, Setting(4, 1, 1), lambda *_: None,
                   clock=lambda: 0.0)  # no short_piece_bytes: never cut so
    small.cut_s = 8.0
    small.flow.add(0.0, 5.0, 5 * 8 * MB)
    small.tick(5.0)
    assert small._guided(ranges[0], small.setting) == (ranges[0], None)


def test_at_the_end_of_the_queue_a_range_is_cut_to_a_call_of_a_workers_rate() -> None:
    """The end of the queue cuts to pieces of at least `piece_bytes` (16 BDPs of the path:
    48 MiB here, as on wan80), or of `call_s` seconds of a worker's recent rate when that
    is less (2 MiB/s x 4 s = 8 MiB, at least `short_piece_bytes`' 16 MiB): two 64 MiB
    ranges left for cc 4 go as 32 MiB pieces once a rate is known, whole before."""
    f = FileWork(0, "x://s/0", "x://d/0", 128 * MB)
    ranges = split(f, 64 * MB)
    engine = Engine(ranges, CountingWorker, Setting(4, 1, 1), lambda *_: None,
                    piece_bytes=48 * MB, short_piece_bytes=16 * MB, call_s=4.0,
                    clock=lambda: 0.0)
    assert engine._guided(ranges[0], engine.setting) == (ranges[0], None)  # no rate yet
    engine.flow.add(0.0, 5.0, 5 * 8 * MB)  # 8 MiB/s at cc 4: 2 MiB/s a worker
    engine.tick(5.0)
    taken, rest = engine._take(0, lists=False)
    assert taken is not None and taken.items == (Item(f, 0, 32 * MB),)
    assert rest == (ranges[0], Item(f, 32 * MB, 32 * MB))
    engine.call_s = 40.0  # 80 MiB a call: the path's 48 MiB floor, so 64 MiB goes whole
    assert engine._guided(ranges[1], engine.setting) == (ranges[1], None)
    whole = Engine(ranges, CountingWorker, Setting(4, 1, 1), lambda *_: None,
                   piece_bytes=48 * MB, clock=lambda: 0.0)  # no short_piece_bytes
    whole.flow.add(0.0, 5.0, 5 * 8 * MB)
    whole.tick(5.0)
    assert whole._guided(ranges[0], whole.setting) == (ranges[0], None)


def test_a_slow_workers_lists_hold_a_call_of_its_rate_not_a_floor() -> None:
    """At 0.5 MiB/s a worker (p 1 under a load), a list is `call_s` of that rate, 2 MiB
    staggered to 3: no floor of LIST_MIN_BYTES once the rate is known, which made such
    lists last 12-16 s and a change wait for them; before any rate, LIST_MIN_BYTES."""
    work = [FileWork(i, f"x://s/{i}", f"x://d/{i}", MB) for i in range(400)]
    engine = Engine([Item(f) for f in work], CountingWorker, Setting(4, 1, 1),
                    lambda *_: None, call_s=4.0, clock=lambda: 0.0)
    taken, _ = engine._take(3, lists=True)
    assert taken is not None and len(taken.items) == LIST_MIN_BYTES * STAGGER[3] // MB
    engine.flow.add(0.0, 5.0, 5 * 2 * MB)  # 2 MiB/s at cc 4
    engine.tick(5.0)
    for slot in range(4):
        taken, _ = engine._take(slot, lists=True)
        assert taken is not None
        assert len(taken.items) == max(1, math.ceil(0.5 * 4.0 * STAGGER[slot])), slot


def test_after_a_fall_of_p_the_lists_hold_a_call_of_a_workers_streams_now() -> None:
    """A worker with a third of its streams moves about a third at most: its lists after
    p 3 -> 1 are sized at that share of what it moved, so the change back need not wait
    for lists sized at three streams' rate; after p 3 -> 6 they are as before."""
    engine = at_two_mib_a_worker(400)
    engine.flow.set(5.0, Setting(4, 3, 1))
    engine.flow.add(5.0, 10.0, 5 * 24 * MB)
    engine.tick(10.0)  # the last windows at p 3 alone: 6 MiB/s a worker
    engine.set(Setting(4, 1, 1))
    stagger = STAGGER[1 % len(STAGGER)]
    taken, _ = engine._take(1, lists=True)
    assert taken is not None and len(taken.items) == math.ceil(6 * 4.0 * stagger / 3)
    assert len(taken.items) * MB > LIST_MIN_BYTES
    engine.set(Setting(4, 6, 1))
    taken, _ = engine._take(1, lists=True)
    assert taken is not None and len(taken.items) == math.ceil(6 * 4.0 * stagger)


class SessionWorker(Worker):
    """A worker whose every call first sets a session up (`setup_s`), then moves its files
    one by one, telling each."""

    takes_lists = True

    def __init__(self, per_call: bool, setup_s: float = 0.15, file_s: float = 0.01) -> None:
        self.sets_up_per_call = per_call
        self.setup_s, self.file_s = setup_s, file_s

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        time.sleep(self.setup_s)
        return moved_one_by_one(items, self.file_s, report)

    def stop(self) -> None:
        pass


def overlaps(calls: list[tuple[int, float, float]]) -> tuple[int, int]:
    """Of calls (slot, start, end): (how many started before the call before them in their
    slot ended, the most calls of one slot at once)."""
    early, most = 0, 1
    for slot in {c[0] for c in calls}:
        mine = sorted(c[1:] for c in calls if c[0] == slot)
        early += sum(1 for a, b in itertools.pairwise(mine) if b[0] < a[1])
        most = max(most, *(sum(1 for s, e in mine if s <= t < e) for t, _ in mine))
    return early, most


@pytest.mark.parametrize("per_call", [True, False])
def test_a_slot_sets_its_next_call_up_while_its_last_one_ends(per_call: bool) -> None:
    """A worker that sets a session up for every call gets its slot's next call started
    while the last files of the one before move (two at most, every item once); one that
    keeps its session never has two calls of a slot at once."""
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 256 << 10) for i in range(300)]
    answered: Counter[int] = Counter()
    started: dict[int, float] = {}  # id of the call's Taken -> when it was taken
    calls: list[tuple[int, float, float]] = []

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        calls.append((taken.slot, started[id(taken)], time.monotonic()))
        answered.update(r.item.file.index for r in results)

    engine = Engine([Item(f) for f in files], lambda: SessionWorker(per_call),
                    Setting(2, 1, 1), on_results, call_s=0.3,
                    on_take=lambda taken: started.__setitem__(id(taken), time.monotonic()))
    engine.run()
    assert answered == Counter(range(300))  # every item once
    early, most = overlaps(calls)
    assert most <= 2
    if per_call:
        assert early >= 5, calls
        assert 0.1 < engine.setup_s < 0.5  # as measured: 0.15 s and the first file
    else:
        assert early == 0 and most == 1


class MarkerWorker(Worker):
    """A third-party transfer's worker: a set-up, then its range at a steady rate, told at
    its server's markers (every `every_s` from its start) and at its end."""

    sets_up_per_call = True

    def __init__(self, setup_s: float, every_s: float, bytes_per_s: float) -> None:
        self.setup_s, self.every_s, self.bytes_per_s = setup_s, every_s, bytes_per_s

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        [item] = items
        start = time.monotonic()
        end = start + self.setup_s + item.size_bytes / self.bytes_per_s
        told, last, mark = 0, start, start
        while told < item.size_bytes:
            mark = min(mark + self.every_s, end)
            time.sleep(max(0.0, mark - time.monotonic()))
            done = min(item.size_bytes,
                       round(self.bytes_per_s * max(0.0, mark - start - self.setup_s)))
            now = time.monotonic()
            if done > told:
                report(last, now, done - told)
                told, last = done, now
        return [ItemResult(item, True)]

    def stop(self) -> None:
        pass


def test_a_third_party_calls_set_up_is_not_its_first_marker_and_its_hand_over_is_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Markers 0.4 s apart, a set-up of 0.02 s: the set-up measured is the set-up (taken as
    the time to the first report it read 0.4 s), and a slot's next call starts about a
    set-up before the last one ends, on a timer, not at the last marker before its end
    (0.22 s early, its streams beside the last one's meanwhile)."""
    monkeypatch.setattr("stork.engine.engine.SETUP_S_FIRST", 0.02)
    mb = 1 << 20
    file = FileWork(0, "x://s/big", "x://d/big", 8 * 20 * mb)
    started: dict[int, float] = {}
    calls: list[tuple[int, float, float]] = []

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        calls.append((taken.slot, started[id(taken)], time.monotonic()))

    engine = Engine(split(file, 20 * mb), lambda: MarkerWorker(0.02, 0.4, 20 * mb),
                    Setting(2, 1, 1), on_results,
                    on_take=lambda taken: started.__setitem__(id(taken), time.monotonic()))
    engine.run()
    assert len(calls) == 8
    assert engine.setup_s < 0.1, engine.setup_s
    early = []
    for slot in (0, 1):
        mine = sorted(c[1:] for c in calls if c[0] == slot)
        early += [a[1] - b[0] for a, b in itertools.pairwise(mine)]
    assert len(early) == 6 and max(early) < 0.15, early  # 0.22 s each, handed over at 0.8 s
    assert sum(1 for e in early if e > 0) >= 3, early  # and the next call set up before


def test_each_call_is_logged_at_debug_with_its_set_up_and_length(
        caplog: pytest.LogCaptureFixture) -> None:
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 256 << 10) for i in range(20)]
    engine = Engine([Item(f) for f in files], lambda: SessionWorker(True, setup_s=0.05),
                    Setting(2, 1, 1), lambda *_: None, call_s=0.3)
    with caplog.at_level(logging.DEBUG, logger="stork.engine.engine"):
        engine.run()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("engine call")]
    assert len(lines) == engine.calls
    assert sum(int(line.split(": ")[1].split(" items")[0]) for line in lines) == 20
    assert all(re.search(r"first report after 0\.\d{3} s, ended after \d+\.\d{3} s$", line)
               for line in lines), lines


def test_the_last_lists_are_an_equal_share_of_what_is_left_and_at_least_a_set_up() -> None:
    """Towards the end of the queue a list holds at most the whole files left over cc (the
    last calls end together), and never less than a set-up of the worker's rate."""
    engine = at_two_mib_a_worker(40)
    sizes = []
    while (taken := engine._take(3, lists=True)[0]) is not None:  # slot 3: the longest stagger
        sizes.append(len(taken.items))
    usual = math.ceil(2 * 4.0 * STAGGER[3])  # 12 files: 2 MiB/s x 4 s, staggered
    assert sizes[0] == min(usual, 40 // 4)  # 10: a quarter of the 40 left
    assert sizes[1] == math.ceil(30 / 4)  # then a quarter of the 30 left
    assert all(a >= b for a, b in itertools.pairwise(sizes))  # shrinking with the queue
    floor = 2 * engine.setup_s  # MiB: a set-up (0.5 s before any call told) at 2 MiB/s
    assert sizes[-2] >= floor and sum(sizes) == 40


def test_a_call_cut_short_answers_what_landed_and_sends_the_rest_again() -> None:
    """After the tool named three files as it began them, the first two landed; the third
    (it may be part written) and the rest are sent again; before any was named, all are."""
    items = [Item(FileWork(i, f"x://s/{i}", f"x://d/{i}", 10)) for i in range(6)]
    answers = cut_short(items, 3)
    assert [(r.ok, r.unsent) for r in answers] == [(True, False)] * 2 + [(None, True)] * 4
    assert [(r.ok, r.unsent) for r in cut_short(items, 0)] == [(None, True)] * 6
    assert [r.ok for r in cut_short(items[:2], 5)] == [True, None]  # all named: the last


class StragglerWorker(Worker):
    """A worker of the test's own that can be cut: the first call of the engine (the one
    that gets `first`, a lock its workers share) crawls, each file `slow_s`; every other
    call moves a file every `fast_s`; each file is told as it lands."""

    takes_lists = True
    cuts = True

    def __init__(self, first: threading.Lock, slow_s: float = 0.4,
                 fast_s: float = 0.01) -> None:
        self.first = first
        self.slow_s, self.fast_s = slow_s, fast_s
        self._cut = threading.Event()
        self.was_cut: list[int] = []  # how many files each cut call had told

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        self._cut.clear()
        each_s = self.slow_s if self.first.acquire(blocking=False) else self.fast_s
        for n, item in enumerate(items):
            t0 = time.monotonic()
            if self._cut.wait(each_s):
                self.was_cut.append(n)
                return cut_short(items, n)  # named each file as it landed: n landed
            report(t0, time.monotonic(), item.size_bytes)
        return [ItemResult(i, True) for i in items]

    def cut(self) -> None:
        self._cut.set()

    def stop(self) -> None:
        self._cut.set()


def test_a_straggling_call_is_cut_at_the_end_and_its_rest_sent_by_the_idle_slots() -> None:
    """The first call crawls; once the queue is empty and the other slots are idle the
    engine cuts it: the files it did not land are taken by the idle slots, an equal share
    each, and every file is answered once."""
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 256 << 10) for i in range(200)]
    answers: dict[int, list[tuple[int, bool | None]]] = {}
    first: list[Taken] = []
    lock = threading.Lock()

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        with lock:
            if not first or taken.started_s < first[0].started_s:
                first[:] = [taken]
            for r in results:
                answers.setdefault(r.item.file.index, []).append((taken.slot, r.ok))

    workers: list[StragglerWorker] = []
    first_call = threading.Lock()

    def new_worker() -> StragglerWorker:
        worker = StragglerWorker(first_call)
        workers.append(worker)
        return worker

    engine = Engine([Item(f) for f in files], new_worker, Setting(4, 1, 1), on_results,
                    call_s=0.3)
    runner = threading.Thread(target=engine.run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    assert engine.cuts == 1
    told = next(n for w in workers for n in w.was_cut)
    slow = first[0]
    assert len(slow.items) - told >= 3  # it was cut with files left to send
    assert sorted(answers) == list(range(200))  # every file answered,
    assert all(len(a) == 1 for a in answers.values())  # once
    mine = [answers[i.file.index][0] for i in slow.items]
    landed = max(told - 1, 0)  # the last it told may be part written (`cut_short`)
    assert all(ok is True and slot == slow.slot for slot, ok in mine[:landed])
    assert all(ok is True for _, ok in mine[landed:])  # the rest sent again, by
    assert len({slot for slot, _ in mine[landed:]}) >= 2  # the idle slots, spread


class MarkedStragglerWorker(StragglerWorker):
    """As `StragglerWorker`, but the engine's first call moves its files fast but its last
    two, which it begins once nothing is queued (`drained`) and tells in four marks each
    over `slow_s`, as a third-party call's server tells a file at its markers."""

    def __init__(self, first: threading.Lock, drained: Callable[[], bool],
                 slow_s: float) -> None:
        super().__init__(first, slow_s=slow_s)
        self.drained = drained
        self.crawled: list[int] = []  # the files that crawled

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        if not self.first.acquire(blocking=False):
            return super().run(items, setting, report)
        self._cut.clear()
        for n, item in enumerate(items):
            crawls = n >= len(items) - 2
            if n == len(items) - 2:
                self.crawled = [i.file.index for i in items[n:]]
                wait_for(lambda: self.drained() or self._cut.is_set(), interval_s=0.01,
                         what="the queue to run dry")
            for _ in range(4 if crawls else 1):
                t0 = time.monotonic()
                if self._cut.wait(self.slow_s / 4 if crawls else self.fast_s):
                    self.was_cut.append(n)
                    return cut_short(items, n)  # named each file as it landed
                report(t0, time.monotonic(), item.size_bytes // (4 if crawls else 1))
        return [ItemResult(i, True) for i in items]


def test_a_straggling_call_of_two_files_is_cut_and_both_are_sent_by_the_idle_slots() -> None:
    """A call with two files not landed when the queue runs dry, the first of them moving
    at a crawl: they would take far longer than a set-up and a file each on two idle
    slots, so the engine cuts the call and its files are sent again (on wan80 such calls
    of small files, one stream that met losses, ended jobs seconds after the others:
    docs/BENCHMARKS.md 15.53)."""
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", MB) for i in range(300)]
    answers: dict[int, list[bool | None]] = {}
    lock = threading.Lock()

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        with lock:
            for r in results:
                answers.setdefault(r.item.file.index, []).append(r.ok)

    workers: list[MarkedStragglerWorker] = []
    first_call = threading.Lock()
    engines: list[Engine] = []

    def new_worker() -> MarkedStragglerWorker:
        worker = MarkedStragglerWorker(first_call, lambda: not engines[0].left(), slow_s=4.0)
        workers.append(worker)
        return worker

    engines.append(Engine([Item(f) for f in files], new_worker, Setting(4, 1, 1),
                          on_results, call_s=0.3))
    runner = threading.Thread(target=engines[0].run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    [slow] = [w for w in workers if w.crawled]
    assert engines[0].cuts == 1 and slow.was_cut  # cut with its two files not landed,
    assert all(i in answers for i in slow.crawled)  # which were sent again:
    assert sorted(answers) == list(range(300))  # every file answered once
    assert all(a == [True] for a in answers.values())


def test_an_engine_told_not_to_cut_lets_the_straggler_end() -> None:
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 256 << 10) for i in range(120)]
    answered: Counter[int] = Counter()
    first_call = threading.Lock()
    engine = Engine([Item(f) for f in files], lambda: StragglerWorker(first_call, slow_s=0.05),
                    Setting(4, 1, 1), lambda _, rs: answered.update(
                        r.item.file.index for r in rs if r.ok), call_s=0.3,
                    cut_stragglers=False)
    engine.run()
    assert engine.cuts == 0 and answered == Counter(range(120))


class RangeStragglerWorker(Worker):
    """Ranges, told in reports as they move, and cut-able: the engine's first call (the one
    that gets `first`, a lock its workers share) crawls at `slow_bps`, every other call
    moves at `fast_bps`; a cut call answers its range as `unsent` (`cut_short`)."""

    cuts = True

    def __init__(self, first: threading.Lock, slow_bps: float, fast_bps: float,
                 log: list[tuple[int, Item, bool]], lock: threading.Lock,
                 crawl_below: int = 0, crawl_at: int | None = None,
                 crawl_told_once: bool = False) -> None:
        self.first, self.slow_bps, self.fast_bps = first, slow_bps, fast_bps
        self.log, self.lock = log, lock
        self.crawl_below = crawl_below  # a call of bytes below this offset crawls too
        self.crawl_at = crawl_at  # the range at this offset crawls, not the first call
        self.crawl_told_once = crawl_told_once  # a crawling call tells its first bytes only
        self._cut = threading.Event()

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        self._cut.clear()
        [item] = items
        slow = item.offset == self.crawl_at if self.crawl_at is not None else \
            self.first.acquire(blocking=False) or item.offset < self.crawl_below
        bps = self.slow_bps if slow else self.fast_bps
        step = max(1, item.size_bytes // 16)
        for offset in range(0, item.size_bytes, step):
            t0 = time.monotonic()
            if self._cut.wait(step / bps):
                with self.lock:
                    self.log.append((id(self), item, slow))
                return cut_short(items, 1)  # begun, nothing known to have landed
            if not (slow and self.crawl_told_once and offset > 0):
                report(t0, time.monotonic(), step)
        return [ItemResult(item, True)]

    def cut(self) -> None:
        self._cut.set()

    def stop(self) -> None:
        self._cut.set()


def test_a_straggling_range_is_cut_at_the_end_and_sent_again_in_pieces_by_the_idle_slots(
        ) -> None:
    """A file of 4 MiB ranges at cc 4 whose first range crawls: once nothing is queued and
    the other slots idle, what it has left would take far longer than its whole range in
    pieces over them, so the engine cuts it and the range is sent again, in pieces of at
    least the floor on more than one slot; every byte lands, no other range twice (on wan80
    a 4 GiB file's last range ran alone for seconds: docs/BENCHMARKS.md 15.55)."""
    size = 48 * MB
    file = FileWork(0, "x://s/big", "x://d/big", size)
    landed: list[tuple[int, Item]] = []
    cuts: list[tuple[int, Item, bool]] = []
    lock = threading.Lock()

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        with lock:
            landed.extend((taken.slot, r.item) for r in results if r.ok)

    first_call = threading.Lock()
    engine = Engine(split(file, 4 * MB), lambda: RangeStragglerWorker(
        first_call, slow_bps=0.5 * MB, fast_bps=10 * MB, log=cuts, lock=lock),
        Setting(4, 1, 1), on_results, short_piece_bytes=MB)
    runner = threading.Thread(target=engine.run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    # the crawling call cut, once (a fast one whose thread a loaded machine held up past
    # its first report may be cut too: that costs a resend, and is not what is tested)
    [slow_range] = [i for _, i, slow in cuts if slow]
    assert slow_range.offset == 0 and engine.cuts == len(cuts)
    spans = sorted((i.offset, i.offset + i.size_bytes) for _, i in landed)
    assert merged(spans) == [(0, size)]  # every byte landed,
    assert sum(e - s for s, e in spans) == size  # once: no range landed twice
    again = [(slot, i) for slot, i in landed if i.offset < slow_range.size_bytes]
    assert len(again) >= 2 and len({slot for slot, _ in again}) >= 2  # in pieces, spread
    assert all(i.size_bytes >= MB for _, i in again)  # of at least the floor


def test_a_straggling_range_that_told_its_bytes_once_is_judged_by_its_first_report() -> None:
    """As above, but the range that crawls is one of the last (the flow's windows before
    it are known), and it tells its first bytes and then nothing until its end (a
    third-party range's server marks every 5 s): its rate up to that report, after a
    set-up, is enough to cut it once the other slots idle."""
    size = 96 * MB
    file = FileWork(0, "x://s/big", "x://d/big", size)
    landed: list[Item] = []
    cuts: list[tuple[int, Item, bool]] = []
    lock = threading.Lock()
    engine = Engine(split(file, 4 * MB), lambda: RangeStragglerWorker(
        threading.Lock(), slow_bps=0.5 * MB, fast_bps=10 * MB, log=cuts, lock=lock,
        crawl_at=80 * MB, crawl_told_once=True), Setting(4, 1, 1),
        lambda _, rs: landed.extend(r.item for r in rs if r.ok), short_piece_bytes=MB)
    runner = threading.Thread(target=engine.run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    assert [i.offset for _, i, slow in cuts if slow] == [80 * MB]  # cut once (as above)
    spans = sorted((i.offset, i.offset + i.size_bytes) for i in landed)
    assert merged(spans) == [(0, size)] and sum(e - s for s, e in spans) == size


def test_the_pieces_of_a_cut_range_are_not_cut_again_on_a_path_slow_for_them_too() -> None:
    """As above, but the pieces of the first range crawl as it did: the range is cut once,
    its pieces end by themselves, and every byte lands once."""
    size = 48 * MB
    file = FileWork(0, "x://s/big", "x://d/big", size)
    landed: list[Item] = []
    cuts: list[tuple[int, Item, bool]] = []
    lock = threading.Lock()
    first_call = threading.Lock()
    engine = Engine(split(file, 4 * MB), lambda: RangeStragglerWorker(
        first_call, slow_bps=MB, fast_bps=10 * MB, log=cuts, lock=lock,
        crawl_below=4 * MB), Setting(4, 1, 1),
        lambda _, rs: landed.extend(r.item for r in rs if r.ok), short_piece_bytes=MB)
    runner = threading.Thread(target=engine.run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    assert [i.offset for _, i, slow in cuts if slow] == [0]  # no piece of it (as above)
    spans = sorted((i.offset, i.offset + i.size_bytes) for i in landed)
    assert merged(spans) == [(0, size)] and sum(e - s for s, e in spans) == size


def test_a_range_is_cut_when_what_it_has_left_takes_twice_its_whole_range_in_pieces() -> None:
    """`range_cut` with wan80's figures (a worker's 4.3 MiB/s while the slots were busy, a
    set-up of 0.8 s, 64 MiB ranges, seven idle slots and its own: docs/BENCHMARKS.md
    15.55): a range at 2.5 MiB/s with 24 MiB left is worth cutting, one at the usual rate
    near its end is not, nor one that could only be sent again in one piece."""
    busy, setup = 4.3 * MB, 0.8
    keep, cut = range_cut(24 * MB, 2.5 * MB, 64 * MB, 8, 4 * MB, setup, busy) or (0, 0)
    assert keep == pytest.approx(9.6) and cut == pytest.approx(setup + 64 / 8 / 4.3)
    assert keep > CUT_GAIN * cut
    keep, cut = range_cut(6 * MB, busy, 64 * MB, 8, 4 * MB, setup, busy) or (0, 0)
    assert 0 < keep < CUT_GAIN * cut  # the usual rate, near its end
    keep, cut = range_cut(24 * MB, 2.5 * MB, 64 * MB, 8, 0, setup, busy) or (0, 0)
    assert cut == pytest.approx(setup + 64 / 4.3) and keep < CUT_GAIN * cut  # one piece
    _, cut = range_cut(24 * MB, 2.5 * MB, 64 * MB, 8, 16 * MB, setup, busy) or (0, 0)
    assert cut == pytest.approx(setup + 64 / 4 / 4.3)  # four pieces of the floor
    assert range_cut(0, 2.5 * MB, 64 * MB, 8, 4 * MB, setup, busy) is None  # nothing left


class TimedWorker(Worker):
    """Moves each item at `bytes_per_s`, telling its bytes as it goes: the time a call
    takes is its size's."""

    takes_lists = False

    def __init__(self, bytes_per_s: float, log: list[tuple[str, int, int | None]],
                 lock: threading.Lock) -> None:
        self.bytes_per_s, self.log, self.lock = bytes_per_s, log, lock

    def run(self, items: Sequence[Item], setting: Setting, report: Report) -> list[ItemResult]:
        for item in items:
            with self.lock:
                self.log.append(("send", item.file.index, item.length))
            t0 = time.monotonic()
            time.sleep(item.size_bytes / self.bytes_per_s)
            report(t0, time.monotonic(), item.size_bytes)
        return [ItemResult(i, True) for i in items]

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_last_files_are_cut_into_pieces_shown_to_the_caller_before_any_is_sent() -> None:
    """Twelve whole files of 64 MiB at cc 4 with pieces of at least 8 MiB: the first ones
    go whole; once fewer than cc files' worth is queued each file taken is cut to its share,
    told to `on_split` before any piece of it is sent, and every byte goes exactly once."""
    files = [FileWork(i, f"x://s/{i}", f"x://d/{i}", 64 * MB) for i in range(12)]
    events: list[tuple[str, int, int | None]] = []
    lock = threading.Lock()
    landed: dict[int, list[tuple[int, int]]] = {}

    def on_results(_: Taken, results: list[ItemResult]) -> None:
        with lock:
            for r in results:
                size = r.item.size_bytes
                landed.setdefault(r.item.file.index, []).append((r.item.offset,
                                                                 r.item.offset + size))

    def on_split(item: Item) -> None:
        assert not item.is_range
        with lock:
            events.append(("split", item.file.index, None))

    engine = Engine([Item(f) for f in files],
                    lambda: TimedWorker(640 * MB, events, lock), Setting(4, 1, 1),
                    on_results, piece_bytes=8 * MB, on_split=on_split)
    engine.run()
    cut = sorted({i for kind, i, _ in events if kind == "split"})
    assert cut and cut[0] >= 8 and cut == list(range(cut[0], 12))  # the last files only
    for index in range(12):
        sent = [length for kind, i, length in events if kind == "send" and i == index]
        assert (sent == [None]) == (index not in cut), (index, sent)  # whole, or pieces
        if index in cut:  # shown to the caller before its first piece was sent
            assert events.index(("split", index, None)) < min(
                n for n, (kind, i, _) in enumerate(events) if kind == "send" and i == index)
            assert all(length is not None and length >= 8 * MB for length in sent)
            spans = sorted(landed[index])  # every byte once: the pieces tile the file
            assert spans[0][0] == 0 and spans[-1][1] == 64 * MB
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert engine.flow.total_bytes == 12 * 64 * MB


# -- the engine with globus-url-copy workers, against a real server -------------------------

@pytest.mark.parametrize("cut_s", [None, 0.01])
def test_files_and_ranges_through_real_gridftp_workers_byte_identical(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path, cut_s: float | None
) -> None:
    """Small files in lists and a large file in ranges; with `cut_s` (the pieces of a
    search) and a worker's rate known (a second at 1 KiB/s, before the first call: the
    first wave is not cut before one) each 2 MiB range is taken as two pieces of 1 MiB (a
    piece is rounded up to a MiB, at least the half-MiB floor)."""
    src = gridftp_root / f"engine-src-{cut_s}"
    src.mkdir()
    small = [make_file(src / f"s{i:03d}.dat", 64_000 + i, seed=100 + i) for i in range(40)]
    large = make_file(src / "large.dat", 9 * MB + 7, seed=99)
    out = tmp_path / "out"
    out.mkdir()
    files = [FileWork(i, gridftp.url(p), f"file://{out}/{p.name}", p.stat().st_size)
             for i, p in enumerate([*small, large])]
    items = plan_items(files, 2 * MB)
    assert sum(i.is_range for i in items) == 5  # 2+2+2+2+1 MiB and 7 bytes
    assembly = Assembly.of(items)
    whole: list[int] = []
    answers: list[ItemResult] = []
    lock = threading.Lock()

    def on_results(_: Taken, results: list[ItemResult]) -> None:
        with lock:
            answers.extend(results)
            whole.extend(r.item.file.index for r in results if r.ok and assembly.land(r.item))

    module = GridFtpModule()
    engine = Engine(items, lambda: module.worker(WorkerContext(fast=True)), Setting(3, 2, 2),
                    on_results, short_piece_bytes=MB // 2)
    engine.cut_s = cut_s
    seeded = 0
    if cut_s is not None:
        time.sleep(1.1)  # a whole window of the flow
        now = engine.clock()
        seeded = 3 * 1024
        engine.flow.add(now - 1.0, now, seeded)
        engine.tick(now)
        assert engine._worker_rate() is not None
    engine.run()
    pieces = sorted(r.item.length for r in answers if r.item.is_range and r.item.length)
    assert all(r.ok for r in answers)
    assert pieces == ([MB + 7, *[2 * MB] * 4] if cut_s is None else [MB] * 8 + [MB + 7])
    assert sorted(whole) == list(range(len(files)))  # the large file once, when whole
    for path in [*small, large]:
        assert md5(out / path.name) == md5(path)
    assert engine.flow.total_bytes == sum(p.stat().st_size for p in [*small, large]) + seeded


def test_a_list_call_of_globus_url_copy_tells_each_file_as_it_lands(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = gridftp_root / "told-src"
    src.mkdir()
    paths = [make_file(src / f"t{i:02d}.dat", 256_000, seed=200 + i) for i in range(12)]
    out = tmp_path / "told"
    out.mkdir()
    items = [Item(FileWork(i, gridftp.url(p), f"file://{out}/{p.name}", 256_000))
             for i, p in enumerate(paths)]
    said: list[tuple[float, float, int]] = []
    worker = GridFtpModule().worker(WorkerContext(fast=True))
    results = worker.run(items, Setting(1, 1, 2), lambda *a: said.append(a))
    assert all(r.ok for r in results)
    assert sum(n for *_, n in said) == 12 * 256_000
    # files of one size: their -vb markers alone cannot tell one file from the next, and a
    # call's lines held until it ends would say at most its first file and the rest
    assert len(said) >= 11, said
    assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(said))  # in order


def test_a_list_call_of_globus_url_copy_cut_short_says_what_landed_and_what_never_began(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """A real list call cut after its third file was told: the files it answers as landed
    are whole and byte-identical, and of those it sends again at most two were begun."""
    src = gridftp_root / "cut-src"
    src.mkdir()
    paths = [make_file(src / f"c{i:02d}.dat", 2 * MB, seed=300 + i) for i in range(16)]
    out = tmp_path / "cut"
    out.mkdir()
    items = [Item(FileWork(i, gridftp.url(p), f"file://{out}/{p.name}", 2 * MB))
             for i, p in enumerate(paths)]
    told: list[int] = []
    # one stream with a tiny TCP buffer: slow enough on loopback to be cut in flight
    worker = GridFtpModule().worker(WorkerContext(fast=True, tcp_buffer_bytes=4096))
    assert worker is not None and worker.cuts
    answers: list[ItemResult] = []
    runner = threading.Thread(target=lambda: answers.extend(
        worker.run(items, Setting(1, 1, 2), lambda _t0, _t1, n: told.append(n))))
    runner.start()
    wait_for(lambda: sum(told) >= 3 * 2 * MB, 60, what="three files told")
    worker.cut()
    runner.join(30)
    assert not runner.is_alive() and len(answers) == 16
    landed = [r.item for r in answers if r.ok]
    unsent = [r.item for r in answers if r.unsent]
    assert len(landed) >= 2 and len(unsent) >= 3, [(r.ok, r.unsent) for r in answers]
    assert len(landed) + len(unsent) == 16 and landed == items[:len(landed)]
    for item in landed:
        assert md5(out / Path(item.file.src_url).name) == md5(src / Path(item.file.src_url).name)
    begun = [i for i in unsent if (out / Path(i.file.src_url).name).exists()]
    assert begun == unsent[:len(begun)] and len(begun) <= 2  # in order, at most two
    assert all(r.failure is None for r in answers)


def test_files_a_cut_call_left_are_sent_again_whole_by_the_engine(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """A real list call cut once the queue is empty (as `_straggler` does): the engine
    sends what it did not land again, over the part-written file it may have left, and
    every file ends byte-identical, answered done once."""
    src = gridftp_root / "recut-src"
    src.mkdir()
    paths = [make_file(src / f"r{i:02d}.dat", 2 * MB, seed=400 + i) for i in range(12)]
    out = tmp_path / "recut"
    out.mkdir()
    files = [FileWork(i, gridftp.url(p), f"file://{out}/{p.name}", 2 * MB)
             for i, p in enumerate(paths)]
    answered: Counter[int] = Counter()
    calls: list[tuple[int, int]] = []  # (items taken, items answered) a call
    workers: list[Worker] = []
    module = GridFtpModule()

    def on_results(taken: Taken, results: list[ItemResult]) -> None:
        calls.append((len(taken.items), len(results)))
        answered.update(r.item.file.index for r in results if r.ok)

    def new_worker() -> Worker:
        # one stream with a tiny TCP buffer: slow enough on loopback to be cut in flight
        worker = module.worker(WorkerContext(fast=True, tcp_buffer_bytes=4096))
        assert worker is not None
        workers.append(worker)
        return worker

    now = time.monotonic()  # a worker's rate known (1 MiB/s): its first call takes all 12
    flow = Flow(now - 5, Setting(1, 1, 2), lag_s=math.inf)
    flow.add(now - 5, now, 5 * MB)
    flow.tick(now)
    flow.settle(now)
    engine = Engine([Item(f) for f in files], new_worker, Setting(1, 1, 2), on_results,
                    flow=flow, cut_stragglers=False, call_s=60.0)
    runner = threading.Thread(target=engine.run)
    runner.start()
    wait_for(lambda: not engine.left() and engine.flow.total_bytes >= (5 + 3 * 2) * MB, 60,
             what="the queue empty and three files told")
    workers[0].cut()
    runner.join(120)
    assert not runner.is_alive()
    assert answered == Counter(range(12))  # every file done, once
    assert calls[0][0] == 12 and 2 <= calls[0][1] < 12, calls  # cut: the rest sent again
    for path in paths:
        assert md5(out / path.name) == md5(path)


def test_a_stopped_engine_answers_the_calls_in_flight_as_not_done(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    big = make_file(gridftp_root / "engine-stop.dat", 64 * MB, seed=98)
    files = [FileWork(0, gridftp.url(big), f"file://{tmp_path}/stop.dat", big.stat().st_size)]
    answers: list[ItemResult] = []
    module = GridFtpModule()
    # one stream with a tiny TCP buffer: slow enough on loopback to be stopped in flight
    engine = Engine(plan_items(files, 8 * MB),
                    lambda: module.worker(WorkerContext(tcp_buffer_bytes=4096)),
                    Setting(2, 1, 1), lambda _, results: answers.extend(results))
    runner = threading.Thread(target=engine.run)
    runner.start()
    wait_for(lambda: len(engine.in_flight()) == 2, 10, what="two calls in flight")
    engine.stop()
    runner.join(30)
    assert not runner.is_alive()
    stopped = [r for r in answers if r.ok is None]
    assert len(stopped) >= 1 and all(r.failure is None for r in stopped)
    assert len(answers) + len(engine.left()) <= 8  # nothing taken after the stop


def test_whole_files_through_long_lived_gfal2_workers(
        gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    """Each worker is one gfal2 helper that copies the files it is given one after another
    (its GridFTP session kept); a change of p applies to the next file; a range is refused."""
    if not helper_available():
        pytest.skip("the gfal2 Python bindings are missing (python3-gfal2); run `make setup`")
    src = gridftp_root / "engine-gfal"
    src.mkdir()
    paths = [make_file(src / f"g{i:03d}.dat", 100_000 + i, seed=200 + i) for i in range(24)]
    out = tmp_path / "gfal-out"
    out.mkdir()
    files = [FileWork(i, gridftp.url(p), f"file://{out}/{p.name}", p.stat().st_size)
             for i, p in enumerate(paths)]
    answers: list[ItemResult] = []
    lock = threading.Lock()

    def on_results(_: Taken, results: list[ItemResult]) -> None:
        with lock:
            answers.extend(results)

    engine = Engine(plan_items(files, 0), lambda: GfalWorker(WorkerContext()), Setting(3, 1, 1),
                    on_results)
    runner = threading.Thread(target=engine.run)
    runner.start()
    wait_for(lambda: len(answers) >= 3, 30, what="files copied")
    engine.set(Setting(2, 4, 1))
    runner.join(120)
    assert sorted(r.item.file.index for r in answers) == list(range(len(files)))
    assert all(r.ok for r in answers), [r.failure for r in answers if not r.ok]
    for path in paths:
        assert md5(out / path.name) == md5(path)
    worker = GfalWorker(WorkerContext())
    try:
        [refused] = worker.run([Item(files[0], 0, 10)], S1, lambda *_: None)
    finally:
        worker.close()
    assert refused.ok is False and "whole files only" in str(refused.failure)


def test_the_transfer_log_rows_of_a_flow_add_up_to_the_bytes_it_moved() -> None:
    """A flow's bytes are spread over windows (fractions of a byte): its stretches' rows
    are rounded cumulatively, so they add up to the whole bytes moved, not one short."""
    thirds = [Stretch(Setting(4, 1, 8), 0, float(i), 1.0, 10_000_000 / 3, 1, 26.7, 0.0)
              for i in range(3)]
    rows = stretch_records(thirds, now_mono=10.0, now_wall=1e9, src_url="ftp://a/x",
                           dest_url="ftp://b/x", rtt_s=0.01, link_mbps=100.0,
                           buffer_bytes=None, file_bytes=20_000.0, fast=True)
    assert sum(r.bytes_moved for r in rows) == 10_000_000
    assert sum(r.file_count for r in rows) == 500
