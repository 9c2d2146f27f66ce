"""What a transfer's destination is, and what an attempt may remove of it.

A destination that exists and is not a regular file (a character device such as /dev/null,
a FIFO, a block device) is a *sink*: it is written into in place. The tools open it for
writing (``O_CREAT|O_TRUNC`` leaves a device or a FIFO as it is); Stork never renames over
it, removes it, or reads its size or checksum back (the job says so). A null device (char
1:3, /dev/null) discards what it gets, so it takes parallel streams and many files at
once; any other sink (a FIFO, a tape or a terminal) gets one stream and one file at a time,
its bytes in order.

Only a regular file that an attempt wrote is removed after a failure. `claim`, run before
the tool starts, creates a missing local destination itself (``O_EXCL``, as the job's
owner) or notes the regular file it will overwrite, and records the file's identity
(device, inode, size, modification time). `remove` then removes the path only when it
still names that regular file (looked at with ``lstat`` by the very process that removes
it, as the job's owner: never through a symlink, never a file another attempt or node has
put there since) and the attempt created it or changed it. A claim survives the daemon as
text on the job (`Destination.to_text`), so crash recovery removes no more than the
attempt itself would have.

Symlinks are followed for writing, as cp, globus-url-copy and gfal-copy follow them (a
user's ``current -> run42`` link means the run's directory): the tool runs with the job
owner's rights, so a link, even one swapped in during the transfer, leads it only where its
owner may write, and the daemon itself never writes through it. The link is never removed.

Local ends are looked at as the job's owner (`stork.identity.stat_as`); ``ftp://`` ends
through MLST, whose ``Type`` names devices (``OS.unix=chr``) and pipes and whose ``Unique``
identifies the file. Other remote ends (gsiftp, root, davs) cannot be asked for a kind:
gfal2 reports every non-directory as a regular file. They are `DestKind.UNKNOWN` and are
removed after a failure as before; their servers' own rights protect the servers' devices.
"""

from __future__ import annotations

import ftplib
import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from stork.errors import StorkError
from stork.identity import RunAs, create_as, stat_as, unlink_as
from stork.transfer import verify
from stork.transfer.remote import RemoteEnds
from stork.urls import parse_url

log = logging.getLogger(__name__)

NULL_DEVICE = os.makedev(1, 3)  # Linux's null device: what /dev/null is


class DestKind(Enum):
    """What a destination's path names (the values are shown on the job's ad)."""

    ABSENT = "absent"
    REGULAR = "regular file"
    NULL = "null device"
    DEVICE = "device"  # character devices other than null, block devices
    FIFO = "FIFO"
    DIRECTORY = "directory"
    SOCKET = "socket"
    UNKNOWN = "unknown"  # a remote end that cannot say


SINKS = frozenset({DestKind.NULL, DestKind.DEVICE, DestKind.FIFO})


@dataclass(frozen=True)
class FileId:
    """A regular file as a claim saw it: `key` names the file itself (``dev:ino``, or an FTP
    server's ``Unique`` fact); `size` and `mtime` tell whether it changed since."""

    key: str
    size: int
    mtime: str


@dataclass(frozen=True)
class Destination:
    url: str
    kind: DestKind
    symlink: bool = False  # the URL's path is a symlink (followed for writing, never removed)
    created: bool = False  # this attempt created the file (it was absent)
    file: FileId | None = None  # the regular file as created or found, when known

    @property
    def is_sink(self) -> bool:
        return self.kind in SINKS

    @property
    def known(self) -> bool:
        """The claim knows what it found here (a local or ftp:// end): it created the
        file, or noted the one there, so `removable` can tell what the attempt wrote."""
        return self.created or self.file is not None

    @property
    def ordered(self) -> bool:
        """Bytes must arrive in order: one stream, one file at a time."""
        return self.kind in (DestKind.DEVICE, DestKind.FIFO)

    def unchecked(self) -> str | None:
        """Why the destination's size and checksum are not read back (None: they are)."""
        if not self.is_sink:
            return None
        return (f"the destination is a {self.kind.value}: its size and checksum cannot be "
                f"read back and were not checked")

    def facts(self) -> dict[str, object]:
        """What the job's ad says of its destination."""
        facts: dict[str, object] = {"destination_kind": self.kind.value}
        if self.symlink:
            facts["destination_symlink"] = True
        if (why := self.unchecked()) is not None:
            facts["destination_checks"] = why
        return facts

    def to_text(self) -> str:
        """The claim as stored on the job (read back by `from_text` after a crash)."""
        return json.dumps({"url": self.url, "kind": self.kind.name, "symlink": self.symlink,
                           "created": self.created,
                           "file": None if self.file is None else
                           [self.file.key, self.file.size, self.file.mtime]})

    @classmethod
    def from_text(cls, text: str) -> Destination | None:
        """A stored claim; None for text that is not one."""
        try:
            data = json.loads(text)
            f = data["file"]
            return cls(str(data["url"]), DestKind[data["kind"]], bool(data["symlink"]),
                       bool(data["created"]),
                       None if f is None else FileId(str(f[0]), int(f[1]), str(f[2])))
        except (ValueError, KeyError, TypeError, IndexError):
            return None


def _local_kind(st: os.stat_result) -> DestKind:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return DestKind.REGULAR
    if stat.S_ISCHR(mode):
        return DestKind.NULL if st.st_rdev == NULL_DEVICE else DestKind.DEVICE
    if stat.S_ISBLK(mode):
        return DestKind.DEVICE
    if stat.S_ISFIFO(mode):
        return DestKind.FIFO
    if stat.S_ISDIR(mode):
        return DestKind.DIRECTORY
    return DestKind.SOCKET


def _local_id(st: os.stat_result) -> FileId:
    return FileId(f"{st.st_dev}:{st.st_ino}", st.st_size, str(st.st_mtime_ns))


def _look_local(url: str, path: str, run_as: RunAs | None) -> Destination:
    try:
        link = stat_as(run_as, path, follow=False)
    except FileNotFoundError:
        return Destination(url, DestKind.ABSENT)
    if not stat.S_ISLNK(link.st_mode):
        kind = _local_kind(link)
        return Destination(url, kind, file=_local_id(link) if kind is DestKind.REGULAR else None)
    try:
        target = stat_as(run_as, path, follow=True)
    except FileNotFoundError:  # a dangling link: the tool creates its target
        return Destination(url, DestKind.ABSENT, symlink=True)
    return Destination(url, _local_kind(target), symlink=True)


# MLST's Type fact -> kind (RFC 3659, and the OS.unix= types globus-gridftp-server names)
_FTP_TYPES = {"file": DestKind.REGULAR, "dir": DestKind.DIRECTORY, "cdir": DestKind.DIRECTORY,
              "pdir": DestKind.DIRECTORY, "os.unix=chr": DestKind.DEVICE,
              "os.unix=blk": DestKind.DEVICE, "os.unix=pipe": DestKind.FIFO,
              "os.unix=socket": DestKind.SOCKET, "os.unix=slink": DestKind.REGULAR}


def ftp_facts(host: str, port: int | None, path: str) -> dict[str, str] | None:
    """The MLST facts of `path` on an anonymous FTP server, lower-case names; None when the
    path does not exist. StorkError when the server cannot be asked."""
    try:
        ftp = verify.open_ftp(host, port)
    except (OSError, ftplib.Error) as exc:
        raise StorkError(f"cannot ask ftp://{host}:{port or 21} about {path}: {exc}") from None
    try:
        reply = ftp.sendcmd(f"MLST {path}")
    except ftplib.error_perm:
        return None
    except (OSError, ftplib.Error) as exc:
        raise StorkError(f"cannot ask ftp://{host}:{port or 21} about {path}: {exc}") from None
    finally:
        try:
            ftp.quit()
        except (OSError, ftplib.Error):
            ftp.close()
    lines = [line for line in reply.splitlines() if line.startswith(" ")]
    if not lines:
        return None
    facts, _, _ = lines[0].strip().partition(" ")
    return {name.lower(): value for name, _, value in
            (item.partition("=") for item in facts.split(";") if "=" in item)}


def _ftp_kind(facts: dict[str, str]) -> DestKind:
    """MLST gives no device numbers: a remote character device counts as ordered."""
    return _FTP_TYPES.get(facts.get("type", "").lower(), DestKind.UNKNOWN)


def _ftp_id(facts: dict[str, str]) -> FileId | None:
    unique = facts.get("unique")
    if not unique:
        return None
    return FileId(unique, int(facts.get("size", "0") or 0), facts.get("modify", ""))


def _look_ftp(url: str) -> Destination:
    u = parse_url(url)
    facts = ftp_facts(u.host or "", u.port, u.path)
    if facts is None:
        return Destination(url, DestKind.ABSENT)
    kind = _ftp_kind(facts)
    return Destination(url, kind, file=_ftp_id(facts) if kind is DestKind.REGULAR else None)


def look(url: str, run_as: RunAs | None) -> Destination:
    """What `url` names now, without touching it: a local path as `run_as`, an ftp:// one
    through MLST; any other scheme is UNKNOWN. A local path that cannot be looked at (no
    rights) is UNKNOWN too: the tool, as the owner, will say why."""
    try:
        u = parse_url(url)
        if u.scheme == "file":
            return _look_local(url, u.path, run_as)
        if u.scheme == "ftp":
            return _look_ftp(url)
    except (OSError, StorkError, ValueError) as exc:
        log.info("cannot look at the destination %s: %s", url, exc)
    return Destination(url, DestKind.UNKNOWN)


def claim(url: str, run_as: RunAs | None) -> Destination:
    """`look`, and for a destination that is not there, the mark that this attempt creates
    it; a local one is created here, empty (as `run_as`, O_EXCL), so that what is removed
    later is the very file it made. A name taken meanwhile is looked at again; a local file
    that cannot be created here (its directory is made by the tool, `-cd`) is still the
    attempt's: whatever regular file stands there afterwards was made after the claim."""
    found = look(url, run_as)
    if found.kind is not DestKind.ABSENT or found.symlink:
        return found
    u = parse_url(url)
    if u.scheme == "file":
        try:
            st = create_as(run_as, u.path)
        except FileExistsError:
            return look(url, run_as)
        except OSError:
            pass
        else:
            return Destination(url, DestKind.REGULAR, created=True, file=_local_id(st))
    return Destination(url, DestKind.ABSENT, created=True)


def untouched(dest: Destination, run_as: RunAs | None) -> bool:
    """Whether the empty file a claim created still stands exactly as created: the tool has
    written nothing into it (yet), so it is no answer about the transfer."""
    if not dest.created or dest.file is None:
        return False
    return look(dest.url, run_as).file == dest.file


def removable(dest: Destination, now: FileId | None) -> bool:
    """PURE: whether the regular file found as `now` at a claimed path is the attempt's to
    remove: the file the claim created, or the one it found and the attempt changed since.
    A claim that names no file removes what stands there only when the path was absent
    before the attempt."""
    if now is None:
        return False
    if dest.file is None:
        return dest.created
    if now.key != dest.file.key:  # another file took the name since
        return False
    return dest.created or (now.size, now.mtime) != (dest.file.size, dest.file.mtime)


def remove(dest: Destination, run_as: RunAs | None, ends: RemoteEnds | None = None) -> str:
    """Remove what the attempt of `dest` wrote, and only that (see `removable`); returns
    what was done, for the log. Remote ends other than ftp:// are removed as before
    (`verify.remove`, as the job's owner with its proxy)."""
    u = parse_url(dest.url)
    if dest.is_sink or dest.symlink or dest.kind in (DestKind.DIRECTORY, DestKind.SOCKET):
        return f"left {dest.url} as it is (a {'symlink' if dest.symlink else dest.kind.value})"
    if u.scheme == "file":
        def ours(st: os.stat_result) -> bool:
            return stat.S_ISREG(st.st_mode) and removable(dest, _local_id(st))
        return _remove_local(dest.url, u.path, run_as, ours, "not the file this attempt wrote")
    if u.scheme == "ftp":
        try:
            facts = ftp_facts(u.host or "", u.port, u.path)
        except StorkError as exc:
            return f"could not look at {dest.url}: {exc}"
        if facts is None:
            return f"{dest.url} is not there"
        if _ftp_kind(facts) is not DestKind.REGULAR or not removable(dest, _ftp_id(facts)):
            return f"left {dest.url}: not the file this attempt wrote"
    verify.remove(dest.url, unlink=lambda path: unlink_as(run_as, path), ends=ends)
    return f"removed {dest.url}"


MTIME_SLACK_NS = 50_000_000  # a file's mtime comes from a coarse clock: up to a tick early


def remove_written_since(url: str, since_s: float, run_as: RunAs | None) -> str:
    """Remove the local regular file at `url` when it was written at or after `since_s`
    (wall clock): a file of a dataset that a stopped call had taken, which has no claim. A
    tool that wrote it after the call began made it or truncated it, so what stood there
    before is gone already; a file the tool had not reached yet is older and stays, as
    does anything not local (whose bytes it holds is not known); returns what was done."""
    u = parse_url(url)
    if u.scheme != "file":
        return f"left {url}: not a local file"
    since_ns = int(since_s * 1e9) - MTIME_SLACK_NS

    def ours(st: os.stat_result) -> bool:
        return stat.S_ISREG(st.st_mode) and st.st_mtime_ns >= since_ns
    return _remove_local(url, u.path, run_as, ours, "not written by the stopped call")


def _remove_local(url: str, path: str, run_as: RunAs | None,
                  ours: Callable[[os.stat_result], bool], otherwise: str) -> str:
    """Unlink `path` as `run_as` when `ours` accepts what stands there; what was done."""
    try:
        gone = unlink_as(run_as, path, only_if=ours)
    except StorkError as exc:
        return f"could not remove {url}: {exc}"
    return f"removed {url}" if gone else f"left {url}: {otherwise}"


def written_by_samples(url: str) -> Destination:
    """The claim of a destination that the EOS's in-place samples created: any regular file
    standing there (never a symlink or a device) is theirs."""
    return Destination(url, DestKind.ABSENT, created=True)


def stored_claim(result: dict[str, object], url: str) -> Destination:
    """The claim a job's result holds for `url`, its attempt's destination. Without one
    (an attempt that never claimed), an UNKNOWN claim: nothing local or on an FTP server
    is removed, other remote ends are removed as before."""
    text = result.get("destination_claim")
    found = Destination.from_text(text) if isinstance(text, str) else None
    if found is not None and found.url == url:
        return found
    return Destination(url, DestKind.UNKNOWN)
