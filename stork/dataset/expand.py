"""A dataset expanded into its files: sources listed, each mapped to its destination.

`expand` lists a directory (``src_url`` ending in ``/``; ``recursive`` descends) or a glob
(``*``, ``?`` or ``[`` in the last segment of ``src_url``, matched with fnmatch against the
names of the directory before it; with ``recursive``, matching directories are copied
whole), and maps each file to ``dest_url`` (a directory) + its path relative to the listed
directory; or it reads a url_list (`stork.dataset.urllist`). The result is a `Dataset`, or a
`DatasetError` naming what is wrong: nothing is returned half counted.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TypeAlias
from urllib.parse import unquote

from stork.dataset.base import GLOB_CHARS, Lister, parse_dir_url, quote_name
from stork.dataset.ftp import FtpLister
from stork.dataset.local import LocalLister
from stork.dataset.remote import RemoteLister
from stork.dataset.urllist import UrlPair, dest_key, parse_pairs, source_name
from stork.errors import DatasetError
from stork.identity import RunAs

MAX_FILES_KNOB = "STORK_MAX_FILES_PER_JOB"
MAX_DEPTH = 256  # directory levels below the listed one; deeper is a loop on a server

# scheme -> its lister, given the job's x509proxy and whose rights a listing tool runs with
# (GridFTP, XRootD and WebDAV go through the metadata layer for remote ends, gfal2, as the
# owner with the proxy; anonymous FTP reads nothing local)
LISTERS: dict[str, Callable[[str | None, RunAs | None, str | None], Lister]] = {
    "file": lambda x509proxy, run_as, token_file: LocalLister(),
    "ftp": lambda x509proxy, run_as, token_file: FtpLister(),
    **{scheme: lambda x509proxy, run_as, token_file: RemoteLister(
        x509proxy=x509proxy, run_as=run_as, token_file=token_file)
       for scheme in ("gsiftp", "root", "xroot", "davs", "dav", "https")},
}
LOCAL_SCHEMES = frozenset({"file"})
# in an HTTP URL ``?`` starts a query: only ``*`` and ``[`` make a glob there
HTTP_SCHEMES = frozenset({"davs", "dav", "https"})

Found: TypeAlias = tuple[str, str, int | None]  # relative path, the same percent-encoded, size
# a directory to list: URL, relative path and the same percent-encoded, and the directories
# it is inside of (dir_id, URL), to refuse symlink loops
Frame: TypeAlias = tuple[str, str, str, tuple[tuple[Hashable, str], ...]]


@dataclass(frozen=True, slots=True)
class DatasetFile:
    """One file of a dataset: where it comes from, where it goes."""

    src_url: str
    dest_url: str
    rel_path: str  # under the listed directory ("sub/a.h5"); a url_list source's name
    size_bytes: int | None  # None: known only when it is transferred (gsiftp, url_list)


@dataclass(frozen=True)
class Dataset:
    """The files of a dataset, sorted by `rel_path` (a url_list keeps its order)."""

    files: tuple[DatasetFile, ...]
    skipped_dirs: int = 0  # subdirectories left out because `recursive` was false

    @property
    def count(self) -> int:
        return len(self.files)

    @property
    def total_bytes(self) -> int | None:
        """The sum of the sizes; None when a size is not known yet."""
        total = 0
        for f in self.files:
            if f.size_bytes is None:
                return None
            total += f.size_bytes
        return total


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def is_dataset(src_url: str | None, url_list: str | None = None) -> bool:
    """Whether a transfer names many files: a url_list, a source directory (ending in
    ``/``) or a glob in the last segment of a listable source (``?`` in an http URL is a
    query, not a glob)."""
    if url_list:
        return True
    if not src_url:
        return False
    if src_url.endswith("/"):
        return True
    last = src_url.rsplit("/", 1)[-1]
    scheme = _scheme(src_url)
    globs = GLOB_CHARS.replace("?", "") if scheme in HTTP_SCHEMES else GLOB_CHARS
    return scheme in LISTERS and any(ch in last for ch in globs)


def listed_locally(src_url: str | None, url_list: str | None = None) -> bool:
    """Whether expanding the dataset needs no server: a url_list (read where it is given) or
    a file:// source. These are expanded (and refused) at submission."""
    return bool(url_list) or (src_url is not None and _scheme(src_url) in LOCAL_SCHEMES)


def lister_for(scheme: str, *, x509proxy: str | None = None, where: str | None = None,
               run_as: RunAs | None = None, token_file: str | None = None) -> Lister:
    """The lister of a URL scheme; DatasetError (naming `where`, else the scheme) for a
    scheme whose directories Stork cannot list."""
    make = LISTERS.get(scheme)
    if make is None:
        raise DatasetError(where or f"{scheme}://",
                           f"{scheme}:// directories cannot be listed; datasets are listed "
                           f"on {', '.join(s + '://' for s in LISTERS)}")
    return make(x509proxy, run_as, token_file)


def expand(src_url: str | None, dest_url: str | None, *, recursive: bool = False,
           url_list_text: str | None = None, url_list_name: str = "url_list",
           max_files: int, lister: Lister | None = None,
           x509proxy: str | None = None, run_as: RunAs | None = None,
           token_file: str | None = None) -> Dataset:
    """The files of a dataset. Either `src_url` (a directory or a glob) and `dest_url` (a
    directory; a missing trailing ``/`` is added), or `url_list_text` (the url_list's
    contents; `url_list_name` names it in errors) without them. More than `max_files` files
    stop the listing at once (DatasetError naming STORK_MAX_FILES_PER_JOB). `lister` is
    chosen by the source's scheme when not given (`x509proxy` and the source's bearer
    `token_file` for the gfal2 ones); its kept
    connections are closed at the end."""
    if max_files < 1:
        raise ValueError(f"max_files must be at least 1, not {max_files}")
    if url_list_text is not None:
        if src_url or dest_url:
            raise DatasetError(url_list_name, "a url_list names its own sources and "
                                              "destinations; give src_url and dest_url or "
                                              "url_list, not both")
        return _from_url_list(url_list_text, url_list_name, max_files)
    if not src_url or not is_dataset(src_url):
        raise DatasetError(src_url or "src_url", "not a dataset: a directory ends in '/', a "
                                                 "glob has *, ? or [ in its last segment")
    if not dest_url:
        raise DatasetError(src_url, "a dataset needs dest_url, the directory its files go to")
    if src_url.endswith("/"):
        root, pattern = src_url, None
    else:
        head, _, last = src_url.rpartition("/")
        root, pattern = head + "/", unquote(last)
    dest_dir = dest_url if dest_url.endswith("/") else dest_url + "/"
    try:
        scheme = parse_dir_url(root).scheme
    except ValueError as exc:
        raise DatasetError(src_url, str(exc)) from None
    try:
        parse_dir_url(dest_dir)
    except ValueError as exc:
        raise DatasetError(dest_url, str(exc)) from None
    lister = lister or lister_for(scheme, x509proxy=x509proxy, where=src_url, run_as=run_as,
                                  token_file=token_file)
    try:
        found, skipped = _walk(lister, root, pattern, recursive, max_files, src_url)
    finally:
        lister.close()
    if not found:
        left_out = (f" ({skipped} subdirector{'y' if skipped == 1 else 'ies'} left out: "
                    "recursive is false)") if skipped else ""
        if pattern is not None:
            raise DatasetError(src_url, f"no files match {pattern!r} in {root}{left_out}")
        below = " or below it" if recursive else ""
        raise DatasetError(root, f"no files in this directory{below}{left_out}")
    found.sort(key=lambda f: f[0])
    for (rel, qrel, _), (next_rel, _, _) in itertools.pairwise(found):
        if rel == next_rel:  # only a server that names a file twice can do this
            raise DatasetError(dest_dir + qrel, f"two sources go to one destination: "
                                                f"{root}{qrel} is listed twice")
    return Dataset(tuple(DatasetFile(root + qrel, dest_dir + qrel, rel, size)
                         for rel, qrel, size in found), skipped)


def _walk(lister: Lister, root: str, pattern: str | None, recursive: bool, max_files: int,
          where: str) -> tuple[list[Found], int]:
    """Every file under `root` (its names matching `pattern` at the top): depth first, one
    directory listing open at a time. Directory symlink loops are refused by `dir_id`."""
    found: list[Found] = []
    skipped = 0
    root_id = lister.dir_id(root)
    stack: list[Frame] = [(root, "", "", ((root_id, root),) if root_id is not None else ())]
    while stack:
        url, prefix, qprefix, ancestors = stack.pop()
        if prefix.count("/") > MAX_DEPTH:
            raise DatasetError(url, f"more than {MAX_DEPTH} directory levels deep: a loop "
                                    "of links on the server?")
        entries = lister.list_dir(url)
        try:
            for entry in entries:
                name = entry.name
                if name in ("", ".", "..") or "/" in name:
                    continue
                if pattern is not None and not prefix and not fnmatchcase(name, pattern):
                    continue
                qname = quote_name(name, url)
                if not entry.is_dir:
                    found.append((prefix + name, qprefix + qname, entry.size_bytes))
                    if len(found) > max_files:
                        raise DatasetError(where, f"more than {MAX_FILES_KNOB} = {max_files} "
                                                  f"files: the listing was stopped at file "
                                                  f"{len(found)} ({url}{qname}); split the "
                                                  "dataset or raise the limit")
                    continue
                if not recursive:
                    skipped += 1
                    continue
                child = url + qname + "/"
                child_id = lister.dir_id(child)
                if child_id is not None:
                    for seen_id, seen_url in ancestors:
                        if seen_id == child_id:
                            raise DatasetError(child, f"a symlink loop: this is {seen_url} "
                                                      "again, a directory it is inside of; "
                                                      "remove the link or set recursive = "
                                                      "false")
                    chain = (*ancestors, (child_id, child))
                else:
                    chain = ancestors
                stack.append((child, prefix + name + "/", qprefix + qname + "/", chain))
        finally:
            close = getattr(entries, "close", None)
            if close is not None:
                close()
    return found, skipped


def _from_url_list(text: str, name: str, max_files: int) -> Dataset:
    pairs = parse_pairs(text, name=name, max_files=max_files, knob=MAX_FILES_KNOB)
    seen: dict[tuple[str, str, str], UrlPair] = {}
    for pair in pairs:
        first = seen.setdefault(dest_key(pair.dest), pair)
        if first is not pair:
            raise DatasetError(f"{name}:{pair.line}",
                               f"two sources go to one destination {pair.dest.text}: "
                               f"{first.src.text} (line {first.line}) and {pair.src.text} "
                               f"(line {pair.line})")
    return Dataset(tuple(DatasetFile(p.src.text, p.dest.text, source_name(p.src), None)
                         for p in pairs))


def list_dataset(src_url: str, dest_url: str, *, recursive: bool, url_list: str | None,
                 max_files: int, x509proxy: str | None = None,
                 run_as: RunAs | None = None, token_file: str | None = None) -> Dataset:
    """The files of a dataset job as its spec names them: a url_list is read from its file
    and a local directory listed with the rights of the calling process (stork_submit: the
    user); a remote listing (gfal2) runs as `run_as` (the daemon: the job's owner)."""
    if url_list:
        try:
            with open(url_list, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise DatasetError(url_list, f"cannot read the url_list: "
                                         f"{exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise DatasetError(url_list, "the url_list is not UTF-8 text") from None
        dataset = expand(None, None, url_list_text=text, url_list_name=url_list,
                         max_files=max_files)
        return Dataset(tuple(DatasetFile(f.src_url, f.dest_url, f.rel_path, _local_size(f.src_url))
                             for f in dataset.files))
    return expand(src_url, dest_url, recursive=recursive, max_files=max_files,
                  x509proxy=x509proxy, run_as=run_as, token_file=token_file)


def _local_size(url: str) -> int | None:
    """The size of a file:// source (None for other schemes, or when it cannot be stat'ed:
    the transfer will say why)."""
    if _scheme(url) != "file":
        return None
    try:
        return os.stat(unquote(parse_dir_url(url.rsplit("/", 1)[0] + "/").path)
                       + unquote(url.rsplit("/", 1)[1])).st_size
    except (OSError, ValueError):
        return None
