"""Copies of bearer tokens the daemon keeps for queued jobs.

A job that names a token file is read from that file at each attempt; the daemon keeps
nothing. A token that reached stork_submit only as the value of ``BEARER_TOKEN`` has no file
of the user's, so the daemon keeps a copy: ``STATE_DIR/tokens/<random>.token``, mode 0600,
owned by the job's owner (whose tools read it), named on the job as its
`bearer_token_file`, and removed when the job ends (`release`). The directory is 0711: an
owner reaches their own copy by its name, and lists nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path

from stork.job import Job

log = logging.getLogger(__name__)

DIRECTORY = "tokens"


def directory(state_dir: str) -> Path:
    return Path(state_dir) / DIRECTORY


def keep(state_dir: str, token: str, owner_uid: int) -> str:
    """A new 0600 copy of `token`, owned by `owner_uid`; its path."""
    where = directory(state_dir)
    where.mkdir(mode=0o711, exist_ok=True)
    where.chmod(0o711)
    path = where / f"{secrets.token_hex(16)}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, token.strip().encode() + b"\n")
        if os.geteuid() == 0 and owner_uid != 0:
            os.fchown(fd, owner_uid, -1)
    finally:
        os.close(fd)
    return str(path)


def is_kept(state_dir: str, path: str | None) -> bool:
    return bool(path) and Path(str(path)).parent == directory(state_dir)


def forget(state_dir: str, path: str | None) -> None:
    """Remove a kept copy (a submission that did not land)."""
    if path and is_kept(state_dir, path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def release(state_dir: str, job: Job) -> None:
    """Remove the copies a job that has ended used (nothing for a job still queued)."""
    if not job.state.terminal:
        return
    spec = job.spec
    for path in (spec.bearer_token_file, spec.src_bearer_token_file,
                 spec.dest_bearer_token_file):
        if path and is_kept(state_dir, path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                log.info("job %d: removed its kept bearer token %s", job.id, path)
