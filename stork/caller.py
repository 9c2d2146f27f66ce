"""Who is asking: the identity the transport established for one API request."""

from __future__ import annotations

import pwd
from dataclasses import dataclass

REMOTE_UID = -1  # a TCP caller holding the token: runs as STORK's remote user, never as root


@dataclass(frozen=True)
class Caller:
    uid: int  # REMOTE_UID for TCP callers
    name: str

    @property
    def remote(self) -> bool:
        return self.uid == REMOTE_UID

    @classmethod
    def from_uid(cls, uid: int) -> Caller:
        """A local caller known by the Unix socket's peer credentials."""
        try:
            return cls(uid, pwd.getpwuid(uid).pw_name)
        except KeyError:
            return cls(uid, str(uid))

    @classmethod
    def remote_caller(cls) -> Caller:
        return cls(REMOTE_UID, "remote")
