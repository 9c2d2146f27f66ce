"""GridFTP (and plain FTP) transfers through the real globus-url-copy."""

from __future__ import annotations

from stork.transfer.base import FailureKind, TransferModule, TransferRequest

# Fragments of globus-url-copy / GridFTP server errors that no retry can cure.
_PERMANENT = (
    "No such file or directory",
    "Permission denied",
    "PATH_NOT_FOUND",
    "PERMISSION_DENIED",
    "Is a directory",
    "Not a directory",
    "File exists",
    "Read-only file system",
    "No space left on device",
    "File too large",
    "Disk quota exceeded",
    "Login incorrect",
    "Unknown url",
)


class GridFtpModule(TransferModule):
    name = "globus-url-copy"
    verifies_checksum = True
    takes_streams = True

    def __init__(self, executable: str = "globus-url-copy") -> None:
        self.executable = executable

    def command(self, request: TransferRequest) -> list[str]:
        opts = request.options
        streams = opts.streams or request.default_streams
        argv = [self.executable, "-vb", "-p", str(streams)]
        if opts.tcp_buffer_bytes:
            argv += ["-tcp-bs", str(opts.tcp_buffer_bytes)]
        if opts.block_size_bytes:
            argv += ["-bs", str(opts.block_size_bytes)]
        if request.verify_checksum:
            argv += ["-verify-checksum"]
        # "--" is not understood by globus-url-copy; URLs are validated to start with a
        # scheme, so they can never be read as options.
        argv += [request.src_url, request.dest_url]
        return argv

    def classify(self, exit_code: int, stderr_tail: str) -> FailureKind:
        if any(fragment in stderr_tail for fragment in _PERMANENT):
            return FailureKind.PERMANENT
        return FailureKind.TRANSIENT
