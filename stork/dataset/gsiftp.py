"""GridFTP directories (``gsiftp://``), listed by ``globus-url-copy -list URL``.

The tool authenticates with GSI like a transfer does: the job's proxy is given in
``X509_USER_PROXY`` (``x509proxy``; None or "default" lets the tool search as usual). It
runs through `stork.process.Child` (no shell, dies with its parent, a session of its own)
with the rights of `run_as` (the daemon lists a job's directory as the job's owner) or of
the calling process. Its answer names entries and marks directories with
a trailing ``/``, but gives no sizes: a gsiftp dataset's files have ``size_bytes = None``,
and sizes come later, from the transfers themselves (``globus-url-copy -verify-checksum``
compares the ends; the job's byte counts come from its ``-vb`` progress).

Output of globus-url-copy 10.x: a line with the URL, then one name a line indented by four
spaces, a directory with a trailing ``/`` and a file with a trailing space (shown here as
``␣``), then a blank line::

    gsiftp://host/data/
        a.h5␣
        sub/
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from stork.dataset.base import Entry, Lister, remote_failure
from stork.errors import DatasetUnreachable
from stork.identity import RunAs
from stork.process import TIMEOUT, Child, ChildExit

INDENT = "    "
TIMEOUT_S = 300.0  # one directory's listing


def parse_list_line(line: str) -> Entry | None:
    """One line of ``globus-url-copy -list`` -> Entry (None for what is not an entry)."""
    if not line.startswith(INDENT):
        return None
    name = line[len(INDENT):]
    if name.endswith("/"):
        name, is_dir = name[:-1], True
    else:
        name, is_dir = name.removesuffix(" "), False
    if name in ("", ".", ".."):
        return None
    return Entry(name, is_dir, None)


class GsiftpLister(Lister):
    def __init__(self, *, x509proxy: str | None = None, executable: str = "globus-url-copy",
                 timeout_s: float = TIMEOUT_S, run_as: RunAs | None = None) -> None:
        self.x509proxy = x509proxy
        self.run_as = run_as
        self.executable = executable
        self.timeout_s = timeout_s

    def environment(self) -> dict[str, str]:
        if self.x509proxy and self.x509proxy != "default":
            return {"X509_USER_PROXY": self.x509proxy}
        return {}

    def list_dir(self, url: str) -> Iterator[Entry]:
        chunks: queue.Queue[bytes | None] = queue.Queue()
        child = Child([self.executable, "-list", url], env=self.environment(),
                      run_as=self.run_as, on_stdout=chunks.put)
        ended: list[ChildExit | OSError] = []

        def run() -> None:
            try:
                ended.append(child.run(self.timeout_s))
            except OSError as exc:  # the tool cannot be run
                ended.append(exc)
            finally:
                chunks.put(None)

        thread = threading.Thread(target=run, name="gsiftp-list", daemon=True)
        thread.start()
        finished = False
        try:
            pending = b""
            while (chunk := chunks.get()) is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    entry = parse_list_line(line.decode(errors="surrogateescape").rstrip("\r"))
                    if entry is not None:
                        yield entry
            thread.join()
            finished = True
            self._check(url, ended[0])
            entry = parse_list_line(pending.decode(errors="surrogateescape").rstrip("\r"))
            if entry is not None:
                yield entry
        finally:
            if not finished:  # abandoned by the caller: stop the tool
                child.stop("listing abandoned")
                thread.join()

    def _check(self, url: str, ended: ChildExit | OSError) -> None:
        if isinstance(ended, OSError):
            raise DatasetUnreachable(url, f"cannot run {self.executable}: {ended}")
        if ended.stopped == TIMEOUT:
            raise DatasetUnreachable(url, f"the listing took longer than {self.timeout_s:g} s "
                                          "and was stopped")
        if ended.code != 0:
            raise remote_failure(url, ended.stderr_tail or f"exit status {ended.code}")
