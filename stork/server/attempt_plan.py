"""The plan of an attempt: what it will run, decided before anything starts.

`plan_attempt` turns the job the task matrix selected into a `Plan`: the URLs of this
attempt (alt_protocols), the transfer module, the request for it, and the owner it runs as,
with the job's proxy and bearer tokens checked before any byte moves. A job that cannot run
at all raises `NotLaunchable`, which counts as a failed attempt. The EOS phase may give the
plan its stream count (`Plan.with_streams`) or leave only a rest to send (`Plan.with_rest`),
and `Attempts.launch` claims the destination (`Plan.claimed`); `as_ranges` tells whether the
plan runs through the engine as byte ranges. Nothing here starts a process or writes the
store.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stork.config import Settings
from stork.engine.items import Span
from stork.errors import (
    BearerTokenError,
    CredentialInvalid,
    IdentityError,
    NoTransferModule,
    PermanentTransferError,
    StorkError,
    TransferError,
)
from stork.identity import RunAs
from stork.job import Job
from stork.server.judge import urls_for_attempt
from stork.transfer.base import Range, TransferModule, TransferRequest
from stork.transfer.destination import Destination
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.proxy import ProxyFacts, check_proxy, uses_proxy
from stork.transfer.registry import Registry
from stork.transfer.remote import X509_SCHEMES, RemoteEnds
from stork.transfer.tokens import NO_TOKENS, TokenFacts, check_tokens
from stork.urls import parse_url


class NotLaunchable(StorkError):
    """The attempt cannot start at all (no module for the URLs, no such owner): it counts
    as an attempt that failed with `failure` (permanent)."""

    def __init__(self, failure: TransferError, exit_code: int, src_url: str,
                 dest_url: str) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.exit_code = exit_code
        self.src_url = src_url
        self.dest_url = dest_url


@dataclass(frozen=True)
class Plan:
    """One attempt as it will run."""

    job: Job  # as read when the attempt was planned
    attempt_no: int
    module: TransferModule
    request: TransferRequest
    run_as: RunAs | None
    optimized: bool = False  # the stream count is the EOS's choice
    # bytes the EOS's samples already wrote into the destination (`request.ranges` is the rest)
    bytes_in_destination: int = 0
    proxy: ProxyFacts | None = None  # the job's x509proxy, checked when the attempt was planned
    tokens: TokenFacts = NO_TOKENS  # the job's bearer tokens, read when it was planned
    # what the destination is and what of it this attempt may remove (claimed at launch)
    destination: Destination | None = None
    # byte spans of the file an attempt before this one landed as ranges (`FileRun`)
    landed: tuple[Span, ...] = ()

    @property
    def ends(self) -> RemoteEnds:
        """Remote ends as the job's owner sees them, with the job's proxy."""
        return RemoteEnds(x509proxy=self.request.x509proxy, run_as=self.run_as,
                          tokens=self.request.tokens, src_url=self.src_url,
                          dest_url=self.dest_url)

    @property
    def src_url(self) -> str:
        return self.request.src_url

    @property
    def dest_url(self) -> str:
        return self.request.dest_url

    @property
    def streams(self) -> int | None:
        """Parallel streams the tool will use (None for modules without -p)."""
        if not self.module.takes_streams:
            return None
        return self.request.options.streams or self.request.default_streams

    def with_streams(self, streams: int) -> Plan:
        """The plan with the EOS's stream count."""
        options = dataclasses.replace(self.request.options, streams=streams)
        return dataclasses.replace(self, request=dataclasses.replace(self.request, options=options),
                                   optimized=True)

    def claimed(self, dest: Destination) -> Plan:
        """The plan with its claimed destination. Into a sink the tool compares no checksum
        (the destination's cannot be read; Stork records the source's), and a sink that
        takes its bytes in order (a FIFO, a device other than null) gets one stream,
        whatever was asked."""
        if not dest.is_sink:
            return dataclasses.replace(self, destination=dest)
        options = self.request.options
        if dest.ordered:
            options = dataclasses.replace(options, streams=1)
        request = dataclasses.replace(self.request, options=options, verify_checksum=False)
        return dataclasses.replace(self, destination=dest, request=request)

    def with_rest(self, ranges: tuple[Range, ...], bytes_in_destination: int) -> Plan:
        """The plan that sends only `ranges`: the samples wrote the rest into the destination."""
        return dataclasses.replace(self, request=dataclasses.replace(self.request, ranges=ranges),
                                   bytes_in_destination=bytes_in_destination)


def plan_attempt(job: Job, registry: Registry, settings: Settings) -> Plan:
    """The next attempt of `job` (NotLaunchable when it cannot run)."""
    attempt_no = job.attempts + 1
    src, dest = urls_for_attempt(job, attempt_no)
    module: TransferModule | None
    if job.spec.is_dataset:  # datasets run through globus-url-copy's lists
        module = GridFtpModule(settings.globus_url_copy)
    else:
        module = registry.find(parse_url(src).scheme, parse_url(dest).scheme)
    if module is None:
        raise NotLaunchable(NoTransferModule(src, dest), 127, src, dest)
    try:
        run_as = RunAs.for_owner(job.owner_uid)
    except IdentityError as exc:
        raise NotLaunchable(PermanentTransferError(str(exc)), 126, src, dest) from None
    proxy = None
    schemes = {url.partition("://")[0].lower() for url in (src, dest)}
    if job.spec.x509proxy is not None and uses_proxy(job.spec.x509proxy) \
            and schemes & X509_SCHEMES:
        try:  # before any byte moves: a proxy that cannot work fails the job at once
            proxy = check_proxy(job.spec.x509proxy, owner_uid=job.owner_uid, run_as=run_as)
        except CredentialInvalid as exc:
            raise NotLaunchable(exc, 126, src, dest) from None
    try:  # read again at each attempt: a file something keeps fresh is used as it is now
        tokens = check_tokens(job.spec.bearer_tokens, src, dest, owner_uid=job.owner_uid,
                              run_as=run_as, x509proxy=job.spec.x509proxy)
    except BearerTokenError as exc:
        raise NotLaunchable(exc, 126, src, dest) from None
    request = TransferRequest(src, dest, job.spec.options, settings.default_streams,
                              job.spec.verify_checksum, job.spec.x509proxy,
                              tokens=job.spec.bearer_tokens)
    return Plan(job, attempt_no, module, request, run_as, proxy=proxy, tokens=tokens)


def as_ranges(plan: Plan, settings: Settings) -> bool:
    """Whether a single-file attempt runs through the engine (`FileRun`: sent as byte
    ranges when the file is large enough): its module's worker writes ranges in place, the
    destination is no sink, no EOS samples left only a rest to send, and STORK_ENGINE is
    flow."""
    return (settings.engine == "flow" and not plan.job.spec.is_dataset
            and plan.module.writes_ranges
            and type(plan.module).worker is not TransferModule.worker
            and not plan.request.ranges
            and not (plan.destination is not None and plan.destination.is_sink))
