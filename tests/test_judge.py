"""The transfer modules' judgement of a failed attempt, on fixed tool outputs: the class it
picks (so `retryable` and the stored `failure_kind`), the words kept, and whether the tool
was killed. The globus-url-copy texts are what globus-url-copy 10.x printed against
globus-gridftp-server 13.24 in tests/test_faults.py's setups; the copy helper is run for real.
"""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stork import errors
from stork.errors import (
    AccessDenied,
    BadUrl,
    CredentialError,
    DestinationFull,
    FailureKind,
    NetworkError,
    NotFound,
    PermanentTransferError,
    RetryableTransferError,
    ServerBusy,
    StorkError,
    TransferError,
)
from stork.transfer.copyhelper import http_class
from stork.transfer.external import ExternalModule
from stork.transfer.failures import (
    EXIT_ACCESS_DENIED,
    EXIT_BAD_URL,
    EXIT_DESTINATION_FULL,
    EXIT_NOT_FOUND,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    errno_of_text,
    exit_status_class,
    exit_status_of,
)
from stork.transfer.gridftp import GridFtpModule
from stork.transfer.local import FileModule

GRIDFTP = GridFtpModule()

MISSING_SOURCE = """error: globus_ftp_client: the server responded with an error
500 500-Command failed. : globus_l_gfs_file_open failed.
500-globus_xio: Unable to open file /tmp/guc/root/nope.dat
500-globus_xio: System error in open: No such file or directory
500-globus_xio: A system call failed: No such file or directory
500 End."""

MISSING_LOCAL_DIRECTORY = """error: globus_xio: Unable to open file /tmp/guc/local/no/dir/x.dat
globus_xio: System error in open: No such file or directory
globus_xio: A system call failed: No such file or directory"""

PERMISSION_DENIED = """error: globus_xio: Unable to open file /tmp/guc/locked/x.dat
globus_xio: System error in open: Permission denied
globus_xio: A system call failed: Permission denied"""

IS_A_DIRECTORY = """error: globus_xio: Unable to open file /tmp/guc/root/dir
globus_xio: System error in open: Is a directory
globus_xio: A system call failed: Is a directory"""

REFUSED = """error: globus_xio: Unable to connect to 127.0.0.1:49927
globus_xio: System error in connect: Connection refused
globus_xio: A system call failed: Connection refused"""

UNKNOWN_HOST = """error: globus_xio: Unable to connect to no-such-host.invalid:2811
globus_xio: globus_libc_getaddrinfo failed.
globus_common: Name or service not known"""

BAD_SCHEME = """error: Unable to list url ftpx://127.0.0.1/x:
[globus_gass_copy_glob_expand_url]: error parsing url scheme."""

BUSY = """error: globus_ftp_client: the server responded with an error
421 Service busy: Connection limit exceeded. Please try again later. Closing control connection."""

SERVER_DIED = "error: globus_ftp_client: EOF has been reached"

NO_CREDENTIAL = """error: globus_ftp_client: the server responded with an error
530 530-globus_xio: Server side credential failure
530-GSS failure:
530-GSS Major Status: General failure
530-GSS Minor Status Error Chain:
530-globus_gsi_gssapi: Error with GSI credential
530-globus_credential: Valid credentials could not be found in any of the possible \
locations specified by the credential search order.
530-globus_sysconfig: File does not exist: /tmp/x509up_u0 is not a valid file
530 End."""

SOURCE_IS_A_DIRECTORY = """error: an end-of-file was reached
globus_xio: An end of file occurred"""

# Not captured: built from the format strings in libglobus_gridftp_server
# (globus_i_gfs_ftp_response_error.c: "GlobusError: v=1 c=%s", "GridFTP-Errno: %d"), which
# this server version does not send for the failures above. 122 is EDQUOT on Linux.
GLOBUS_QUOTA = """error: globus_ftp_client: the server responded with an error
451 451-GlobusError: v=1 c=QUOTA_EXCEEDED
451-GridFTP-Errno: 122
451 End."""

GLOBUS_DATA_CHANNEL = """error: globus_ftp_client: the server responded with an error
451 451-GlobusError: v=1 c=DATA_CHANNEL_COMMUNICATION_FAILURE
451 End."""

# a third-party transfer: the destination server dropped out, the source said why
THIRD_PARTY = REFUSED + "\n" + MISSING_SOURCE


@pytest.mark.parametrize("stderr, expected, kind", [
    (MISSING_SOURCE, NotFound, "permanent"),
    (MISSING_LOCAL_DIRECTORY, NotFound, "permanent"),
    (PERMISSION_DENIED, AccessDenied, "permanent"),
    (IS_A_DIRECTORY, BadUrl, "permanent"),
    (UNKNOWN_HOST, BadUrl, "permanent"),
    (BAD_SCHEME, BadUrl, "permanent"),
    (GLOBUS_QUOTA, DestinationFull, "permanent"),
    (THIRD_PARTY, NotFound, "permanent"),
    (REFUSED, NetworkError, "transient"),
    (SERVER_DIED, NetworkError, "transient"),
    (GLOBUS_DATA_CHANNEL, NetworkError, "transient"),
    (BUSY, ServerBusy, "transient"),
    (NO_CREDENTIAL, CredentialError, "transient"),  # so alt_protocols can fall back
    (SOURCE_IS_A_DIRECTORY, RetryableTransferError, "transient"),
    ("", RetryableTransferError, "transient"),
])
def test_globus_url_copy_output_picks_the_class(stderr: str, expected: type[TransferError],
                                                kind: str) -> None:
    failure = GRIDFTP.judge(1, stderr)
    assert type(failure) is expected
    assert failure.kind.value == kind and failure.retryable is (kind == "transient")
    assert failure.kind.retryable is failure.retryable
    assert str(failure) == failure.message == (stderr or "exit status 1")  # the tool's words
    assert failure.exit_code == 1 and not failure.tool_killed


def test_a_tool_killed_by_sigxfsz_filled_its_destination() -> None:
    status = 128 + signal.SIGXFSZ
    for module in (GRIDFTP, FileModule(), ExternalModule("/bin/true")):
        failure = module.judge(status, "")
        assert type(failure) is DestinationFull and failure.kind is FailureKind.PERMANENT
        assert failure.tool_killed
        assert str(failure) == "killed by SIGXFSZ: file size limit exceeded (destination full)"
    with_words = GRIDFTP.judge(status, REFUSED)  # the signal decides, the words are kept
    assert type(with_words) is DestinationFull
    assert str(with_words).startswith(REFUSED) and str(with_words).endswith("(destination full)")


def test_other_signals_leave_the_class_to_the_tool_and_mark_the_output_partial() -> None:
    killed = GRIDFTP.judge(128 + signal.SIGKILL, "")
    assert type(killed) is RetryableTransferError and killed.tool_killed
    assert str(killed) == "killed by SIGKILL"
    terminated = GRIDFTP.judge(128 + signal.SIGTERM, MISSING_SOURCE)
    assert type(terminated) is NotFound and terminated.tool_killed
    assert str(terminated) == MISSING_SOURCE + "\nkilled by SIGTERM"
    assert not GRIDFTP.judge(128 + 200, "").tool_killed  # no such signal: an exit status


def test_exit_status_convention_round_trips() -> None:
    table = {EXIT_RETRYABLE: RetryableTransferError, EXIT_PERMANENT: PermanentTransferError,
             EXIT_NOT_FOUND: NotFound, EXIT_ACCESS_DENIED: AccessDenied,
             EXIT_DESTINATION_FULL: DestinationFull, EXIT_BAD_URL: BadUrl}
    for status, cls in table.items():
        assert exit_status_class(status) is cls and exit_status_of(cls) == status
        assert type(FileModule().judge(status, "error: x")) is cls
        assert type(ExternalModule("/bin/false").judge(status, "")) is cls
    assert exit_status_of(NetworkError) == EXIT_RETRYABLE  # the nearest base's status
    assert exit_status_class(99) is RetryableTransferError  # not in the convention: retried


def test_strerror_texts_name_their_errno() -> None:
    import errno

    assert errno_of_text("No such file or directory") == errno.ENOENT
    assert errno_of_text("Connection refused.") == errno.ECONNREFUSED
    assert errno_of_text("Something else") is None


def test_http_status_classes() -> None:
    assert http_class(404) is NotFound and http_class(410) is NotFound
    assert http_class(401) is AccessDenied and http_class(403) is AccessDenied
    assert http_class(429) is ServerBusy and http_class(503) is ServerBusy
    assert http_class(500) is ServerBusy
    assert http_class(400) is PermanentTransferError


def _helper(src: str, dest: str, *prefix: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "stork.transfer.copyhelper", src, dest],
                          capture_output=True, text=True, timeout=60, check=False)


def test_copy_helper_exit_statuses_name_the_failure(tmp_path: Path) -> None:
    src = tmp_path / "src.dat"
    src.write_bytes(b"x" * 10_000)
    cases = [
        (f"file://{tmp_path}/missing.dat", f"file://{tmp_path}/a.dat", NotFound,
         "No such file or directory"),
        (f"file://{src}", f"file://{tmp_path}/no/dir/a.dat", NotFound, "No such file"),
        (f"file://{src}", f"file://{tmp_path}/", BadUrl, "names a directory"),
        (f"file://{src}", "ftp://127.0.0.1/x", BadUrl, "must be a file URL"),
        (f"file://{tmp_path}", f"file://{tmp_path}/b.dat", BadUrl, "Is a directory"),
    ]
    for src_url, dest_url, expected, words in cases:
        result = _helper(src_url, dest_url)
        failure = FileModule().judge(result.returncode, result.stderr.strip())
        assert type(failure) is expected, (src_url, dest_url, result.stderr)
        assert words in str(failure)
    # a source it cannot read leaves the destination as it was (as cp does), new or not
    assert not (tmp_path / "a.dat").exists()
    old = tmp_path / "old.dat"
    old.write_bytes(b"the user's old data")
    assert _helper(f"file://{tmp_path}/missing.dat", f"file://{old}").returncode != 0
    assert old.read_bytes() == b"the user's old data"


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit (util-linux) is missing")
def test_copy_helper_past_the_file_size_limit_reports_a_full_destination(tmp_path: Path) -> None:
    """Python ignores SIGXFSZ, so the helper sees EFBIG and says so with its exit status."""
    src = tmp_path / "big.dat"
    src.write_bytes(os.urandom(3 << 20))
    result = _helper(f"file://{src}", f"file://{tmp_path}/out.dat", "prlimit", f"--fsize={1 << 20}")
    failure = FileModule().judge(result.returncode, result.stderr.strip())
    assert result.returncode == EXIT_DESTINATION_FULL, result.stderr
    assert type(failure) is DestinationFull and "File too large" in str(failure)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the helper as nobody")
def test_copy_helper_denied_by_permissions(tmp_path: Path) -> None:
    src = tmp_path / "src.dat"
    src.write_bytes(b"x" * 100)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    result = _helper(f"file://{src}", f"file://{locked}/x.dat",
                     "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    failure = FileModule().judge(result.returncode, result.stderr.strip())
    assert type(failure) is AccessDenied and "Permission denied" in str(failure), result.stderr


def test_one_exception_tree() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, Exception) and c.__module__ == errors.__name__]
    assert len(classes) > 20
    for cls in classes:
        assert issubclass(cls, StorkError), cls
    for cls in classes:
        if issubclass(cls, TransferError):
            assert cls.retryable is cls.kind.retryable, cls
            assert issubclass(cls, RetryableTransferError) is cls.retryable or cls is TransferError
    from stork.eos.samplers import SamplingError
    from stork.identity import IdentityError
    from stork.sched.matrix import SchedError
    from stork.transfer.verify import VerifyError

    assert {SamplingError, IdentityError, SchedError, VerifyError} <= set(classes)
