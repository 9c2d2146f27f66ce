"""Headless Debian Chromium for tests, the docs' screenshot and the cost benchmark, and a
way to hold a dataset between two batches (its globus-url-copy children stopped)."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from tests.support import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def missing_browser() -> str | None:
    """Why no browser can run here, or None."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return "Debian's chromium and chromium-driver are not installed; run `make setup`"
    return None


def chromium(width: int = 1400, height: int = 1500) -> Any:
    """A Selenium driver for the system's Chromium, headless (nothing is downloaded)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


def children(pid: int, name: str, without: str = "") -> list[int]:
    """Processes whose parent is `pid` and whose command line names `name` (and not
    `without`, when given)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except (OSError, ValueError, IndexError):
            continue
        args = cmdline.split(b"\0")
        if ppid == pid and name.encode() in cmdline and not (without and without.encode()
                                                              in args):
            found.append(int(entry))
    return found


class Freezer:
    """Stops the daemon's globus-url-copy children one after another (each is one batch of
    a dataset; the remote dataset's listing, `globus-url-copy -list`, is left alone);
    `release` lets them all go on."""

    def __init__(self, daemon_pid: int) -> None:
        self.daemon_pid = daemon_pid
        self.frozen: list[int] = []

    def next_batch(self) -> int:
        def fresh() -> int | None:
            new = [p for p in children(self.daemon_pid, "globus-url-copy", without="-list")
                   if p not in self.frozen]
            return new[0] if new else None

        pid: int = wait_for(fresh, 60, 0.01, what="the next batch's globus-url-copy")
        os.kill(pid, signal.SIGSTOP)
        self.frozen.append(pid)
        return pid

    def release(self) -> None:
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
