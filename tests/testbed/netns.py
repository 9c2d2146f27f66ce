"""Emulated sites on one machine: network namespaces joined by `linkemu` over TUN devices.

    with Testbed(pair(40, 200, 0.001), workdir) as bed:
        bed.run("a", ["iperf3", "-c", bed.address("b"), "-P", "4"])
        url = bed.url("b", "/path/file")           # ftp://198.18.0.3:2811/path/file

Each site is a namespace named ``stb<pid>-<site>`` with its address on ``lo`` and, per link,
a TUN device routed to the peer's address. Each site runs ``globus-gridftp-server`` (control
and data interface on the site address, anonymous) and an ``iperf3`` server. The TCP
congestion control is set in the root namespace before the namespaces are created (a
namespace copies it at creation; it cannot be changed inside) and put back right after.
Everything is torn down on exit, on error, on Ctrl-C and on SIGTERM; namespaces left by a
testbed whose process died are removed by the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tests.support import alive
from tests.testbed.topology import Link, Topology

PREFIX = "stb"
GRIDFTP_PORT = 2811
IPERF_PORT = 5201
CC_SYSCTL = Path("/proc/sys/net/ipv4/tcp_congestion_control")
CC_AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
TOOLS = ("ip", "globus-gridftp-server", "globus-url-copy", "iperf3")


class TestbedUnavailable(RuntimeError):
    """This machine cannot host the testbed; the message says what is missing."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why the testbed cannot run here, or None if it can."""
    if os.geteuid() != 0:
        return "the testbed needs root (network namespaces, TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)} (make setup installs them)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
        os.close(fd)
    except OSError as exc:
        return f"cannot open /dev/net/tun: {exc}"
    return None


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def terminate(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM a process still running, SIGKILL it after `grace_s`; reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_namespace(name: str) -> None:
    """Kill every process in namespace `name`, delete it and its /etc/netns files."""
    for _ in range(3):
        pids = _ip("netns", "pids", name, check=False).stdout.split()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)
    _ip("netns", "del", name, check=False)
    shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def remove_stale() -> list[str]:
    """Remove the namespaces of testbeds whose process is gone; return their names."""
    stale = []
    for name in _namespaces():
        match = re.fullmatch(rf"{PREFIX}(\d+)(n\d+)?-[a-z0-9]+", name)
        if match and not alive(int(match.group(1))):
            remove_namespace(name)
            stale.append(name)
    return stale


def leftovers(owner: int | str | None = None) -> list[str]:
    """Namespaces and TUN devices that still exist, of the testbeds of process `owner` (a pid),
    of one testbed (`owner` is its tag), or of any testbed (None)."""
    tag = f"{PREFIX}{owner}" if isinstance(owner, int) else owner or PREFIX
    mine = re.compile(rf"^{re.escape(tag)}(?!\d)" if owner is not None else rf"^{PREFIX}\d")
    links = _ip("-o", "link", "show", check=False).stdout
    names = _namespaces() + re.findall(r"^\d+: ([^:@]+)", links, re.M)
    return [n for n in names if mine.match(n)]


class Testbed:
    __test__ = False  # not a pytest test class
    _count = 0

    def __init__(self, topology: Topology, workdir: Path, congestion: str = "cubic",
                 servers: bool = True, seed: int = 1) -> None:
        self.topology = topology
        self.workdir = workdir
        self.congestion = congestion
        self.servers = servers
        self.seed = seed
        Testbed._count += 1
        self.tag = f"{PREFIX}{os.getpid()}" + (f"n{Testbed._count}" if Testbed._count > 1 else "")
        self.emulators: list[tuple[Link, subprocess.Popen[str], Path]] = []
        self.stats: dict[str, Any] = {}
        self.site_congestion: dict[str, str] = {}
        self._saved_cc: str | None = None
        self._old_handlers: dict[int, Any] = {}
        self._up = False

    # --- naming -----------------------------------------------------------------------
    def namespace(self, site: str) -> str:
        return f"{self.tag}-{site}"

    def address(self, site: str) -> str:
        return self.topology.address(site)

    def url(self, site: str, path: str | Path) -> str:
        return f"ftp://{self.address(site)}:{GRIDFTP_PORT}{path}"

    def site_dir(self, site: str) -> Path:
        path = self.workdir / f"site-{site}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _tun(self, index: int, end: str) -> str:
        name = f"{self.tag}l{index}{end}"
        if len(name) > 15:  # the kernel's limit for device names
            raise RuntimeError(f"device name {name!r} too long: too many links or testbeds")
        return name

    # --- running things inside a site -----------------------------------------------------
    def argv(self, site: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(site), *argv]

    def run(self, site: str, argv: list[str], timeout: float = 600,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(site, argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False, **kwargs)

    def popen(self, site: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.argv(site, argv), **kwargs)

    def listening(self, site: str, port: int) -> bool:
        out = subprocess.run(["ss", "-N", self.namespace(site), "-Hltn", f"sport = :{port}"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
        return bool(out.strip())

    # --- life cycle -------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self._trap_signals()
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _trap_signals(self) -> None:
        """SIGTERM and SIGHUP unwind like Ctrl-C, so `finally` tears the testbed down."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return

        def interrupt(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        for signum in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[signum] = signal.signal(signum, interrupt)

    def start(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        if self.congestion not in CC_AVAILABLE.read_text().split():
            raise TestbedUnavailable(f"congestion control {self.congestion!r} is not available "
                                     f"(have: {CC_AVAILABLE.read_text().strip()})")
        remove_stale()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._up = True
        self._saved_cc = CC_SYSCTL.read_text().strip()
        try:
            CC_SYSCTL.write_text(self.congestion)
            for site in self.topology.sites:
                _ip("netns", "add", self.namespace(site))
        finally:
            CC_SYSCTL.write_text(self._saved_cc)
            self._saved_cc = None
        for site in self.topology.sites:
            self._configure_site(site)
        for index, link in enumerate(self.topology.links):
            self._start_link(index, link)
        if self.servers:
            for site in self.topology.sites:
                self._start_servers(site)

    def _configure_site(self, site: str) -> None:
        ns = self.namespace(site)
        etc = Path(f"/etc/netns/{ns}")
        etc.mkdir(parents=True, exist_ok=True)
        hosts = ["127.0.0.1 localhost"]
        hosts += [f"{self.address(s)} {s} site-{s}" for s in self.topology.sites]
        hosts.append(f"{self.address(site)} {socket.gethostname()}")
        (etc / "hosts").write_text("\n".join(hosts) + "\n")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.address(site)}/32", "dev", "lo")
        for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
            self.run(site, ["sysctl", "-qw", f"{key}=1"])
        cc = self.run(site, ["cat", str(CC_SYSCTL)]).stdout.strip()
        self.site_congestion[site] = cc
        if cc != self.congestion:
            raise TestbedUnavailable(f"site {site} got congestion control {cc!r}, "
                                     f"not {self.congestion!r}")

    def _start_link(self, index: int, link: Link) -> None:
        tun_a, tun_b = self._tun(index, "a"), self._tun(index, "b")
        stats = self.workdir / f"link{index}-{link.a}-{link.b}.json"
        stats.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "tests.testbed.linkemu", "--tun", tun_a, "--tun", tun_b,
                "--rtt-ms", str(link.rtt_ms), "--rate-mbps", str(link.rate_mbps),
                "--loss", str(link.loss), "--queue-bytes", str(link.queue),
                "--seed", str(self.seed + index), "--stats", str(stats)]
        repo = str(Path(__file__).resolve().parents[2])
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=repo, env={**os.environ, "PYTHONPATH": repo})
        self.emulators.append((link, proc, stats))
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"link emulator for {link.label} did not start: {err[-800:]}")
        for tun, here, there in ((tun_a, link.a, link.b), (tun_b, link.b, link.a)):
            ns = self.namespace(here)
            _ip("link", "set", tun, "netns", ns)
            _ip("-n", ns, "link", "set", tun, "mtu", "1500", "up")
            _ip("-n", ns, "route", "add", f"{self.address(there)}/32", "dev", tun,
                "src", self.address(here))

    def _start_servers(self, site: str) -> None:
        address = self.address(site)
        log = self.site_dir(site) / "gridftp.log"
        self.popen(site, ["globus-gridftp-server", "-aa", "-anonymous-user", "root",
                          "-allow-root", "-p", str(GRIDFTP_PORT), "-control-interface", address,
                          "-data-interface", address, "-d", "ERROR", "-l", str(log)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   start_new_session=True)
        self.popen(site, ["iperf3", "-s", "-B", address, "-p", str(IPERF_PORT)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   start_new_session=True)
        deadline = time.monotonic() + 20
        while not (self.listening(site, GRIDFTP_PORT) and self.listening(site, IPERF_PORT)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"site {site}: servers did not start listening; see {log}")
            time.sleep(0.1)

    def link_stats(self) -> dict[str, Any]:
        """Counters of each link emulator (available after stop)."""
        return dict(self.stats)

    def stop(self) -> None:
        if self._saved_cc is not None:
            CC_SYSCTL.write_text(self._saved_cc)
            self._saved_cc = None
        if self._up:
            for site in self.topology.sites:
                remove_namespace(self.namespace(site))
            for link, proc, stats in self.emulators:
                terminate(proc)
                if stats.exists():
                    self.stats[f"{link.a}-{link.b}"] = json.loads(stats.read_text())
            self.emulators.clear()
            self._up = False
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()
