"""`GfalSampler`: EOS samples between ends that gfal2 reaches (``root://``, ``davs://``,
``https://``, with ``file://`` or ``gsiftp://`` at the other end), with the job's proxy and
bearer tokens.

gfal2 copies whole files, never a byte range, so a sample is the transfer's own tool on the
real source: gfal2's copy (`stork.transfer.gfalhelper` ``copy --streams N``: third party
between two XRootD ends or two WebDAV ends, streamed through the helper otherwise) into a
scratch file beside the destination, stopped as soon as gfal2's progress says it moved
`sample_bytes`, or after `seconds`, and removed afterwards. It runs as the job's owner, and
the tokens reach the helper as they reach the transfer: file names in its environment
(`BearerTokens.environment`), each URL with its own end's token, never a token in an argv.
The scratch file's size and its removal go through the metadata layer with the same tokens
(`RemoteEnds`). The rate comes as for GridFTP samples (`GridFtpSampler._sample`): the scratch
file's size polled when it is local, else gfal2's progress lines after the first, else bytes
over wall time; gfal2 counts the bytes it read, so when its count is ahead of the scratch
file (a sample stopped at its size) the count, up to its last line, is what moved.

N is gfal2's ``nbstreams``: the XRootD client's parallel streams. HTTP has none, so with a
WebDAV end every N measures one flow; each such sample says so (``raw["streams"]``).
"""

from __future__ import annotations

import dataclasses

from stork.eos.samplers import GridFtpSampler, scratch_url
from stork.errors import SamplingError
from stork.identity import RunAs
from stork.transfer import verify
from stork.transfer.remote import GFAL_PYTHON, HELPER, RemoteEnds
from stork.transfer.tokens import BearerTokens
from stork.tuning.sampling import Sample
from stork.urls import parse_url

HTTP_SCHEMES = ("davs", "dav", "https", "http")
ONE_FLOW = "gfal2's nbstreams; HTTP has no parallel streams, so this measured one flow"


class GfalSampler(GridFtpSampler):
    name = "gfal2"

    def __init__(self, src_url: str, dest_url: str, sample_bytes: int, *,
                 tokens: BearerTokens | None = None, x509proxy: str | None = None,
                 seconds: float | None = None, run_as: RunAs | None = None,
                 timeout_s: float = 600, python: str = GFAL_PYTHON) -> None:
        super().__init__(src_url, dest_url, sample_bytes, timeout_s=timeout_s,
                         x509proxy=x509proxy, seconds=seconds, run_as=run_as)
        self.python = python
        # the ends as the owner sees them, with the job's proxy and its token per end: the
        # helper that samples, the scratch file's size, its removal
        self.ends = RemoteEnds(x509proxy=x509proxy, run_as=run_as, tokens=tokens,
                               src_url=src_url, dest_url=dest_url)
        self.env = self.ends.environment() or None
        self.one_flow = any(parse_url(u).scheme in HTTP_SCHEMES for u in (src_url, dest_url))

    def command(self, streams: int, target: str, offset: int = 0,
                length: int | None = None) -> list[str]:
        """gfal2's copy of the whole source to `target` with `streams` as its nbstreams."""
        if offset or length is not None:
            raise SamplingError("gfal2 copies whole files: a sample cannot be a byte range")
        return [self.python, "-I", HELPER, "copy", "--streams", str(streams), self.src_url,
                target]

    def measure(self, streams: int) -> Sample:
        """A copy to a scratch file beside the destination, stopped at `sample_bytes` (or
        after `seconds`), removed afterwards."""
        scratch = scratch_url(self.dest_url)
        try:
            run = self._run(streams, self.command(streams, scratch), scratch,
                            stop_at_bytes=self.sample_bytes)
        finally:
            self._remove(scratch)
        marked = run.marks[-1][1] if run.marks else 0
        if marked > (run.moved or 0):
            # gfal2 counts what it read: a sample stopped at its size leaves less written at
            # the scratch copy (with many streams, nothing yet); the rate is what the tool
            # moved by its last progress line
            run = dataclasses.replace(run, moved=marked, points=[],
                                      elapsed=run.marks[-1][0] - run.start)
        sample = self._sample(streams, run, max(run.moved or 0, 1))
        sample.raw["tool"] = "gfal2 copy of the whole source, stopped at the sample's size"
        if self.one_flow:
            sample.raw["streams"] = ONE_FLOW
        return sample


    def _remove(self, url: str) -> None:
        """Remove a scratch copy; SamplingError when a remote one is still there after (a
        destination token without ``storage.modify`` may create a file it cannot remove):
        no more samples leave files behind, and the EOS's answer says why."""
        super()._remove(url)
        if parse_url(url).scheme == "file":
            return
        try:
            verify.size_of(url, self.ends)
        except verify.VerifyError:
            return  # gone
        raise SamplingError(f"the sample's scratch copy {url} could not be removed with the "
                            f"job's rights and token (removing needs storage.modify over the "
                            f"destination's directory): remove it by hand")


__all__ = ["GfalSampler"]
