"""file -> file copies, run as a child process of Stork's own copy helper."""

from __future__ import annotations

import sys

from stork.transfer.base import FailureKind, TransferModule, TransferRequest


class FileModule(TransferModule):
    name = "file-copy"

    def command(self, request: TransferRequest) -> list[str]:
        return [sys.executable, "-m", "stork.transfer.copyhelper", request.src_url, request.dest_url]

    def classify(self, exit_code: int, stderr_tail: str) -> FailureKind:
        from stork.transfer.copyhelper import EXIT_PERMANENT

        return FailureKind.PERMANENT if exit_code == EXIT_PERMANENT else FailureKind.TRANSIENT


class HttpModule(FileModule):
    """http(s) -> file through the same helper (httpx streaming download)."""

    name = "http-get"
