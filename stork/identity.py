"""Whose rights a child process runs with.

When the daemon runs as root, every transfer module and every EOS sample runs as the job's
owner (setgid, setgroups and setuid in the child, as the original Stork ran modules as the
job owner), so a job can read and write only what its owner could. Jobs from the TCP API
(no local user) run as `nobody`. A daemon that is not root runs everything as itself.
Files the child writes through the daemon (the job's `output` and `err`) are opened by a
short-lived forked child that has dropped to the same user, and handed back as a descriptor.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
from dataclasses import dataclass
from typing import Any

from stork.errors import IdentityError

REMOTE_USER = "nobody"


@dataclass(frozen=True)
class RunAs:
    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str

    @classmethod
    def for_owner(cls, owner_uid: int) -> RunAs | None:
        """Who a job of `owner_uid` runs as; None means as the daemon itself."""
        if os.geteuid() != 0:
            return None
        try:
            entry = pwd.getpwuid(owner_uid) if owner_uid >= 0 else pwd.getpwnam(REMOTE_USER)
        except KeyError:
            raise IdentityError(f"the job's owner (uid {owner_uid}) is not a user on this "
                                "machine; its transfer cannot run as them") from None
        if entry.pw_uid == 0:
            return None
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
        return cls(entry.pw_uid, entry.pw_gid, groups, entry.pw_name)

    def popen_kwargs(self) -> dict[str, Any]:
        """What subprocess.Popen needs to start the child as this user."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def env(self) -> dict[str, str]:
        entry = pwd.getpwuid(self.uid)
        return {"HOME": entry.pw_dir, "USER": self.name, "LOGNAME": self.name}


def popen_kwargs(run_as: RunAs | None) -> dict[str, Any]:
    return run_as.popen_kwargs() if run_as is not None else {}


def _become(run_as: RunAs) -> None:
    """In a forked child: drop to `run_as` for good (groups, then gid, then uid)."""
    os.setgroups(list(run_as.groups))
    os.setgid(run_as.gid)
    os.setuid(run_as.uid)


def open_as(run_as: RunAs | None, path: str, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags, mode) with the rights of `run_as` (the daemon's own if None)."""
    if run_as is None:
        return os.open(path, flags, mode)
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here on, then _exit
        code = 0
        try:
            parent.close()
            _become(run_as)
            fd = os.open(path, flags | os.O_NOFOLLOW, mode)
            socket.send_fds(child, [b"0"], [fd])
        except OSError as exc:
            child.send(str(exc.errno or 1).encode())
            code = 1
        finally:
            os._exit(code)
    child.close()
    try:
        message, fds, _, _ = socket.recv_fds(parent, 64, 1)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if fds:
        return fds[0]
    errno = int(message or b"1")
    raise IdentityError(f"cannot open {path} as {run_as.name}: {os.strerror(errno)}")


def unlink_as(run_as: RunAs | None, path: str) -> None:
    """os.unlink(path) with the rights of `run_as`; a missing file is not an error."""
    if run_as is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here on, then _exit
        code = 0
        try:
            _become(run_as)
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise IdentityError(f"cannot remove {path} as {run_as.name}")
