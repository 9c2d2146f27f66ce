"""XRootD (``root://``) and HTTPS/WebDAV (``davs://``, ``https://``) transfers through gfal2's
copy, the engine of ``gfal-copy`` and CERN's FTS3 (`stork.transfer.gfalhelper` ``copy``).

gfal2 copies third party where both ends allow it (XRootD to XRootD: the destination
server pulls; WebDAV to WebDAV: HTTP-TPC ``COPY``; GridFTP to GridFTP) and streams the data
through the helper otherwise (to or from ``file://``, or between two protocols). ``-p N``
is gfal2's ``nbstreams``: parallel TCP streams for GridFTP and XRootD; HTTP has none and
ignores it. Progress comes as ``-vb`` lines from gfal2's performance callback; the exit
status follows Stork's convention, and the system error gfal2 names in its message
(``gfal2 copy error: N (ENAME): ...``) refines the judgement through the shared errno table.
A dataset's batch is one ``copylist`` run: its pairs copied ``cc`` at a time, each
answered on its own line. Sizes and checksums are checked afterwards by Stork itself
(`stork.transfer.verify`), like every module's.
"""

from __future__ import annotations

import re

from stork.errors import TransferError
from stork.transfer.base import TransferModule, TransferRequest
from stork.transfer.failures import errno_class, exit_status_class
from stork.transfer.remote import GFAL_PYTHON, HELPER
from stork.transfer.worker import Worker, WorkerContext

_GFAL_ERRNO = re.compile(r"gfal2 copy error: (\d+) ")


class GfalModule(TransferModule):
    name = "gfal2-copy"
    takes_streams = True

    def __init__(self, python: str = GFAL_PYTHON, timeout_s: int = 0) -> None:
        self.python = python
        self.timeout_s = timeout_s  # gfal2's own per-transfer timeout; 0: its default

    def command(self, request: TransferRequest) -> list[str]:
        streams = request.options.streams or request.default_streams
        argv = [self.python, "-I", HELPER, "copy", "--streams", str(streams)]
        if self.timeout_s:
            argv += ["--timeout", str(self.timeout_s)]
        return [*argv, request.src_url, request.dest_url]

    def list_command(self, *, cc: int, p: int) -> list[str]:
        """The argv that copies the ``SRC DEST`` pairs of stdin (`list_input` without the
        quotes: URLs hold no blanks), `cc` at a time with `p` streams each, and answers each
        pair by its line on stdout (`stork.transfer.gfalhelper` ``copylist``)."""
        argv = [self.python, "-I", HELPER, "copylist", "--streams", str(max(p, 1)),
                "--parallel", str(max(cc, 1))]
        if self.timeout_s:
            argv += ["--timeout", str(self.timeout_s)]
        return argv

    def worker(self, context: WorkerContext) -> Worker:
        """An engine worker: one long-lived gfal2 helper that keeps its sessions."""
        from stork.transfer.gfal_worker import GfalWorker

        return GfalWorker(context, self.python, self.timeout_s)

    def classify(self, exit_code: int, stderr_tail: str) -> type[TransferError]:
        """The system error gfal2 named, else the exit status's class."""
        for number in _GFAL_ERRNO.findall(stderr_tail):
            found = errno_class(int(number))
            if found is not None:
                return found
        return exit_status_class(exit_code)
