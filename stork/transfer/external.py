"""Operator-supplied modules: ``stork.transfer.<src>-<dst>`` executables in STORK_MODULE_DIR.

Run as ``module src_url dest_url [arguments...]``; exit 0 for success. A module says why it
failed with Stork's exit-status convention, the copy helper's (`stork.transfer.failures`):
1 retryable, 2 permanent, 3 not found, 4 access denied, 5 destination full, 6 bad URL. Any
other non-zero status is retried, since Stork cannot read an operator's tool.
"""

from __future__ import annotations

import os

from stork.errors import TransferError
from stork.transfer.base import TransferModule, TransferRequest
from stork.transfer.failures import exit_status_class

PREFIX = "stork.transfer."


class ExternalModule(TransferModule):
    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)

    def command(self, request: TransferRequest) -> list[str]:
        arguments = request.options.to_arguments().split()
        return [self.path, request.src_url, request.dest_url, *arguments]

    def classify(self, exit_code: int, stderr_tail: str) -> type[TransferError]:
        return exit_status_class(exit_code)


def discover(module_dir: str) -> dict[tuple[str, str], ExternalModule]:
    """Executables named stork.transfer.<src>-<dst> in `module_dir`, by scheme pair."""
    found: dict[tuple[str, str], ExternalModule] = {}
    if not module_dir or not os.path.isdir(module_dir):
        return found
    for entry in sorted(os.listdir(module_dir)):
        if not entry.startswith(PREFIX):
            continue
        src, sep, dst = entry[len(PREFIX):].partition("-")
        path = os.path.join(module_dir, entry)
        if sep and src and dst and os.path.isfile(path) and os.access(path, os.X_OK):
            found[(src.lower(), dst.lower())] = ExternalModule(path)
    return found
