"""The sizes of destination files after a run: how a dataset's files are checked.

Local files are looked at as the job's owner; an FTP or GridFTP directory is listed once
for all of its files (MLSD; GridFTP through gfal2 as the owner with the job's proxy), not
stat'ed file by file; XRootD and WebDAV files are stat'ed through gfal2 in one child.
"""

from __future__ import annotations

import errno
from urllib.parse import unquote

from stork.dataset.base import Lister
from stork.dataset.ftp import FtpLister
from stork.dataset.remote import RemoteLister
from stork.errors import DatasetError, RemoteEndError
from stork.identity import RunAs
from stork.transfer.localfacts import local_facts
from stork.transfer.registry import GFAL_SCHEMES
from stork.transfer.remote import RemoteEnds, RemoteStat
from stork.urls import parse_url


def dest_sizes(urls: list[str], run_as: RunAs | None,
               x509proxy: str | None = None,
               ends: RemoteEnds | None = None) -> dict[str, int | None]:
    """Sizes of destination files (None: not there); URLs whose size cannot be had cheaply
    (http) are left out. Local files are looked at as the job's owner (`run_as`), FTP
    directories listed once each (MLSD), GridFTP ones once each through gfal2 as the owner
    with the job's proxy, XRootD and WebDAV files stat'ed through gfal2 in one child (`ends`:
    the job's, with its tokens; left out when the server cannot answer)."""
    sizes: dict[str, int | None] = {}
    by_dir: dict[tuple[str, str], list[str]] = {}
    local = [url for url in urls if parse_url(url).scheme == "file"]
    for url, (size, _) in zip(local, local_facts([parse_url(u).path for u in local], run_as),
                              strict=True):
        sizes[url] = size
    for url in urls:
        scheme = parse_url(url).scheme
        if scheme in ("ftp", "gsiftp"):
            by_dir.setdefault((scheme, url.rsplit("/", 1)[0] + "/"), []).append(url)
    stat = [url for url in urls if parse_url(url).scheme in GFAL_SCHEMES]
    try:  # a server that cannot answer leaves the sizes out: the copy's answers speak
        answers = (ends or RemoteEnds(x509proxy=x509proxy, run_as=run_as)).stat_many(stat)
    except RemoteEndError:
        answers = {}
    for url, answer in answers.items():
        if isinstance(answer, RemoteStat):
            sizes[url] = answer.size_bytes
        elif answer.errno == errno.ENOENT:
            sizes[url] = None
    listers: dict[str, Lister] = {
        "ftp": FtpLister(), "gsiftp": RemoteLister(x509proxy=x509proxy, run_as=run_as)}
    try:
        for (scheme, directory), members in by_dir.items():
            try:
                found = {directory + e.name: e.size_bytes
                         for e in listers[scheme].list_dir(directory) if not e.is_dir}
            except DatasetError:
                found = {}
            for url in members:
                sizes[url] = found.get(_unquoted(url, directory))
    finally:
        for lister in listers.values():
            lister.close()
    return sizes


def _unquoted(url: str, directory: str) -> str:
    return directory + unquote(url[len(directory):])
