"""What an attempt leaves at its ends, looked at as the job's owner.

After exit 0 `verify_destination` compares the destination with the source (sizes, the ad's
`checksum`, with `verify_checksum` the strongest checksum type both ends answer; into a sink
only the source can be read), each end asked through `Plan.ends`, and once more after
VERIFY_REASK_S when it does not answer. `still_there` tells whether the file a stored claim
names still stands (ranges that landed in it are worth keeping), `dest_size` reads a
destination's size, and `remove_partial` removes what an attempt wrote of a partial or bad
destination, and only that. Everything is done with the rights of the job's owner
(`owner_ends` outside an attempt, for crash recovery); nothing here writes the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from stork.engine.items import Span, holds
from stork.errors import (
    ChecksumMismatch,
    DestinationMismatch,
    IdentityError,
    StorkError,
    TransferError,
)
from stork.identity import RunAs
from stork.job import Job
from stork.server.attempt_plan import Plan
from stork.transfer import destination, verify
from stork.transfer.destination import Destination
from stork.transfer.remote import RemoteEnds, common_checksum
from stork.urls import parse_url

log = logging.getLogger(__name__)

VERIFY_REASK_S = 2.0  # an end that did not answer the verification is asked once more


def dest_size(url: str, ends: RemoteEnds) -> int | None:
    """A destination's size as the job's owner sees it (None: not there, or no answer when
    asked twice, VERIFY_REASK_S apart)."""
    return verify.size_asked_twice(url, ends, VERIFY_REASK_S)


def owner_ends(job: Job, dest_url: str) -> RemoteEnds:
    """Remote ends as the job's owner, with its proxy and tokens (out of an attempt: crash
    recovery). IdentityError when the owner is no user here."""
    run_as = RunAs.for_owner(job.owner_uid)
    return RemoteEnds(x509proxy=job.spec.x509proxy, run_as=run_as,
                      tokens=job.spec.bearer_tokens, src_url=job.spec.src_url,
                      dest_url=dest_url)


def still_there(claim: Destination, owner_uid: int, landed: Sequence[Span] = (),
                ends: Callable[[], RemoteEnds] | None = None) -> bool:
    """Whether the file a stored claim names still stands at its URL (the same file: a local
    one by its device and inode, looked at as its owner; on an FTP server by its `Unique`
    fact): ranges that landed in it are worth keeping. A claim that names no file (gsiftp,
    root and davs ends cannot) stands while the destination, asked through `ends`, is long
    enough to hold the `landed` spans (`holds`)."""
    if claim.file is None:
        try:
            return ends is not None and holds(landed, dest_size(claim.url, ends()))
        except IdentityError:
            return False
    try:
        found = destination.look(claim.url, RunAs.for_owner(owner_uid))
    except StorkError:
        return False
    return found.file is not None and found.file.key == claim.file.key


def verify_destination(plan: Plan) -> tuple[TransferError | None, int | None]:
    """(what is wrong with the destination or None, the destination's size). Both ends are
    looked at as the job's owner with the job's proxy (`Plan.ends`): sizes; the ad's
    `checksum` (the expected value, FTS3-style) at the destination; with `verify_checksum`
    the strongest checksum type both ends answer. A checksum that differs is
    `ChecksumMismatch`; anything else `DestinationMismatch`. An end that does not answer is
    asked once more after VERIFY_REASK_S: a query costs far less than sending the file again."""
    try:
        return _compare_ends(plan)
    except verify.VerifyError as first:
        log.warning("job %s: %s; asking again in %g s", plan.job.id, first, VERIFY_REASK_S)
    time.sleep(VERIFY_REASK_S)
    try:
        return _compare_ends(plan)
    except verify.VerifyError as exc:
        return DestinationMismatch(f"{exc} (asked twice, {VERIFY_REASK_S:g} s apart)"), None


def _compare_ends(plan: Plan) -> tuple[TransferError | None, int | None]:
    """verify_destination's one pass; VerifyError when an end cannot be read."""
    if plan.destination is not None and plan.destination.is_sink:
        return _check_source(plan)
    ends = plan.ends
    src, dest = plan.src_url, plan.dest_url
    sizes = verify.sizes_of([src, dest], ends)
    if sizes[src] is not None and sizes[dest] is not None and sizes[src] != sizes[dest]:
        if plan.destination is not None and destination.untouched(plan.destination, plan.run_as):
            raise verify.VerifyError("size", dest, "it is still the empty file the attempt "
                                                   "created: the tool wrote nothing into it")
        return (DestinationMismatch(f"destination size {sizes[dest]} differs from source "
                                    f"size {sizes[src]}"), sizes[dest])
    expected = plan.job.spec.checksum
    if expected:
        kind, _, value = expected.partition(":")
        have = verify.checksum_of(dest, kind, ends)
        if have != value:
            return (ChecksumMismatch(f"destination {kind} {have} is not the expected "
                                     f"{value} (checksum = \"{expected}\")"), sizes[dest])
    if plan.request.verify_checksum:
        common = common_checksum(parse_url(src).scheme, parse_url(dest).scheme)
        if common is None:
            if not plan.module.verifies_checksum:
                return (DestinationMismatch("verify_checksum is set but no checksum type "
                                            "is answered by both ends"), sizes[dest])
        else:
            src_sum, dest_sum = verify.checksum_of(src, common, ends), \
                verify.checksum_of(dest, common, ends)
            if src_sum != dest_sum:
                return (ChecksumMismatch(f"destination {common} {dest_sum} differs from "
                                         f"source {common} {src_sum}"), sizes[dest])
    return None, sizes[dest]


def source_checksum_type(plan: Plan) -> str | None:
    """The checksum type a transfer into a sink computes of its source with
    verify_checksum: the strongest its end answers (None: no such check asked or possible)."""
    if not plan.job.spec.verify_checksum:
        return None
    scheme = parse_url(plan.src_url).scheme
    return common_checksum(scheme, scheme)


def _check_source(plan: Plan) -> tuple[TransferError | None, int | None]:
    """A sink (a device, a FIFO) cannot be read back: the attempt moved the source's size,
    and the ad's `checksum` (the expected value) is compared with the source's."""
    size = verify.size_of(plan.src_url, plan.ends)
    expected = plan.job.spec.checksum
    if expected:
        kind, _, value = expected.partition(":")
        have = verify.checksum_of(plan.src_url, kind, plan.ends)
        if have != value:
            return (ChecksumMismatch(f"source {kind} {have} is not the expected {value} "
                                     f"(checksum = \"{expected}\"; the destination is a "
                                     f"sink and cannot be read back)"), size)
    return None, size


def remove_partial(job: Job, dest: Destination) -> None:
    """Remove what an attempt wrote of a partial or bad destination, and only that
    (`destination.remove`), with the rights of the job's owner (a remote end with the
    job's proxy)."""
    try:
        ends = owner_ends(job, dest.url)
    except IdentityError:
        return
    done = destination.remove(dest, ends.run_as, ends)
    log.info("job %d: %s", job.id, done)
