"""(Grid)FTP directories (``ftp://``, anonymous), listed with ftplib as the calling process.

``MLSD`` (RFC 3659) gives each entry's type and size in one listing; a server whose ``FEAT``
does not offer ``MLST`` is listed with ``NLST``, then ``CWD`` tells directories from files and
``SIZE`` gives the sizes (two commands a name, and the names are read in full before the
first is checked). The directory is entered with ``CWD`` first, so a missing directory or a
file is refused before anything is listed. The answer is read line by line from the data
connection, so a caller that stops early ends the listing there; a listing that does not end
with the server's ``226`` (the connection closed half way) is `DatasetUnreachable`.

One control connection per server is kept between listings (a recursive walk lists many
directories); a listing that did not finish drops it.
"""

from __future__ import annotations

import ftplib
import posixpath
from collections.abc import Iterator

from stork.dataset.base import Entry, Lister, parse_dir_url, remote_failure
from stork.errors import DatasetUnreachable
from stork.transfer.verify import open_ftp
from stork.urls import Url

_FTP_ERRORS = (ftplib.Error, OSError, EOFError)
_SKIP = frozenset({"", ".", ".."})


def _mlsd_entry(line: str) -> Entry | None:
    """``Type=file;Size=5;...; name`` -> Entry; None for ``cdir``/``pdir`` and for what is
    neither a file nor a directory (device files, links the server does not resolve)."""
    facts_text, sep, name = line.partition(" ")
    if not sep or name in _SKIP:
        return None
    facts = {}
    for fact in facts_text.split(";"):
        key, eq, value = fact.partition("=")
        if eq:
            facts[key.lower()] = value
    kind = facts.get("type", "").lower()
    if kind == "dir":
        return Entry(name, True)
    if kind == "file":
        size = facts.get("size", "")
        return Entry(name, False, int(size) if size.isdigit() else None)
    return None


class FtpLister(Lister):
    def __init__(self, *, use_mlsd: bool = True) -> None:
        """`use_mlsd=False` lists with NLST even where MLSD is offered."""
        self.use_mlsd = use_mlsd
        self._sessions: dict[str, tuple[ftplib.FTP, bool]] = {}  # endpoint -> (ftp, mlsd)

    def _session(self, u: Url) -> tuple[ftplib.FTP, bool]:
        if u.endpoint in self._sessions:
            return self._sessions[u.endpoint]
        try:
            ftp = open_ftp(u.host, u.port)
        except ftplib.Error as exc:
            raise remote_failure(u.text, str(exc)) from None
        except (OSError, EOFError) as exc:
            raise DatasetUnreachable(u.text, f"cannot reach the server {u.endpoint}: "
                                             f"{exc or 'connection closed'}") from None
        mlsd = False
        if self.use_mlsd:
            try:
                mlsd = any(line.strip().upper().startswith("MLST")
                           for line in ftp.sendcmd("FEAT").splitlines()[1:])
            except ftplib.Error:
                mlsd = False  # no FEAT: an old server, NLST it is
            except (OSError, EOFError) as exc:
                ftp.close()
                raise DatasetUnreachable(u.text, f"the server {u.endpoint} closed the "
                                                 f"connection: {exc or 'EOF'}") from None
        self._sessions[u.endpoint] = (ftp, mlsd)
        return ftp, mlsd

    def _drop(self, endpoint: str) -> None:
        session = self._sessions.pop(endpoint, None)
        if session is not None:
            session[0].close()

    def close(self) -> None:
        for endpoint in list(self._sessions):
            self._drop(endpoint)

    def list_dir(self, url: str) -> Iterator[Entry]:
        u = parse_dir_url(url)
        ftp, mlsd = self._session(u)
        finished = False
        started = False
        try:
            ftp.cwd(u.path)
            started = True
            if mlsd:
                for line in self._lines(ftp, "MLSD"):
                    entry = _mlsd_entry(line)
                    if entry is not None:
                        yield entry
            else:
                yield from self._nlst(ftp, u)
            finished = True
        except ftplib.error_perm as exc:
            raise remote_failure(url, str(exc)) from None
        except _FTP_ERRORS as exc:
            what = "the listing failed half way" if started else "the listing failed"
            raise DatasetUnreachable(url, f"{what}: {type(exc).__name__}: "
                                          f"{exc or 'the server closed the connection'}"
                                     ) from None
        finally:
            if not finished:  # failed, or abandoned by the caller: state unknown
                self._drop(u.endpoint)

    @staticmethod
    def _lines(ftp: ftplib.FTP, command: str) -> Iterator[str]:
        """The lines of a listing command's data connection, as they arrive; then the
        server's final reply must say the listing is complete."""
        ftp.voidcmd("TYPE A")
        conn = ftp.transfercmd(command)
        with conn, conn.makefile("r", encoding=ftp.encoding, errors="surrogateescape") as data:
            for raw in data:
                line = raw.rstrip("\r\n")
                if line:
                    yield line
        ftp.voidresp()

    def _nlst(self, ftp: ftplib.FTP, u: Url) -> Iterator[Entry]:
        names = [posixpath.basename(line.rstrip("/")) for line in self._lines(ftp, "NLST")]
        for name in names:
            if name in _SKIP:
                continue
            try:
                ftp.cwd(posixpath.join(u.path, name))
            except ftplib.error_perm:
                pass
            else:
                ftp.cwd(u.path)
                yield Entry(name, True)
                continue
            try:
                ftp.voidcmd("TYPE I")
                size = ftp.size(name)
            except ftplib.error_perm:
                size = None
            yield Entry(name, False, size)

