"""A job's X.509 proxy, looked at before any byte moves.

The daemon keeps no copy of a proxy: the tools read the file in place as the job's owner.
Before an attempt starts, `check_proxy` reads it the same way (`stork.identity.open_as`,
with the owner's rights) and refuses, as a permanent `CredentialInvalid` naming the file and
the reason, a proxy that is missing, unreadable by the owner, someone else's, not a
certificate at all, not valid yet, or expired. `expiry_warning` says when a valid proxy will
expire before the transfer's estimated end (shown on the job's ad and by stork_status).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509

from stork.errors import CredentialInvalid, IdentityError
from stork.identity import RunAs, open_as

MAX_PROXY_BYTES = 1 << 20  # a proxy is a few kB; a huge file is not one
DEFAULT = "default"


@dataclass(frozen=True)
class ProxyFacts:
    path: str
    subject: str  # of the proxy certificate itself
    not_before: float  # epoch seconds: the latest start of the certificates in the file
    not_after: float  # epoch seconds: the earliest end (the proxy's own, or its signer's)

    def seconds_left(self, now: float) -> float:
        return self.not_after - now


def when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def uses_proxy(path: str | None) -> bool:
    """Whether the job names a proxy file (None and "default" let the tools search)."""
    return bool(path) and path != DEFAULT


def read_owned(path: str, run_as: RunAs | None, owner_uid: int, *,
               private: bool = False) -> bytes:
    """The file at `path` (a proxy or a token), read with the rights of `run_as`; it must be
    a regular file of the job's owner (and, `private`, readable by no one else).
    CredentialInvalid naming the reason otherwise."""
    try:
        fd = open_as(run_as, path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CredentialInvalid(path, "no such file") from None
    except PermissionError:
        raise CredentialInvalid(path, "the job's owner cannot read it (permission denied)") \
            from None
    except OSError as exc:
        raise CredentialInvalid(path, f"cannot be opened: {exc.strerror}") from None
    except IdentityError as exc:
        reason = str(exc).rsplit(": ", 1)[-1]
        if reason == os.strerror(2):
            raise CredentialInvalid(path, "no such file") from None
        if reason == os.strerror(13):
            reason = "permission denied"
        raise CredentialInvalid(path, f"the job's owner cannot read it ({reason})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise CredentialInvalid(path, "not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if owner_uid >= 0 and info.st_uid != owner_uid:
            raise CredentialInvalid(path, f"belongs to uid {info.st_uid}, not to the job's "
                                          f"owner (uid {owner_uid})")
        if private and info.st_mode & 0o077:
            raise CredentialInvalid(path, f"has mode {stat.S_IMODE(info.st_mode):04o}; it "
                                          f"must be 0600 (chmod 600 {path})")
        return handle.read(MAX_PROXY_BYTES + 1)


def check_proxy(path: str, *, owner_uid: int, run_as: RunAs | None,
                now: float | None = None) -> ProxyFacts:
    """The proxy's facts, read with the owner's rights; CredentialInvalid when it cannot be
    used (missing, unreadable, someone else's, not a proxy, not yet valid, expired)."""
    now = time.time() if now is None else now
    data = read_owned(path, run_as, owner_uid)
    if len(data) > MAX_PROXY_BYTES:
        raise CredentialInvalid(path, f"larger than {MAX_PROXY_BYTES} bytes: not a proxy")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CredentialInvalid(path, "holds no PEM certificate: not a proxy") from None
    not_before = max(c.not_valid_before_utc.timestamp() for c in certs)
    not_after = min(c.not_valid_after_utc.timestamp() for c in certs)
    facts = ProxyFacts(path, certs[0].subject.rfc4514_string(), not_before, not_after)
    if not_after <= now:
        raise CredentialInvalid(path, f"expired at {when(not_after)}")
    if not_before > now:
        raise CredentialInvalid(path, f"not valid before {when(not_before)}")
    return facts


def expiry_warning(facts: ProxyFacts, now: float, size_bytes: int | None,
                   rate_mbps: float) -> dict[str, object] | None:
    """The job ad's attributes when the proxy expires before the transfer's estimated end
    (`size_bytes` at `rate_mbps`); None when it lasts, or the size is unknown."""
    if size_bytes is None or rate_mbps <= 0:
        return None
    end = now + size_bytes * 8 / (rate_mbps * 1e6)
    if facts.not_after >= end:
        return None
    return {
        "x509proxy_expires_before_end": True,
        "x509proxy_expiration_time": int(facts.not_after),
        "x509proxy_warning": (f"x509proxy {facts.path} expires at {when(facts.not_after)}, "
                              f"before the transfer's estimated end at {when(end)} "
                              f"({size_bytes} bytes at {rate_mbps:g} Mbit/s); renew it"),
    }
