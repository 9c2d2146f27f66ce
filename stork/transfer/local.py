"""file -> file copies, run as a child process of Stork's own copy helper."""

from __future__ import annotations

import sys

from stork.errors import TransferError
from stork.transfer.base import TransferModule, TransferRequest
from stork.transfer.failures import exit_status_class


class FileModule(TransferModule):
    name = "file-copy"

    def command(self, request: TransferRequest) -> list[str]:
        return [sys.executable, "-m", "stork.transfer.copyhelper",
                request.src_url, request.dest_url]

    def classify(self, exit_code: int, stderr_tail: str) -> type[TransferError]:
        """The helper names its failure's class with its exit status."""
        return exit_status_class(exit_code)


class HttpModule(FileModule):
    """http(s) -> file through the same helper (httpx streaming download)."""

    name = "http-get"
