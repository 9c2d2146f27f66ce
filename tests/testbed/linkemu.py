"""A userspace link emulator: the wire between two TUN devices.

Kernel netem is not available on these machines, so the testbed's links are this process.
It opens two TUN devices (IFF_TUN | IFF_NO_PI: one IP packet per read), which the testbed
then moves into the two sites' network namespaces; the open descriptors stay valid there.
Every packet read from one device is written to the other after passing a `Shaper`:

* random loss with probability `loss`, per packet and direction;
* a bottleneck of `rate_mbps`: a serialisation clock, so a packet of L bytes leaves
  L * 8 / rate after the one before it (or now, if the link is idle);
* a tail-drop queue of `queue_bytes` in front of the bottleneck;
* a one-way delay of rtt / 2 after the packet has left the bottleneck.

Run as ``python -m tests.testbed.linkemu --tun A --tun B --rtt-ms 40 --rate-mbps 200 ...``;
it prints ``ready`` once both devices exist and, on SIGTERM, writes its counters as JSON to
``--stats`` and exits. It dies with its parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import random
import select
import signal
import struct
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
PR_SET_PDEATHSIG = 1
READ_BATCH = 64


@dataclass
class Counters:
    packets: int = 0
    bytes: int = 0
    lost: int = 0
    queue_drops: int = 0


class Shaper:
    """One direction of a link. Pure: time is passed in, randomness comes from `rng`."""

    def __init__(self, rate_mbps: float, delay_s: float, loss: float, queue_bytes: int,
                 rng: random.Random) -> None:
        self.bytes_per_s = rate_mbps * 1e6 / 8
        self.delay_s = delay_s
        self.loss = loss
        self.queue_bytes = queue_bytes
        self.rng = rng
        self.free_at = 0.0  # when the bottleneck finishes sending what it has
        self.counters = Counters()

    def backlog(self, now: float) -> float:
        """Bytes waiting for the bottleneck at `now` (FIFO at a constant rate)."""
        return max(0.0, self.free_at - now) * self.bytes_per_s

    def offer(self, now: float, length: int) -> float | None:
        """When a packet of `length` bytes arriving at `now` comes out, or None if dropped."""
        if self.loss and self.rng.random() < self.loss:
            self.counters.lost += 1
            return None
        if self.backlog(now) + length > self.queue_bytes:
            self.counters.queue_drops += 1
            return None
        self.free_at = max(now, self.free_at) + length / self.bytes_per_s
        self.counters.packets += 1
        self.counters.bytes += length
        return self.free_at + self.delay_s


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def forward(fds: tuple[int, int], shapers: tuple[Shaper, Shaper], stop: list[bool]) -> None:
    """Move packets fds[0] -> fds[1] through shapers[0] and back through shapers[1]."""
    queues: tuple[deque[tuple[float, bytes]], deque[tuple[float, bytes]]] = (deque(), deque())
    ways = {fds[0]: (shapers[0], queues[0]), fds[1]: (shapers[1], queues[1])}
    outs = ((queues[0], fds[1]), (queues[1], fds[0]))
    clock = time.monotonic
    while not stop[0]:
        due = [q[0][0] for q in queues if q]
        timeout = max(0.0, min(due) - clock()) if due else 0.5
        try:
            readable, _, _ = select.select(fds, (), (), timeout)
        except InterruptedError:
            continue
        now = clock()
        for fd in readable:
            shaper, queue = ways[fd]
            for _ in range(READ_BATCH):
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                at = shaper.offer(now, len(packet))
                if at is not None:
                    queue.append((at, packet))
        now = clock()
        for queue, out in outs:
            while queue and queue[0][0] <= now:
                # the receiving device's queue is full or it went down: a loss
                with contextlib.suppress(BlockingIOError, OSError):
                    os.write(out, queue.popleft()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tun", action="append", required=True, help="device name (twice)")
    parser.add_argument("--rtt-ms", type=float, required=True)
    parser.add_argument("--rate-mbps", type=float, required=True)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--queue-bytes", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stats", help="write counters here as JSON on exit")
    args = parser.parse_args(argv)
    if len(args.tun) != 2:
        parser.error("give --tun exactly twice")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    stop = [False]

    def on_signal(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    fds = (open_tun(args.tun[0]), open_tun(args.tun[1]))
    rng = random.Random(args.seed)
    shapers = tuple(Shaper(args.rate_mbps, args.rtt_ms / 2e3, args.loss, args.queue_bytes, rng)
                    for _ in range(2))
    print("ready", flush=True)
    try:
        forward(fds, (shapers[0], shapers[1]), stop)
    finally:
        if args.stats:
            with open(args.stats, "w") as handle:
                json.dump({"a_to_b": asdict(shapers[0].counters),
                           "b_to_a": asdict(shapers[1].counters)}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
