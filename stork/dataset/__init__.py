"""Datasets: one transfer job that names many files.

A transfer names a dataset in one of three ways (`is_dataset`):

- a directory: ``src_url`` ending in ``/`` (``recursive = true`` descends into its
  subdirectories, which keep their place under ``dest_url``);
- a glob: ``*``, ``?`` or ``[...]`` in the last path segment of ``src_url`` (``*.h5``),
  matched with fnmatch (case-sensitive; ``*`` matches names starting with a dot);
- a url_list: one ``SOURCE DESTINATION`` pair a line, the format of ``globus-url-copy -f``.

For the first two, ``dest_url`` is a directory and each file goes to ``dest_url`` + its path
relative to the listed directory. `expand` turns a dataset into a `Dataset` of `DatasetFile`
values (source, destination, relative path, size in bytes when the listing gives it).

Directories are listed by one `Lister` per scheme (`LISTERS`): ``file://`` on disk
(`LocalLister`, os.scandir, symlinks followed, loops refused), ``ftp://`` through the server
(`FtpLister`, anonymous, MLSD or else NLST + SIZE), and ``gsiftp://``, ``root://``,
``xroot://``, ``davs://``, ``dav://`` and ``https://`` through the metadata layer for remote
ends (`RemoteLister`: gfal2, with the job's proxy, names and sizes).
url_lists are parsed without I/O (`stork.dataset.urllist`).

Whose rights: listing runs in the caller's process with the caller's rights, and this
package holds no privilege logic. The plan is that ``stork_submit`` expands local datasets
(``file://`` and url_lists: `listed_locally`) as the submitting user, and the daemon lists
remote ones later, in a process that runs as the job's owner (`stork.identity`).

Limits and bad input, each a `DatasetError` (`DatasetUnreachable` when another listing may
succeed: the server could not be reached or broke off half way) that names the directory,
URL or url_list line; a failed expansion returns nothing, so nothing is half counted:
a missing or unreadable directory, a listing that fails half way, an empty dataset, two
sources mapped to one destination, a directory symlink loop, a name that is not UTF-8, a bad
url_list line, and more than ``max_files`` files (the caller passes
``STORK_MAX_FILES_PER_JOB``; the listing stops at the first file past the limit).
"""

from __future__ import annotations

from stork.dataset.base import Entry, Lister, parse_dir_url
from stork.dataset.expand import (
    LISTERS,
    MAX_FILES_KNOB,
    Dataset,
    DatasetFile,
    expand,
    is_dataset,
    listed_locally,
    lister_for,
)
from stork.dataset.ftp import FtpLister
from stork.dataset.local import LocalLister
from stork.dataset.remote import RemoteLister
from stork.dataset.urllist import UrlPair, parse_pairs
from stork.errors import DatasetError, DatasetUnreachable

__all__ = [
    "LISTERS",
    "MAX_FILES_KNOB",
    "Dataset",
    "DatasetError",
    "DatasetFile",
    "DatasetUnreachable",
    "Entry",
    "FtpLister",
    "Lister",
    "LocalLister",
    "RemoteLister",
    "UrlPair",
    "expand",
    "is_dataset",
    "listed_locally",
    "lister_for",
    "parse_dir_url",
    "parse_pairs",
]
