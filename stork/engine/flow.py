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


class Flow:
    """The flow of one engine (its windows carry its settings), or a job's over several
    engines (a series only: it keeps the setting it was made with)."""

    def __init__(self, start_s: float, setting: Setting = SERIES_ONLY, *,
                 window_s: float = 1.0, keep: int = 900, load: int = 0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        self.window_s = window_s
        self._lock = threading.Lock()
        self._windows: deque[Window] = deque(maxlen=keep)
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
        """`nbytes` moved between t0 and t1 (spread evenly; all at t1 when t1 <= t0)."""
        if nbytes <= 0:
            return
        with self._lock:
            self.total_bytes += nbytes
            t0 = max(min(t0, t1), self._start)
            if t1 <= t0:
                self._advance(t1)
                self._bytes += nbytes
                return
            rate = nbytes / (t1 - t0)
            while t1 >= self._start + self.window_s:
                edge = self._start + self.window_s
                if t0 < edge:
                    self._bytes += rate * (edge - t0)
                    t0 = edge
                self._close(edge)
            self._bytes += rate * (t1 - t0)

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
            self._advance(t)
            self._close(t)
            self._setting, self._load = setting, load
            self._new_stretch(t)

    def tick(self, t: float) -> None:
        """Close the windows that ended by `t` (a quiet flow still has windows: at 0)."""
        with self._lock:
            self._advance(t)

    def end(self, t: float) -> None:
        """The flow ended at `t`: the windows up to it closed, the last one short."""
        with self._lock:
            self._advance(t)
            self._close(t)

    # -- reading --------------------------------------------------------------------------

    def windows(self, since_s: float = float("-inf")) -> list[Window]:
        with self._lock:
            return [w for w in self._windows if w.start_s >= since_s]

    def stretches(self, t: float | None = None) -> list[Stretch]:
        """Every stretch so far, the open one as it stands: at `t` when given, with what
        the window still open at `t` holds."""
        with self._lock:
            current = self._stretch
            if t is not None:
                self._advance(t)
                current = dataclasses.replace(self._stretch)
                if t > self._start:
                    current.add(Window(self._start, t - self._start, self._bytes,
                                       self._setting, self._load), full=False)
            return [*self._stretches, current.close()]

    # -- inside the lock ------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        while t >= self._start + self.window_s:
            self._close(self._start + self.window_s)

    def _close(self, end: float) -> None:
        seconds = end - self._start
        if seconds > 0:
            window = Window(self._start, seconds, self._bytes, self._setting, self._load)
            self._windows.append(window)
            self._stretch.add(window, full=seconds >= self.window_s * (1 - 1e-9))
        self._start = end
        self._bytes = 0.0

    def _new_stretch(self, t: float) -> None:
        if self._stretch.seconds > 0:
            self._stretches.append(self._stretch.close())
        self._stretch = _Open(self._setting, self._load, t)
