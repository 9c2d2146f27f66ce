"""Headless Debian Chromium for tests, the docs' screenshot and the cost benchmark, and a
way to hold a dataset between two calls (its globus-url-copy held before it starts)."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from tests.support import alive, wait_for

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
    """Holds a dataset's calls before they start: the daemon runs globus-url-copy through a
    wrapper (`knobs`) that waits, before it starts the tool, while the hold is on and it
    has not been let go. Held at the wrapper, a call cannot slip past as a stopped process
    could: a SIGSTOP sent to a call of one 16 MiB file on loopback came as it was ending,
    and the next call took the rest of the dataset.

    `next_batch` turns the hold on and waits for a call held at it; `release` lets every
    held call go and turns the hold off."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir = workdir
        self.hold_file = workdir / "hold"
        self.tool = workdir / "globus-url-copy"
        real = shutil.which("globus-url-copy")
        if real is None:
            raise RuntimeError("globus-url-copy is not installed; run `make setup`")
        self.tool.write_text(f"""#!/bin/sh
# a call waits here while {self.hold_file} exists and it was not let go (tests/browser.py)
while [ -e {shlex.quote(str(self.hold_file))} ] && [ ! -e {shlex.quote(str(workdir))}/go.$$ ]; do
  : > {shlex.quote(str(workdir))}/held.$$
  sleep 0.02
done
exec {shlex.quote(real)} "$@"
""")
        self.tool.chmod(0o755)
        self.frozen: list[int] = []

    @property
    def knobs(self) -> dict[str, str]:
        """The daemon's configuration that runs its calls through the wrapper."""
        return {"STORK_GLOBUS_URL_COPY": str(self.tool)}

    def hold(self) -> None:
        """Calls started from now on wait at the wrapper."""
        self.hold_file.touch()

    def next_batch(self) -> int:
        """Hold calls, and wait for one (not held before) to be held; its pid."""
        self.hold()

        def fresh() -> int | None:
            for held in sorted(self.dir.glob("held.*")):
                pid = int(held.suffix[1:])
                if pid not in self.frozen and alive(pid):
                    return pid
            return None

        pid: int = wait_for(fresh, 60, 0.01, what="the next call held at the wrapper")
        self.frozen.append(pid)
        return pid

    def release(self) -> None:
        """Let every held call go, and hold no more."""
        for held in self.dir.glob("held.*"):
            (self.dir / f"go{held.suffix}").touch()
        self.hold_file.unlink(missing_ok=True)
