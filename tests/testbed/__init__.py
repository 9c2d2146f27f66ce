"""A wide-area testbed on one machine: sites in network namespaces, links emulated in userspace.

`topology` describes sites and links, `linkemu` is the link emulator process, `netns.Testbed`
builds and tears down a topology, `dataset` writes many-file datasets at a site, `grid` moves
one over a (cc, p, pp, fast) grid into rows of the HARP grid tables, `jobs` runs a
stork_server inside a site and waits for its jobs, `selfcheck` and `sweep` are command-line
tools.
"""

from tests.testbed.netns import Testbed, TestbedUnavailable, leftovers, unavailable_reason
from tests.testbed.topology import PROFILES, Link, Topology, TopologyError, load, pair

__all__ = ["PROFILES", "Link", "Testbed", "TestbedUnavailable", "Topology", "TopologyError",
           "leftovers", "load", "pair", "unavailable_reason"]
