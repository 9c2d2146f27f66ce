"""Whose rights an estimation request's samples run with, and what it may touch.

An estimation asked through an API samples real files, so it is held to the same rule as a
transfer job: it acts with the rights of whoever asked. Before any byte moves:
- a local (`file://`) end is refused outright where the server's operator has not allowed
  local ends for such callers (eos_server's remote callers, `EOS_ALLOW_LOCAL_SOURCES`);
- a local source must be readable by the user the samples run as (opened as that user);
- a server that cannot change user (not root) serves local ends only to its own user.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from typing import Any

from stork.caller import Caller
from stork.eos.types import EstimateRequest
from stork.errors import InvalidRequest, PermissionDenied, StorkError
from stork.identity import RunAs, open_as
from stork.urls import parse_url


def request_from(body: Mapping[str, Any]) -> EstimateRequest:
    """The estimation an API body asks for; InvalidRequest saying what is malformed."""
    try:
        return EstimateRequest.from_json(body)
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidRequest(f"bad estimation request: {exc}") from None


def sample_user(name: str) -> RunAs | None:
    """The RunAs for a named user when this process is root (eos_server's samples), else
    None (the process's own rights)."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        raise PermissionDenied(f"EOS_SAMPLE_USER {name!r} is not a user on this machine") from None
    return RunAs.for_owner(uid)


def check_local_ends(src_url: str, dest_url: str, caller: Caller, run_as: RunAs | None, *,
                     allow_local: bool, knob: str = "") -> None:
    """PermissionDenied (naming the URL) unless `caller` may have these ends sampled with
    the rights of `run_as` (None: this process's own)."""
    for role, url in (("source", src_url), ("destination", dest_url)):
        parsed = parse_url(url)
        if parsed.scheme != "file":
            continue
        if not allow_local:
            raise PermissionDenied(f"{role} {url}: local files are not sampled for remote "
                                   f"callers" + (f" ({knob} is false)" if knob else ""))
        if run_as is None and caller.uid not in (0, os.geteuid()):
            me = pwd.getpwuid(os.geteuid()).pw_name
            raise PermissionDenied(f"{role} {url}: this server runs as {me} and cannot act "
                                   f"with the rights of {caller.name}")
        if role == "source":
            try:
                os.close(open_as(run_as, parsed.path, os.O_RDONLY | os.O_NONBLOCK))
            except (OSError, StorkError) as exc:
                who = run_as.name if run_as is not None else caller.name
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise PermissionDenied(f"source {url}: {who} cannot read it: {reason}") from None
