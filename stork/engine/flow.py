"""The measured flow of one job: bytes per second in windows, and stretches at one setting.

Workers report what their tools say they moved (globus-url-copy's ``-vb`` markers, gfal2's
progress callbacks) as `add(t0, t1, nbytes)`: `nbytes` arrived between two reports, spread
evenly over that interval, so windows are not lumpy where a tool reports once a second. The
flow is cut into windows of `window_s` on a fixed grid from the start; a change of setting or
of the load the daemon knows of closes the window at once, so every window has one setting.
The last `keep` windows are kept (the time series the API and the status page show); every
window also feeds the running *stretch* (the span at one setting and load: its mean, its
spread and its length), which the transfer log records and the tuning layer reads.

No clock inside: every call carries its time (monotonic seconds), so it is tested on fixed
series. A lock makes it safe for the worker threads that report into it.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from dataclasses import dataclass

from stork.transfer.worker import Setting

SERIES_ONLY = Setting(1, 1, 1)  # the setting of a flow kept as a series only
# A job's series (`series_flow`) is final this long after its windows end: a GridFTP
# third-party call tells its bytes every 5 s (the server's performance markers: on wan80 a
# 4 GiB file's series in 1-s windows read 0, 1209, 140, 0, 0, 149, 1089 Mbit/s on a
# 300 Mbit/s link with no lag), so each report is spread over the windows it moved in.
SERIES_LAG_S = 8.0


@dataclass(frozen=True)
class Window:
    start_s: float
    seconds: float
    bytes: float
    setting: Setting
    load: int  # other transfers the daemon ran on the path's hosts

    @property
    def rate_mbps(self) -> float:
        return self.bytes * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Stretch:
    """A span of the flow at one setting and load."""

    setting: Setting
    load: int
    start_s: float
    seconds: float
    bytes: float
    windows: int  # full windows in it (those the spread is over)
    mean_mbps: float  # bytes over seconds
    stdev_mbps: float  # of the full windows' rates (0 with fewer than two)


@dataclass
class _Open:
    setting: Setting
    load: int
    start_s: float
    seconds: float = 0.0
    bytes: float = 0.0
    count: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, window: Window, full: bool) -> None:
        self.seconds += window.seconds
        self.bytes += window.bytes
        if full:
            self.count += 1
            self.total += window.rate_mbps
            self.squares += window.rate_mbps ** 2

    def close(self) -> Stretch:
        mean = self.bytes * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0
        spread = 0.0
        if self.count > 1:
            average = self.total / self.count
            spread = math.sqrt(max(self.squares / self.count - average ** 2, 0.0)
                               * self.count / (self.count - 1))
        return Stretch(self.setting, self.load, self.start_s, self.seconds, self.bytes,
                       self.count, mean, spread)


@dataclass
class _Pending:
    """A closed window that late reports may still add to (younger than the flow's lag)."""

    start_s: float
    end_s: float
    bytes: float
    setting: Setting
    load: int

    def window(self) -> Window:
        return Window(self.start_s, self.end_s - self.start_s, self.bytes, self.setting,
                      self.load)


class Flow:
    """The flow of one engine (its windows carry its settings), or a job's over several
    engines (a series only: it keeps the setting it was made with).

    `lag_s`: a window is final only `lag_s` after it ended. A tool that reports rarely (a
    GridFTP third-party transfer every few seconds, a list call of small files when a file
    lands) reports bytes that moved in windows already closed; until a
    window is final such a report is spread over it as over the open one, so the windows
    the tuning layer reads say when the bytes moved, not when they were told. With no lag a
    report's part before the open window lands in it."""

    def __init__(self, start_s: float, setting: Setting = SERIES_ONLY, *,
                 window_s: float = 1.0, keep: int = 900, load: int = 0,
                 lag_s: float = 0.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        if lag_s < 0:
            raise ValueError(f"lag_s must not be negative, not {lag_s}")
        self.window_s = window_s
        self.lag_s = lag_s
        self._lock = threading.Lock()
        self._windows: deque[Window] = deque(maxlen=keep)
        self._pending: deque[_Pending] = deque()
        self._stretches: list[Stretch] = []
        self._start = start_s  # the open window's start
        self._bytes = 0.0
        self._setting = setting
        self._load = load
        self._stretch = _Open(setting, load, start_s)
        self.total_bytes = 0.0

    @property
    def setting(self) -> Setting:
        return self._setting

    # -- reports --------------------------------------------------------------------------

    def add(self, t0: float, t1: float, nbytes: float) -> None:
        """`nbytes` moved between t0 and t1 (spread evenly; all at t1 when t1 <= t0) over
        the windows not yet final; what falls before them lands in the oldest."""
        if nbytes <= 0:
            return
        with self._lock:
            self.total_bytes += nbytes
            t0 = min(t0, t1)
            self._roll(t1)
            if t1 <= t0:
                self._at(t1, nbytes)
            else:
                self._spread(t0, t1, nbytes)
            self._final(t1 - self.lag_s)

    def _spread(self, t0: float, t1: float, nbytes: float) -> None:
        """`nbytes` evenly over [t0, t1) of the windows not yet final and the open one;
        the part before them into the oldest."""
        rate = nbytes / (t1 - t0)
        given = 0.0
        for window in self._pending:
            part = rate * max(0.0, min(window.end_s, t1) - max(window.start_s, t0))
            window.bytes += part
            given += part
        part = rate * max(0.0, t1 - max(self._start, t0))
        self._bytes += part
        given += part
        if nbytes - given > 1e-9 * nbytes:
            self._at(float("-inf"), nbytes - given)

    def _at(self, t: float, nbytes: float) -> None:
        """`nbytes` into the window not yet final that holds `t` (the oldest when none)."""
        for window in self._pending:
            if window.start_s <= t < window.end_s:
                window.bytes += nbytes
                return
        if t >= self._start or not self._pending:
            self._bytes += nbytes
        else:
            self._pending[0].bytes += nbytes

    def set(self, t: float, setting: Setting) -> None:
        """The setting changed at `t`: the open window and stretch end there."""
        self._change(t, setting, None)

    def set_load(self, t: float, load: int) -> None:
        """The load the daemon knows of changed at `t`: as a change of setting."""
        self._change(t, None, load)

    def _change(self, t: float, setting: Setting | None, load: int | None) -> None:
        with self._lock:
            setting = self._setting if setting is None else setting
            load = self._load if load is None else load
            if (setting, load) == (self._setting, self._load):
                return
            self._roll(t)
            self._close(t)
            self._final(t - self.lag_s)
            self._setting, self._load = setting, load

    def tick(self, t: float) -> None:
        """Close the windows that ended by `t` (a quiet flow still has windows: at 0)."""
        with self._lock:
            self._advance(t)

    def settle(self, t: float) -> None:
        """The windows that ended by `t` are whole (every report for them came): final."""
        with self._lock:
            self._final(t)

    def end(self, t: float) -> None:
        """The flow ended at `t`: the windows up to it closed and final, the last one
        short."""
        with self._lock:
            self._advance(t)
            self._close(t)
            self._final(float("inf"))

    # -- reading --------------------------------------------------------------------------

    def windows(self, since_s: float = float("-inf")) -> list[Window]:
        """The final windows (those `lag_s` old or more)."""
        with self._lock:
            return [w for w in self._windows if w.start_s >= since_s]

    def stretches(self, t: float | None = None) -> list[Stretch]:
        """Every stretch so far, the last one as it stands: at `t` when given, with what
        the windows not yet final and the one open at `t` hold."""
        with self._lock:
            closed, current = list(self._stretches), dataclasses.replace(self._stretch)
            if t is not None:
                self._advance(t)
                closed, current = list(self._stretches), dataclasses.replace(self._stretch)
                windows = [p.window() for p in self._pending]
                if t > self._start:
                    windows.append(Window(self._start, t - self._start, self._bytes,
                                          self._setting, self._load))
                for window in windows:
                    current = _fold(closed, current, window, full=window.seconds >=
                                    self.window_s * (1 - 1e-9) and window is not windows[-1])
            return [*closed, current.close()]

    # -- inside the lock ------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        self._roll(t)
        self._final(t - self.lag_s)

    def _roll(self, t: float) -> None:
        """Close the windows that ended by `t` (not yet final)."""
        while t >= self._start + self.window_s:
            self._close(self._start + self.window_s)

    def _close(self, end: float) -> None:
        seconds = end - self._start
        if seconds > 0:
            self._pending.append(_Pending(self._start, end, self._bytes, self._setting,
                                          self._load))
        self._start = end
        self._bytes = 0.0

    def _final(self, before: float) -> None:
        """The windows that ended by `before` are final: into the series and the stretch."""
        while self._pending and self._pending[0].end_s <= before:
            window = self._pending.popleft().window()
            self._windows.append(window)
            self._stretch = _fold(self._stretches, self._stretch, window,
                                  full=window.seconds >= self.window_s * (1 - 1e-9))


def series_flow(start_s: float) -> Flow:
    """A job's flow over all its engines, kept as its series: final SERIES_LAG_S after each
    window ends, so it says when the bytes moved and trails the flow by that much."""
    return Flow(start_s, lag_s=SERIES_LAG_S)


def _fold(closed: list[Stretch], current: _Open, window: Window, *, full: bool) -> _Open:
    """`window` added to the running stretch, or to a new one when its setting or load is
    not the stretch's (the stretch before then closed into `closed`)."""
    if (window.setting, window.load) != (current.setting, current.load):
        if current.seconds > 0:
            closed.append(current.close())
        current = _Open(window.setting, window.load, window.start_s)
    current.add(window, full)
    return current
