"""Whose rights a child process runs with.

When the daemon runs as root, every transfer module and every EOS sample runs as the job's
owner (setgid, setgroups and setuid in the child, as the original Stork ran modules as the
job owner), so a job can read and write only what its owner could. Jobs from the TCP API
(no local user) run as `nobody`. A daemon that is not root runs everything as itself.
Files the child writes through the daemon (the job's `output` and `err`) are opened by a
short-lived forked child that has dropped to the same user, and handed back as a descriptor.
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Callable
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


def _fd_as(run_as: RunAs, path: str, flags: int, mode: int) -> int:
    """os.open(path, flags, mode) in a forked child that dropped to `run_as`; the descriptor
    is handed back over a socket pair. OSError (with the child's errno) when it fails."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here on, then _exit
        code = 0
        try:
            parent.close()
            _become(run_as)
            fd = os.open(path, flags, mode)
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
    number = int(message or b"1")
    raise OSError(number, os.strerror(number), path)


def open_as(run_as: RunAs | None, path: str, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags, mode) with the rights of `run_as` (the daemon's own if None);
    as another user, a symlink in the last component is not followed."""
    if run_as is None:
        return os.open(path, flags, mode)
    try:
        return _fd_as(run_as, path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        raise IdentityError(f"cannot open {path} as {run_as.name}: "
                            f"{os.strerror(exc.errno or 1)}") from None


def stat_as(run_as: RunAs | None, path: str, *, follow: bool = True) -> os.stat_result:
    """os.stat (`follow`) or os.lstat of `path` with the rights of `run_as`: an O_PATH
    descriptor opened as them (nothing is opened for reading or writing, so a FIFO or a
    device is not touched), then fstat. OSError as os.stat raises it."""
    if run_as is None:
        return os.stat(path) if follow else os.lstat(path)
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = _fd_as(run_as, path, flags, 0)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def create_as(run_as: RunAs | None, path: str, mode: int = 0o666) -> os.stat_result:
    """Create `path` as a new empty file (O_EXCL: never an existing name, nor through a
    symlink) with the rights of `run_as`, and return its stat. OSError when it cannot
    (FileExistsError when the name is taken)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = os.open(path, flags, mode) if run_as is None else _fd_as(run_as, path, flags, mode)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def unlink_as(run_as: RunAs | None, path: str,
              only_if: Callable[[os.stat_result], bool] | None = None) -> bool:
    """os.unlink(path) with the rights of `run_as`; a missing file is not an error. With
    `only_if`, the path is looked at first (lstat, in the same process that removes it) and
    removed only when `only_if` accepts what it names. True when it was removed."""
    if run_as is None:
        return _unlink_checked(path, only_if) == 0
    pid = os.fork()
    if pid == 0:  # the child: system calls and the caller's pure check, then _exit
        code = 1
        try:
            _become(run_as)
            code = _unlink_checked(path, only_if)
        except OSError:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 1:
        raise IdentityError(f"cannot remove {path} as {run_as.name}")
    return code == 0


_LEFT = 2  # _unlink_checked: nothing removed (not there, or not what `only_if` accepts)


def _unlink_checked(path: str, only_if: Callable[[os.stat_result], bool] | None) -> int:
    """0 removed, _LEFT not there or refused by `only_if`; OSError for anything else."""
    try:
        if only_if is not None and not only_if(os.lstat(path)):
            return _LEFT
        os.unlink(path)
    except FileNotFoundError:
        return _LEFT
    return 0
