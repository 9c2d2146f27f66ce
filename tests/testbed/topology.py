"""Testbed topologies: sites and the emulated links between them.

A topology is a Python structure or a small TOML file:

    [[site]]
    name = "a"
    [[site]]
    name = "b"
    [[link]]
    a = "a"
    b = "b"
    rtt_ms = 40
    rate_mbps = 200
    loss = 0.001          # per packet, each direction
    queue_bytes = 1000000 # optional; default one bandwidth-delay product (at least 64 KiB)

Only sites joined by a link reach each other (there is no routing through a third site).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

_NAME = re.compile(r"^[a-z][a-z0-9]{0,5}$")


class TopologyError(ValueError):
    """A topology that cannot be built; the message names the site or link."""


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    rtt_ms: float
    rate_mbps: float
    loss: float = 0.0
    queue_bytes: int | None = None

    @property
    def queue(self) -> int:
        """Tail-drop queue in bytes: as configured, else one bandwidth-delay product."""
        if self.queue_bytes is not None:
            return self.queue_bytes
        return max(65536, int(self.rate_mbps * 1e6 / 8 * self.rtt_ms / 1e3))

    @property
    def label(self) -> str:
        return (f"{self.a}-{self.b} {self.rtt_ms:g} ms / {self.loss * 100:g}% loss / "
                f"{self.rate_mbps:g} Mbit/s")


@dataclass(frozen=True)
class Topology:
    sites: tuple[str, ...]
    links: tuple[Link, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not 2 <= len(self.sites) <= 200:
            raise TopologyError(f"a topology needs 2 to 200 sites, got {len(self.sites)}")
        for name in self.sites:
            if not _NAME.match(name):
                raise TopologyError(f"site {name!r}: names are 1-6 lowercase letters or digits, "
                                    "starting with a letter")
        if len(set(self.sites)) != len(self.sites):
            raise TopologyError(f"site names repeat: {list(self.sites)}")
        pairs = set()
        for i, link in enumerate(self.links):
            where = f"link {i + 1} ({link.a}-{link.b})"
            for end in (link.a, link.b):
                if end not in self.sites:
                    raise TopologyError(f"{where}: no site named {end!r}")
            if link.a == link.b:
                raise TopologyError(f"{where}: a link joins two different sites")
            pair = frozenset((link.a, link.b))
            if pair in pairs:
                raise TopologyError(f"{where}: these sites are already linked")
            pairs.add(pair)
            if not 0 < link.rtt_ms <= 5000:
                raise TopologyError(f"{where}: rtt_ms must be in (0, 5000], got {link.rtt_ms}")
            if not 0 < link.rate_mbps <= 10000:
                raise TopologyError(f"{where}: rate_mbps must be in (0, 10000], "
                                    f"got {link.rate_mbps}")
            if not 0 <= link.loss < 1:
                raise TopologyError(f"{where}: loss is a fraction in [0, 1), got {link.loss}")
            if link.queue_bytes is not None and link.queue_bytes < 3000:
                raise TopologyError(f"{where}: queue_bytes must hold two packets (>= 3000)")

    def address(self, site: str) -> str:
        """Each site's one address, in the benchmarking range 198.18.0.0/15 (RFC 2544)."""
        index = self.sites.index(site) + 1
        return f"198.18.{index // 250}.{index % 250 + 1}"

    def link(self, a: str, b: str) -> Link:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise TopologyError(f"no link between {a!r} and {b!r}")


def pair(rtt_ms: float, rate_mbps: float, loss: float = 0.0,
         queue_bytes: int | None = None) -> Topology:
    """Two sites, `a` and `b`, joined by one link."""
    return Topology(("a", "b"), (Link("a", "b", rtt_ms, rate_mbps, loss, queue_bytes),))


# Link profiles used by the tests and benchmarks: name -> (rtt_ms, rate_mbps, loss).
# short: no loss and a 2 ms round trip, where one to four streams already fill the link
# (issue 28's few-streams path; docs/BENCHMARKS.md section 15).
PROFILES: dict[str, tuple[float, float, float]] = {
    "short": (2, 200, 0.0),
    "lan10": (10, 200, 0.0),
    "wan40": (40, 200, 0.001),
    "wan80": (80, 300, 0.0005),
    "lossy20": (20, 100, 0.005),
}


def load(path: Path) -> Topology:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TopologyError(f"{path}: {exc}") from None
    try:
        sites = tuple(str(s["name"]) for s in data.get("site", []))
        links = tuple(Link(str(e["a"]), str(e["b"]), float(e["rtt_ms"]), float(e["rate_mbps"]),
                           float(e.get("loss", 0.0)),
                           int(e["queue_bytes"]) if "queue_bytes" in e else None)
                      for e in data.get("link", []))
    except (KeyError, TypeError, ValueError) as exc:
        raise TopologyError(f"{path}: missing or bad field {exc}") from None
    try:
        return Topology(sites, links)
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from None
