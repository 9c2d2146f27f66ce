"""Samplers: measure the steady throughput of N parallel streams with a real tool.

* `GridFtpSampler`: ``globus-url-copy -p N -partial-offset 0 -partial-length L`` of the real
  source file to a scratch file beside the real destination (third party between two
  servers), removed afterwards, and stopped early after `seconds`. While it runs, the
  scratch file's size is polled (FTP ``SIZE`` on one control connection, or ``stat`` for a
  local file): the first byte gives the set-up time (control and data channels), and the
  rate is taken over the later part of the time data flowed (`steady_rate`).
  Where the size cannot be polled cheaply (gsiftp and the other remote ends are looked at
  through gfal2, one child process per look), the rate comes from the ``-vb`` performance
  markers after the first one, or bytes over wall time. Scratch files at any remote end are
  removed through the metadata layer for remote ends, as the job's owner with its proxy.
* `InPlaceSampler`: the same samples for a transfer job, written into the real destination
  as byte ranges of the transfer (``-partial-offset O -partial-length L``, one range after
  the other from the start of the file), so their bytes need not be sent again. A sample
  that ran to its end leaves its range complete (`written`); one stopped after `seconds`
  leaves its range in doubt, to be sent again with the rest. Samples go to scratch copies
  instead (`scratch_reason` says why) when an in-place sample fails, when the destination
  is not as long as the range just written (a server that does not write at an offset),
  when the existing destination cannot be removed first, or, keeping the ranges written,
  once the next range would pass half of the file.
* `GfalSampler` (`stork.eos.gfal_sampler`): the samples of a transfer with an XRootD or
  WebDAV end, gfal2's copy of the source to a scratch file, with the job's bearer tokens.
* `Iperf3Sampler`: ``iperf3 -c HOST -P N -t T -O 1 -J`` against an iperf3 server at the
  destination host, memory to memory; ``-O 1`` drops the first second (slow start). A run
  the server refuses (it listens again only after the last test's end) is tried again.
"""

from __future__ import annotations

import contextlib
import ftplib
import json
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stork.errors import SamplingError
from stork.identity import RunAs
from stork.process import TIMEOUT, Child
from stork.transfer import destination, verify
from stork.transfer.base import Range, summarize_error
from stork.transfer.registry import GFAL_SCHEMES
from stork.transfer.remote import RemoteEnds
from stork.transfer.tokens import BearerTokens
from stork.tuning.sampling import Sample
from stork.urls import parse_url

_SAMPLE_TIME = "sample time"  # the stop reason of a sample stopped after `seconds`
_SAMPLE_SIZE = "sample size"  # of one stopped when its tool said it had moved enough bytes
IN_PLACE_SHARE = 0.5  # in-place samples stay within this share of the file (the rest is sent
# with the chosen streams)
MODE_E_BLOCK = 256 * 1024  # globus-url-copy's block in extended block mode: each stream
# writes a block at its own offset, so the size (the highest offset) leads the bytes that have
# arrived by up to a block per stream
LEAD_TRUST = 4  # the size's slope is a rate only over an advance of this many leads
CHECKABLE = ("file", "ftp")  # schemes whose size and MD5 Stork reads itself (stork.transfer.verify)


class Sampler(ABC):
    name: str = "sampler"

    @abstractmethod
    def measure(self, streams: int) -> Sample:
        """Run one sample with `streams` parallel streams."""

    def kept_bytes(self) -> int:
        """Bytes the samples so far left complete in the real destination: part of the
        transfer, which does not send them again (none unless samples are written in place)."""
        return 0


def scratch_url(dest_url: str) -> str:
    """A hidden scratch file beside the destination, unique per sample."""
    parts = urlsplit(dest_url)
    directory = parts.path.rsplit("/", 1)[0]
    path = f"{directory}/.stork-sample-{uuid.uuid4().hex[:12]}"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


Point = tuple[float, int]  # (seconds since the sample started, bytes at the destination)


@dataclass(frozen=True)
class Steady:
    mbps: float  # the rate in the steady part
    setup_s: float  # from the start of the sample to the first byte at the destination
    startup_s: float  # from the first byte to the start of the steady part
    startup_bytes: int  # bytes at the destination by the start of the steady part
    finish_s: float = 0.0  # time at the end beyond the steady rate (streams filling gaps)
    widened: bool = False  # the size moved too little against its lead: the whole flow's mean


def steady_rate(points: list[Point], skip: float = 0.4, total: int | None = None,
                lead_bytes: int = 0) -> Steady | None:
    """The steady rate and the start-up before it, or None when the points are too few to
    tell. Pure: the points come from `SizeWatch`. The rate leaves out the first `skip` of the
    time data flowed: TCP's start-up, whose slow-start burst can run far above what a lossy
    path sustains. The size is the highest offset written, which parallel streams advance
    ahead of the bytes that have arrived; that lead is about the same at any two moments of
    the steady part, so the rate is taken between two polls inside it. For a sample that
    moved all of its `total` bytes, the polls after 95% of it are left out: there the size
    stops growing while the streams behind fill their gaps.

    The lead is at most `lead_bytes` (a block per stream), and it is only about the same at
    two moments when the size advanced by several leads between them (LEAD_TRUST). With many
    streams on a long path it does not: the size jumps a block per stream at once, then
    stands while the gaps fill (at 366 ms, 32 streams moved 32 MiB in 8 MiB steps, and the
    steady part read 3 Mbit/s for a sample that ran at 35). Then the rate is the mean from
    the first byte to the end, where a sample that ran through has no lead: it carries the
    start-up, but no jump."""
    flowing = [(t, b) for t, b in points if b > 0]
    if len(flowing) < 3 or flowing[-1][0] - flowing[0][0] < 0.2:
        return None
    first, end = flowing[0], flowing[-1]
    last = end
    cut = first[0] + skip * (last[0] - first[0])
    start = max((p for p in flowing if p[0] <= cut), key=lambda p: p[0])
    if total is not None:
        inside = [p for p in flowing if start[0] < p[0] and p[1] < 0.95 * total]
        if inside and inside[-1][0] - start[0] >= 0.2:
            last = inside[-1]
    if last[0] - start[0] < 0.2:
        start, last = first, end
    widened = last[1] - start[1] < LEAD_TRUST * lead_bytes
    if widened:  # the whole flow: its start-up included, no jump
        start, last = first, end
    mbps = (last[1] - start[1]) * 8 / 1e6 / (last[0] - start[0])
    finish = (end[0] - last[0]) - (end[1] - last[1]) * 8 / 1e6 / max(mbps, 1e-9)
    return Steady(mbps, first[0], start[0] - first[0], start[1], max(finish, 0.0), widened)


class SizeWatch:
    """Polls the size of a file:// or ftp:// URL on a thread while a sample runs; a sample
    written at offset `baseline` of a file counts the size beyond it."""

    def __init__(self, url: str, start: float, interval_s: float = 0.1,
                 baseline: int = 0) -> None:
        self.url = parse_url(url)
        self.start = start
        self.interval_s = interval_s
        self.baseline = baseline
        self.points: list[Point] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="size-watch", daemon=True)

    @staticmethod
    def possible(url: str) -> bool:
        return parse_url(url).scheme in ("file", "ftp")

    def __enter__(self) -> SizeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        ftp = None
        try:
            if self.url.scheme == "ftp":
                ftp = verify.open_ftp(self.url.host, self.url.port)
                ftp.voidcmd("TYPE I")
            while not self._stop.is_set():
                size = self._size(ftp)
                if size is not None:
                    self.points.append((time.monotonic() - self.start,
                                        max(size - self.baseline, 0)))
                self._stop.wait(self.interval_s)
        except (OSError, ftplib.Error, EOFError):
            pass  # polling is best effort: the markers or wall time remain
        finally:
            if ftp is not None:
                ftp.close()

    def _size(self, ftp: ftplib.FTP | None) -> int | None:
        if ftp is None:
            try:
                return os.stat(self.url.path).st_size
            except FileNotFoundError:
                return None
        try:
            size = ftp.size(self.url.path)
        except ftplib.error_perm:  # not created yet
            return None
        return int(size) if size is not None else None


@dataclass
class _Run:
    """What one globus-url-copy sample did, before its rate is worked out."""

    argv: list[str]
    size: int | None  # the target's size after the sample (None: cannot be asked)
    moved: int | None  # bytes of this sample at the target (None: unknown)
    points: list[Point]
    marks: list[tuple[float, int]]  # (monotonic time, bytes) of the -vb markers
    start: float
    elapsed: float
    stopped_early: bool
    stopped_by: str | None = None  # _SAMPLE_TIME or _SAMPLE_SIZE when stopped early


class GridFtpSampler(Sampler):
    name = "gridftp"

    def __init__(self, src_url: str, dest_url: str, sample_bytes: int,
                 globus_url_copy: str = "globus-url-copy", tcp_buffer_bytes: int | None = None,
                 timeout_s: float = 600, x509proxy: str | None = None,
                 seconds: float | None = None, run_as: RunAs | None = None) -> None:
        parse_url(src_url)
        parse_url(dest_url)
        self.src_url = src_url
        self.dest_url = dest_url
        self.sample_bytes = sample_bytes
        self.globus_url_copy = globus_url_copy
        self.tcp_buffer_bytes = tcp_buffer_bytes
        self.timeout_s = timeout_s
        self.seconds = seconds  # stop a sample after this long; its rate comes from what moved
        self.run_as = run_as  # the requesting job's owner, when the daemon is root
        self.env = ({"X509_USER_PROXY": x509proxy}  # added to the daemon's environment
                    if x509proxy and x509proxy != "default" else None)
        # scratch files and sizes at remote ends, as the owner with the job's proxy
        self.ends = RemoteEnds(x509proxy=x509proxy, run_as=run_as)

    def command(self, streams: int, target: str, offset: int = 0,
                length: int | None = None) -> list[str]:
        """The sample's argv: `length` bytes (default `sample_bytes`) of the source from
        `offset`, written at the same offset of `target`."""
        argv = [self.globus_url_copy, "-vb", "-p", str(streams), "-partial-offset", str(offset),
                "-partial-length", str(self.sample_bytes if length is None else length)]
        if self.tcp_buffer_bytes:
            argv += ["-tcp-bs", str(self.tcp_buffer_bytes)]
        return [*argv, self.src_url, target]

    def measure(self, streams: int) -> Sample:
        """A sample to a scratch file beside the destination, removed afterwards."""
        scratch = scratch_url(self.dest_url)
        try:
            run = self._run(streams, self.command(streams, scratch), scratch)
        finally:
            self._remove(scratch)
        return self._sample(streams, run, self.sample_bytes)

    def _remove(self, url: str) -> None:
        """A scratch copy or what in-place samples wrote: a regular file the samples made,
        never a symlink, a device or a FIFO that stands at the destination's name."""
        destination.remove(destination.written_by_samples(url), self.run_as, self.ends)

    def _run(self, streams: int, argv: list[str], target: str, baseline: int = 0,
             stop_at_bytes: int | None = None) -> _Run:
        """Run one sample writing to `target` (at offset `baseline`), stopped once its tool
        says it moved `stop_at_bytes` (a tool that copies whole files); SamplingError when
        the tool fails or runs past `timeout_s`."""
        marks: list[tuple[float, int]] = []
        start = time.monotonic()
        watch = SizeWatch(target, start, baseline=baseline) if SizeWatch.possible(target) else None

        def progress(done: int) -> None:
            marks.append((time.monotonic(), done))
            if stop_at_bytes is not None and done >= stop_at_bytes:
                child.stop(_SAMPLE_SIZE)

        child = Child(argv, env=self.env, run_as=self.run_as,
                      on_progress=lambda p: progress(p.bytes_done))
        with contextlib.ExitStack() as stack:
            try:
                child.start()
            except OSError as exc:
                raise SamplingError(f"cannot run {argv[0]}: {exc.strerror}") from None
            if self.seconds:  # stop early: the rate comes from what moved by then
                timer = threading.Timer(self.seconds, child.stop, args=(_SAMPLE_TIME,))
                timer.daemon = True
                timer.start()
                stack.callback(timer.cancel)
            if watch is not None:
                stack.enter_context(watch)
            ended = child.wait(self.timeout_s)
        elapsed = time.monotonic() - start
        stopped_early = ended.stopped in (_SAMPLE_TIME, _SAMPLE_SIZE)
        if ended.stopped == TIMEOUT:
            raise SamplingError(f"sample with {streams} streams ran past "
                                f"{self.timeout_s:g} s and was stopped")
        if ended.code != 0 and not stopped_early:
            said = summarize_error(ended.stderr_tail) or f"exit status {ended.code}"
            raise SamplingError(f"sample with {streams} streams failed: {said}")
        try:
            size = verify.size_of(target, self.ends)
        except verify.VerifyError:  # the size is a measurement aid: fall back below
            size = None
        moved = max(size - baseline, 0) if size is not None else None
        return _Run(argv, size, moved, list(watch.points) if watch is not None else [], marks,
                    start, elapsed, stopped_early, ended.stopped if stopped_early else None)

    def _sample(self, streams: int, run: _Run, length: int) -> Sample:
        """The sample's steady rate from the target's sizes, else the markers, else bytes
        over wall time."""
        moved = run.moved
        if moved is None:
            moved = run.marks[-1][1] if run.marks else length
        moved = min(moved, length)
        stopped_early = run.stopped_early
        raw: dict[str, object] = {"argv": run.argv, "markers": len(run.marks),
                                  "stopped_after_s": (self.seconds if run.stopped_by ==
                                                      _SAMPLE_TIME else None)}
        if run.stopped_by == _SAMPLE_SIZE:
            raw["stopped_at_bytes"] = length
        points = list(run.points)
        complete = not stopped_early
        if points and points[-1][1] < moved and complete:
            points.append((run.elapsed, moved))  # finished between two polls
        steady = steady_rate(points, total=moved if complete else None,
                             lead_bytes=streams * MODE_E_BLOCK)
        if steady is not None:
            raw.update(method="destination size, " + ("to the end (the steady part moved too "
                                                      "little against the size's lead)"
                                                      if steady.widened else "steady part"),
                       polls=len(points))
            return Sample(streams, steady.mbps, run.elapsed, moved, raw, steady.setup_s,
                          steady.startup_s, steady.startup_bytes, steady.finish_s)
        marks = run.marks
        if len(marks) >= 3:  # drop the first marker: slow start
            (t0, b0), (t1, b1) = marks[1], marks[-1]
            if moved > b1:  # the tail after the last marker, up to the process exit
                t1, b1 = run.start + run.elapsed, moved
            mbps = (b1 - b0) * 8 / 1e6 / max(t1 - t0, 1e-6)
            raw["method"] = "steady (performance markers after the first)"
        else:
            mbps = moved * 8 / 1e6 / max(run.elapsed, 1e-6)
            raw["method"] = "bytes over wall time (sample too short for markers)"
        return Sample(streams, mbps, run.elapsed, moved, raw)


def in_place_refusal(src_url: str, dest_url: str) -> str | None:
    """Why samples of this transfer cannot be written into its destination (None: they can).
    A destination assembled from ranges must be checked whole at the end (size, and MD5 with
    verify_checksum), which Stork does itself only for file:// and ftp:// ends."""
    for end, url in (("source", src_url), ("destination", dest_url)):
        scheme = parse_url(url).scheme
        if scheme not in CHECKABLE:
            return (f"the {end} is {scheme}://, whose size and checksum Stork cannot read "
                    f"itself, so a destination written in ranges could not be checked whole")
    return None


class InPlaceSampler(GridFtpSampler):
    """GridFTP samples written into the real destination as byte ranges of a transfer of
    `size_bytes` (see the module's docstring)."""

    def __init__(self, src_url: str, dest_url: str, sample_bytes: int, size_bytes: int,
                 **kwargs: Any) -> None:
        super().__init__(src_url, dest_url, sample_bytes, **kwargs)
        self.size_bytes = size_bytes
        self.written: list[Range] = []  # ranges complete in the destination, in order
        self.in_place = True  # False once samples go to scratch copies
        self.scratch_reason = ""
        self._offset = 0  # where the next in-place sample starts
        self._cleared = False

    def measure(self, streams: int) -> Sample:
        if self.in_place and self._offset + self.sample_bytes > self.size_bytes * IN_PLACE_SHARE:
            self._to_scratch(f"the next sample would pass {IN_PLACE_SHARE:.0%} of the file; "
                             f"later samples went to scratch copies", keep=True)
        if not self.in_place:
            return super().measure(streams)
        if not self._cleared and not self._clear():
            return super().measure(streams)
        offset, length = self._offset, self.sample_bytes
        argv = self.command(streams, self.dest_url, offset, length)
        try:
            run = self._run(streams, argv, self.dest_url, baseline=offset)
        except SamplingError as exc:
            self._to_scratch(f"a sample written at offset {offset} failed ({exc})", keep=False)
            return super().measure(streams)
        # a sample stopped after `seconds` leaves its range in doubt (parallel streams write
        # out of order): it is sent again with the rest, and the next range starts after it
        self._offset = offset + length
        sample = self._sample(streams, run, length)
        if not run.stopped_early:
            if run.size is not None and run.size < offset + length:
                self._to_scratch(f"after a sample of {length} bytes at offset {offset} the "
                                 f"destination held {run.size} bytes: the server does not "
                                 f"write at an offset", keep=False)
            else:
                self.written.append((offset, length))
        return sample

    def kept_bytes(self) -> int:
        return sum(length for _, length in self.written)

    def _clear(self) -> bool:
        """Remove an existing destination before the first range is written (the transfer
        replaces it anyway); False (and scratch copies) when it cannot be removed."""
        self._cleared = True
        self._remove(self.dest_url)
        try:
            verify.size_of(self.dest_url, self.ends)
        except verify.VerifyError:
            return True  # gone
        self._to_scratch("the existing destination could not be removed first", keep=False)
        return False

    def _to_scratch(self, reason: str, keep: bool) -> None:
        """Later samples go to scratch copies; unless `keep`, what the samples wrote into
        the destination is not trusted and the destination is removed."""
        if not self.in_place:
            return
        self.in_place = False
        self.scratch_reason = reason
        if not keep:
            if self.written or self._offset:
                self._remove(self.dest_url)
            self.written.clear()

    def abandon(self) -> None:
        """The optimization failed: remove what the samples wrote (the transfer will send
        the whole file), so no destination with holes is left behind."""
        if self.written or self._offset:
            self._remove(self.dest_url)
        self.written.clear()
        self._offset = 0


IPERF_TRIES = 3
IPERF_RETRY_WAIT_S = 1.0
# iperf3's words for a server that is not listening or still busy with the last test
IPERF_BETWEEN_TESTS = ("connection refused", "server is busy")


class _Refused(SamplingError):
    """An iperf3 run the server refused (between tests): tried again."""


class Iperf3Sampler(Sampler):
    name = "iperf3"

    def __init__(self, host: str, port: int = 5201, seconds: float = 5.0,
                 executable: str = "iperf3", tcp_buffer_bytes: int | None = None,
                 run_as: RunAs | None = None) -> None:
        self.host = host
        self.port = port
        self.seconds = seconds
        self.executable = executable
        self.tcp_buffer_bytes = tcp_buffer_bytes
        self.run_as = run_as

    def command(self, streams: int) -> list[str]:
        argv = [self.executable, "-c", self.host, "-p", str(self.port), "-P", str(streams),
                "-t", f"{self.seconds:g}", "-O", "1", "-J"]
        if self.tcp_buffer_bytes:
            argv += ["-w", str(self.tcp_buffer_bytes)]
        return argv

    def measure(self, streams: int) -> Sample:
        """One iperf3 run; a run the server refused because it was between two tests (an
        iperf3 server serves one test at a time and listens again only after the last one's
        end, which a sample started right after can beat by a round trip) is tried again
        after IPERF_RETRY_WAIT_S, IPERF_TRIES times in all."""
        for attempt in range(1, IPERF_TRIES + 1):
            try:
                return self._measure_once(streams)
            except _Refused as exc:
                if attempt == IPERF_TRIES:
                    raise SamplingError(f"{exc} ({IPERF_TRIES} tries)") from None
                time.sleep(IPERF_RETRY_WAIT_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def _measure_once(self, streams: int) -> Sample:
        argv = self.command(streams)
        out = bytearray()
        child = Child(argv, run_as=self.run_as, on_stdout=out.extend)
        start = time.monotonic()
        try:
            ended = child.run(timeout_s=self.seconds + 60)
        except OSError as exc:
            raise SamplingError(f"cannot run {argv[0]}: {exc.strerror}") from None
        elapsed = time.monotonic() - start
        stdout = out.decode(errors="replace")
        if ended.stopped == TIMEOUT:
            raise SamplingError(f"iperf3 with {streams} streams to {self.host}:{self.port} "
                                f"ran past {self.seconds + 60:g} s and was stopped")
        try:
            report = json.loads(stdout)
        except ValueError:
            raise SamplingError(f"iperf3 with {streams} streams printed no JSON: "
                                f"{(ended.stderr_tail or stdout).strip()[:300]}") from None
        if "error" in report or ended.code != 0:
            error = str(report.get("error", ended.code))
            failed = f"iperf3 with {streams} streams to {self.host}:{self.port} failed: {error}"
            if any(text in error.lower() for text in IPERF_BETWEEN_TESTS):
                raise _Refused(failed)
            raise SamplingError(failed)
        received = report["end"]["sum_received"]
        return Sample(streams, float(received["bits_per_second"]) / 1e6, elapsed,
                      int(received["bytes"]), {"argv": argv, "method": "iperf3 -O 1"})


def make_sampler(kind: str, src_url: str, dest_url: str, *, sample_bytes: int,
                 seconds: float, iperf_port: int, globus_url_copy: str,
                 tcp_buffer_bytes: int | None, x509proxy: str | None = None,
                 run_as: RunAs | None = None, in_place_size: int | None = None,
                 tokens: BearerTokens | None = None) -> Sampler:
    """The sampler `kind` names: iperf3, or ``gridftp`` (the transfer's own tool: gfal2's
    copy, with the job's `tokens`, when an end is XRootD or WebDAV, else globus-url-copy);
    with `in_place_size` (a transfer of that many bytes whose samples may go into its
    destination), GridFTP samples are written in place."""
    if kind == "iperf3":
        return Iperf3Sampler(parse_url(dest_url).host or "127.0.0.1", iperf_port, seconds,
                             tcp_buffer_bytes=tcp_buffer_bytes, run_as=run_as)
    if any(parse_url(url).scheme in GFAL_SCHEMES for url in (src_url, dest_url)):
        from stork.eos.gfal_sampler import GfalSampler

        return GfalSampler(src_url, dest_url, sample_bytes, tokens=tokens, x509proxy=x509proxy,
                           seconds=seconds, run_as=run_as)
    if in_place_size is not None:
        return InPlaceSampler(src_url, dest_url, sample_bytes, in_place_size,
                              globus_url_copy=globus_url_copy, tcp_buffer_bytes=tcp_buffer_bytes,
                              x509proxy=x509proxy, seconds=seconds, run_as=run_as)
    return GridFtpSampler(src_url, dest_url, sample_bytes, globus_url_copy, tcp_buffer_bytes,
                          x509proxy=x509proxy, seconds=seconds, run_as=run_as)


__all__ = ["GridFtpSampler", "InPlaceSampler", "Iperf3Sampler", "Sampler", "SamplingError",
           "SizeWatch", "Steady", "in_place_refusal", "make_sampler", "scratch_url", "steady_rate"]
