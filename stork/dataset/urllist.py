"""``url_list`` files: one ``SOURCE DESTINATION`` pair a line, as ``globus-url-copy -f``.

The format, as globus-url-copy 10.x reads it: blank lines and lines whose first non-blank
character is ``#`` are skipped; otherwise a line holds exactly two URLs separated by blanks,
each optionally in double quotes (no escapes inside; a quote must close before the end of
the line and be followed by a blank); anything else on the line (a third field, a trailing
comment) is an error. Stork then checks each URL like every URL it takes
(`stork.urls.parse_url`: no whitespace, so a quoted URL with a space is refused with a hint
to write ``%20``). A destination ending in ``/`` is a directory: the file keeps the source's
name there, as globus-url-copy does. A source must name one file: a directory or a glob
belongs in ``src_url``. Pure: no I/O.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from stork.dataset.base import GLOB_CHARS
from stork.errors import DatasetError
from stork.transfer.registry import GFAL_SCHEMES
from stork.urls import Url, parse_url

# what gfal2's copy pairs an XRootD or WebDAV end with (`stork.transfer.registry`)
GFAL_PARTNERS = frozenset({*GFAL_SCHEMES, "file", "gsiftp"})


@dataclass(frozen=True)
class UrlPair:
    line: int  # 1-based line in the url_list
    src: Url
    dest: Url


def split_fields(line: str) -> list[str]:
    """The blank-separated fields of a line, double quotes removed; ValueError when a quote
    is not closed or stands inside a field."""
    fields: list[str] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        if line[i] == '"':
            end = line.find('"', i + 1)
            if end < 0:
                raise ValueError("a double quote is not closed")
            if end + 1 < n and not line[end + 1].isspace():
                raise ValueError(f"text right after the closing quote of {line[i:end + 1]}")
            fields.append(line[i + 1:end])
            i = end + 1
            continue
        j = i
        while j < n and not line[j].isspace():
            j += 1
        if '"' in line[i:j]:
            raise ValueError(f"a double quote inside {line[i:j]!r}; quote the whole URL")
        fields.append(line[i:j])
        i = j
    return fields


def _check(url: str, what: str) -> Url:
    try:
        return parse_url(url)
    except ValueError as exc:
        hint = " (write a space in a URL as %20)" if " " in url else ""
        raise ValueError(f"{what} {url!r}: {exc}{hint}") from None


def pair_problem(src_scheme: str, dest_scheme: str) -> str | None:
    """Why a dataset's file cannot go from one scheme to the other, or None: an XRootD or
    WebDAV end goes through gfal2's copy, which takes the other end only as XRootD, WebDAV,
    file:// or gsiftp://."""
    for mine, other in ((src_scheme, dest_scheme), (dest_scheme, src_scheme)):
        if mine in GFAL_SCHEMES and other not in GFAL_PARTNERS:
            return (f"{src_scheme}:// -> {dest_scheme}:// cannot be sent: a {mine}:// end "
                    f"goes through gfal2's copy, whose other end is one of "
                    f"{', '.join(s + '://' for s in sorted(GFAL_PARTNERS))}")
    return None


def parse_pairs(text: str, *, name: str, max_files: int, knob: str) -> list[UrlPair]:
    """Every pair of a url_list, checked; DatasetError naming `name` and the line number for
    the first bad line, or as soon as there are more than `max_files` pairs."""
    pairs: list[UrlPair] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        try:
            fields = split_fields(line)
            if len(fields) != 2:
                raise ValueError(f"expected SOURCE DESTINATION, found {len(fields)} "
                                 f"field{'s' if len(fields) != 1 else ''}")
            src_text, dest_text = fields
            last = src_text.rsplit("/", 1)[-1]
            if src_text.endswith("/"):
                raise ValueError(f"source {src_text!r} is a directory; a url_list line names "
                                 "one file (put a directory in src_url instead)")
            if any(ch in last for ch in GLOB_CHARS):
                raise ValueError(f"source {src_text!r} is a glob; a url_list line names one "
                                 "file (put a glob in src_url instead)")
            src = _check(src_text, "source")
            if dest_text.endswith("/"):
                dest_text += last
            dest = _check(dest_text, "destination")
            problem = pair_problem(src.scheme, dest.scheme)
            if problem is not None:
                raise ValueError(problem)
        except ValueError as exc:
            raise DatasetError(where, str(exc)) from None
        pairs.append(UrlPair(number, src, dest))
        if len(pairs) > max_files:
            raise DatasetError(where, f"more than {knob} = {max_files} files: the url_list "
                                      f"was read up to pair {len(pairs)}; split it or raise "
                                      "the limit")
    if not pairs:
        raise DatasetError(name, "no SOURCE DESTINATION pairs (only blank lines and "
                                 "comments)")
    return pairs


def dest_key(url: Url) -> tuple[str, str, str]:
    """What makes two destinations the same file: scheme, endpoint, normalised path."""
    return (url.scheme, url.endpoint, posixpath.normpath(url.path))


def source_name(url: Url) -> str:
    """The file name of a source (decoded): its relative path in the dataset."""
    return posixpath.basename(url.path)
