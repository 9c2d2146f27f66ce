"""Destinations as users have them: devices, FIFOs, symlinks and existing files.

Every device node here is the test's own (``mknod c 1 3`` in a temporary directory): the
host's /dev/null is never named. A node is checked after each job to be the very node it
was (same inode, still a character device 1:3, same mode), so a rename over it, a removal
or a chmod fails the test.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stork.identity import RunAs
from stork.transfer import destination
from stork.transfer.destination import Destination, DestKind, FileId
from tests.support import (
    GridFtpServer,
    StorkServer,
    install_slow_module,
    make_file,
    md5,
    removed_after,
    wait_for,
)
from tests.test_api import as_user

MB = 1024 * 1024


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: makes device nodes of its own with mknod")


@dataclass(frozen=True)
class Node:
    """A device node or FIFO as made, to be compared with what stands there later."""

    path: Path
    ino: int
    mode: int
    rdev: int

    @classmethod
    def of(cls, path: Path) -> Node:
        st = path.lstat()
        return cls(path, st.st_ino, st.st_mode, st.st_rdev)

    def intact(self) -> bool:
        try:
            return Node.of(self.path) == self
        except FileNotFoundError:
            return False


def null_node(path: Path, mode: int = 0o666) -> Node:
    """A null device (char 1:3) of the test's own."""
    needs_root()
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(1, 3))
    path.chmod(mode)
    return Node.of(path)


def fifo(path: Path) -> Node:
    os.mkfifo(path)
    return Node.of(path)


class FifoReader:
    """A reader of a FIFO on a thread of its own: the bytes it got, hashed, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest = hashlib.md5(usedforsecurity=False)
        self.count = 0
        self.asked = False  # result() was called: no writer is still to come
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        # O_RDWR keeps the FIFO open across several writers (a dataset's files, retries)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.set_blocking(fd, False)
            idle_since = time.monotonic()
            # a writer may take long to come (a GSI handshake on a loaded machine); once
            # bytes flow, or the result is asked for, 4 s without any means they are done
            while True:
                try:
                    block = os.read(fd, 1 << 20)
                except BlockingIOError:
                    if time.monotonic() - idle_since >= (
                            4.0 if self.count or self.asked else 60.0):
                        break  # (after a read found nothing: no byte is left unread)
                    time.sleep(0.02)
                    continue
                self.digest.update(block)
                self.count += len(block)
                idle_since = time.monotonic()
        finally:
            os.close(fd)

    def result(self) -> tuple[int, str]:
        self.asked = True
        self.thread.join(90)
        return self.count, self.digest.hexdigest()


# -- the rules, pure ----------------------------------------------------------------------

def test_only_the_file_the_attempt_created_or_changed_is_removable() -> None:
    made = Destination("file:///d/x", DestKind.REGULAR, created=True, file=FileId("1:5", 0, "7"))
    assert destination.removable(made, FileId("1:5", 900, "9"))
    assert destination.removable(made, FileId("1:5", 0, "7"))  # created, even if empty
    assert not destination.removable(made, FileId("1:6", 900, "9"))  # another file took it
    assert not destination.removable(made, None)
    found = Destination("file:///d/x", DestKind.REGULAR, file=FileId("1:5", 10, "7"))
    assert not destination.removable(found, FileId("1:5", 10, "7"))  # untouched: the user's
    assert destination.removable(found, FileId("1:5", 0, "8"))  # truncated by the attempt
    unknown = Destination("file:///d/x", DestKind.UNKNOWN)
    assert not destination.removable(unknown, FileId("1:5", 0, "8"))
    absent = Destination("ftp://h/x", DestKind.ABSENT, created=True)
    assert destination.removable(absent, FileId("fe-1", 3, "x"))


def test_a_claim_survives_as_text_and_odd_text_is_no_claim() -> None:
    claim = Destination("file:///d/x", DestKind.REGULAR, created=True, file=FileId("1:5", 3, "7"))
    assert Destination.from_text(claim.to_text()) == claim
    sink = Destination("file:///d/n", DestKind.FIFO, symlink=True)
    assert Destination.from_text(sink.to_text()) == sink
    assert Destination.from_text("{}") is None and Destination.from_text("x") is None
    assert destination.stored_claim({"destination_claim": claim.to_text()},
                                    "file:///d/x") == claim
    other = destination.stored_claim({"destination_claim": claim.to_text()}, "file:///d/y")
    assert other.kind is DestKind.UNKNOWN  # a claim of another URL is not this one's


# -- claims and removals on a real file system ----------------------------------------------

def test_a_missing_destination_is_created_by_the_claim_and_only_that_file_is_removed(
        tmp_path: Path) -> None:
    url = f"file://{tmp_path}/out.dat"
    claim = destination.claim(url, None)
    assert claim.kind is DestKind.REGULAR and claim.created
    assert (tmp_path / "out.dat").exists()
    (tmp_path / "out.dat").write_bytes(b"partial")
    assert destination.remove(claim, None).startswith("removed")
    assert not (tmp_path / "out.dat").exists()
    # another attempt's (or node's) file under the same name is not this claim's
    claim = destination.claim(url, None)
    (tmp_path / "other").write_bytes(b"theirs")
    os.replace(tmp_path / "other", tmp_path / "out.dat")
    assert destination.remove(claim, None).startswith("left")
    assert (tmp_path / "out.dat").read_bytes() == b"theirs"


def test_a_pre_existing_file_is_removed_only_when_the_attempt_changed_it(tmp_path: Path) -> None:
    path = tmp_path / "old.dat"
    path.write_bytes(b"the user's data")
    claim = destination.claim(f"file://{path}", None)
    assert claim.kind is DestKind.REGULAR and not claim.created
    assert destination.remove(claim, None).startswith("left")
    assert path.read_bytes() == b"the user's data"
    path.write_bytes(b"half")  # what a tool that truncated it and failed leaves
    assert destination.remove(claim, None).startswith("removed")
    assert not path.exists()


def test_a_file_a_stopped_call_had_taken_goes_only_when_written_since_the_call_began(
        tmp_path: Path) -> None:
    """stork_rm of a dataset: a file the call had not reached keeps its old bytes; one it
    wrote goes; a symlink, a device, a FIFO and a remote end are left."""
    began = time.time()
    old = tmp_path / "not-reached.dat"
    old.write_bytes(b"the user's data")
    os.utime(old, (began - 60, began - 60))
    written = tmp_path / "written.dat"
    written.write_bytes(b"half")
    null = null_node(tmp_path / "null")
    pipe = fifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(written)
    for name in ("not-reached.dat", "link", "null", "pipe"):
        assert destination.remove_written_since(f"file://{tmp_path}/{name}", began,
                                                None).startswith("left"), name
    assert old.read_bytes() == b"the user's data" and (tmp_path / "link").is_symlink()
    assert null.intact() and pipe.intact()
    assert destination.remove_written_since(f"file://{written}", began, None).startswith(
        "removed")
    assert not written.exists()
    assert destination.remove_written_since(f"file://{written}", began, None).startswith(
        "left")  # gone already: nothing to do
    assert destination.remove_written_since("gsiftp://h/x", began, None).startswith("left")


def test_devices_fifos_and_symlinks_are_never_removed(tmp_path: Path) -> None:
    null = null_node(tmp_path / "null")
    pipe = fifo(tmp_path / "pipe")
    target = tmp_path / "target.dat"
    target.write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    kinds = {}
    for name in ("null", "pipe", "link", "dangling"):
        claim = destination.claim(f"file://{tmp_path}/{name}", None)
        kinds[name] = (claim.kind, claim.symlink)
        assert destination.remove(claim, None).startswith("left")
    assert kinds == {"null": (DestKind.NULL, False), "pipe": (DestKind.FIFO, False),
                     "link": (DestKind.REGULAR, True), "dangling": (DestKind.ABSENT, True)}
    assert null.intact() and pipe.intact()
    assert (tmp_path / "link").is_symlink() and target.read_bytes() == b"x" * 10
    assert (tmp_path / "dangling").is_symlink() and not (tmp_path / "nowhere").exists()
    other = tmp_path / "tty"
    os.mknod(other, 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full: not a null device
    claim = destination.claim(f"file://{other}", None)
    assert claim.kind is DestKind.DEVICE and claim.ordered and claim.is_sink
    assert "not checked" in str(claim.facts()["destination_checks"])


def test_claims_look_with_the_owners_rights(users: list[pwd.struct_passwd]) -> None:
    top = Path(f"/tmp/stork-dest-{os.getpid()}")
    top.mkdir(mode=0o700)  # root's: the user can look at nothing inside
    with removed_after(top):
        secret = top / "secret"
        null_node(secret)
        run_as = RunAs.for_owner(users[0].pw_uid)
        assert destination.look(f"file://{secret}", run_as).kind is DestKind.UNKNOWN
        assert destination.look(f"file://{secret}", None).kind is DestKind.NULL
        claim = destination.claim(f"file://{top}/new.dat", run_as)
        assert not (top / "new.dat").exists()  # not created: the user may not write there
        (top / "new.dat").write_bytes(b"root's")
        destination.remove(claim, run_as)  # cannot remove as the user; says so, no error
        assert (top / "new.dat").read_bytes() == b"root's"


# -- through a real daemon ------------------------------------------------------------------

def result_of(stork: StorkServer, job_id: int) -> dict:
    return stork.job(job_id)["job"]["result"]


def test_file_and_ftp_transfers_into_a_device_keep_the_device(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / "to-null.dat", 5 * MB + 3, seed=11)
    null = null_node(tmp_path / "null")
    ids = stork.submit(f"""
    [ dap_type = transfer; max_retries = 0; verify_checksum = true;
      src_url = "file://{src}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; max_retries = 0; arguments = "-p 4"; verify_checksum = true;
      src_url = "{gridftp.url(src)}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; max_retries = 0; optimization = "YES";
      src_url = "{gridftp.url(src)}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; max_retries = 0; checksum = "md5:{md5(src)}";
      src_url = "file://{src}"; dest_url = "file://{null.path}" ]
    [ dap_type = transfer; max_retries = 0; arguments = "-p 4";
      src_url = "file://{src}"; dest_url = "{gridftp.url(null.path)}" ]""")
    for job_id in ids:
        job = stork.wait_state(job_id)
        assert job["state"] == "COMPLETED", job
        assert job["bytes_done"] == src.stat().st_size
        remote = job["dest_url"].startswith("ftp://")  # MLST names no device numbers
        assert job["result"]["destination_kind"] == ("device" if remote else "null device")
        assert "not checked" in job["result"]["destination_checks"]
        assert null.intact()
    assert result_of(stork, ids[0])["source_checksum"] == f"md5:{md5(src)}"
    optimized = result_of(stork, ids[2])
    assert optimized["optimization_source"] == "destination"
    assert "null device" in optimized["optimization_reason"]


def test_a_fifo_gets_every_byte_in_order_from_one_stream(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    src = make_file(gridftp_root / "to-fifo.dat", 24 * MB, seed=12)
    pipe = fifo(tmp_path / "pipe")
    reader = FifoReader(pipe.path)
    # -p 8 would interleave the streams' blocks (verified by hand: the MD5 differs)
    [job_id] = stork.submit(f"""[ dap_type = transfer; max_retries = 0; arguments = "-p 8";
      src_url = "{gridftp.url(src)}"; dest_url = "file://{pipe.path}" ]""")
    job = stork.wait_state(job_id)
    assert job["state"] == "COMPLETED", job
    assert reader.result() == (src.stat().st_size, md5(src))
    assert pipe.intact()
    assert job["result"]["destination_kind"] == "FIFO"


def test_a_dataset_into_a_device_and_into_a_fifo(
        stork: StorkServer, gridftp: GridFtpServer, gridftp_root: Path, tmp_path: Path) -> None:
    data = gridftp_root / "set-to-sink"
    data.mkdir()
    files = [make_file(data / f"f{i}.dat", (i + 1) * 300_000, seed=20 + i) for i in range(6)]
    total = sum(f.stat().st_size for f in files)
    null = null_node(tmp_path / "null")
    [to_null] = stork.submit(f"""[ dap_type = transfer; verify_checksum = true;
      src_url = "{gridftp.url(data)}/"; dest_url = "file://{null.path}" ]""")
    job = stork.wait_state(to_null)
    assert job["state"] == "COMPLETED", job
    assert job["files_done"] == len(files) and job["bytes_done"] == total
    assert job["result"]["destination_kind"] == "null device"
    assert null.intact()
    pipe = fifo(tmp_path / "pipe")
    reader = FifoReader(pipe.path)
    [to_fifo] = stork.submit(f"""[ dap_type = transfer; arguments = "-cc 4 -p 4";
      src_url = "file://{data}/"; dest_url = "file://{pipe.path}" ]""")
    job = stork.wait_state(to_fifo)
    assert job["state"] == "COMPLETED", job
    count, _ = reader.result()
    assert count == total  # every file, each once
    assert pipe.intact()


def test_failed_removed_and_killed_attempts_leave_what_was_there(
        tmp_path: Path, gridftp: GridFtpServer) -> None:
    """A transfer that fails (network) onto a device, a FIFO and a symlink, stork_rm during
    a transfer into a device, and kill -9 of the daemon in the middle of one."""
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.1, chunk=65536)
    src = make_file(tmp_path / "slow.src", 4 * MB, seed=30)
    null = null_node(tmp_path / "null")
    pipe = fifo(tmp_path / "pipe")
    reader = FifoReader(pipe.path)  # a writer's open would wait for a reader
    target = tmp_path / "target.dat"
    target.write_bytes(b"the target")
    (tmp_path / "link").symlink_to(target)
    old = tmp_path / "old.dat"
    old.write_bytes(b"the user's old data")
    dead = f"ftp://127.0.0.1:{gridftp.port + 1}/nothing"  # refused: retryable, then FAILED
    server = StorkServer(tmp_path / "state", knobs={"STORK_MODULE_DIR": str(modules)}).start()
    try:
        failing = server.submit("".join(
            f'[ dap_type = transfer; max_retries = 0; src_url = "{dead}"; '
            f'dest_url = "file://{path}" ]\n'
            for path in (null.path, pipe.path, tmp_path / "link", old)) +
            f'[ dap_type = transfer; max_retries = 0; src_url = "{dead}"; '
            f'dest_url = "{gridftp.url(null.path)}" ]')
        for job_id in failing:
            assert server.wait_state(job_id)["state"] == "FAILED"
        assert null.intact() and pipe.intact()
        assert (tmp_path / "link").is_symlink() and target.exists()  # followed, not removed
        # globus-url-copy truncated it before it connected: the attempt changed it, it goes
        assert not old.exists()
        [removed] = server.submit(f"""[ dap_type = transfer;
          src_url = "file://{src}"; dest_url = "file://{null.path}" ]""")
        wait_for(lambda: server.job(removed)["job"]["bytes_done"] > 0, 20, what="a slow copy")
        server.cli("stork_rm", str(removed), check=True)
        assert server.wait_state(removed)["state"] == "REMOVED"
        assert null.intact()
        [killed] = server.submit(f"""[ dap_type = transfer;
          src_url = "file://{src}"; dest_url = "file://{null.path}" ]""")
        wait_for(lambda: server.job(killed)["job"]["bytes_done"] > 0, 20, what="a slow copy")
        server.kill9()
        assert null.intact()
        server.start()
        job = server.wait_state(killed, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert null.intact()
    finally:
        server.stop()
    reader.result()


def test_a_permanent_failure_leaves_no_file_the_claim_created_nor_one_the_tool_changed(
        tmp_path: Path, gridftp: GridFtpServer, gridftp_root: Path) -> None:
    """A missing source (a permanent failure) into a new local path leaves no empty file
    behind, as cp leaves none. A file that was there stays as it was when the tool did not
    touch it (the copy helper looks at the source first), and goes when the tool changed it
    (globus-url-copy truncates its destination before it reaches the source), as after a
    retryable failure: no empty file stands where the user's data was."""
    kept, truncated = tmp_path / "kept.dat", tmp_path / "truncated.dat"
    for path in (kept, truncated):
        path.write_bytes(b"the user's old data")
    missing = (f"file://{tmp_path / 'no-such.src'}", gridftp.url(gridftp_root / "no-such.src"))
    with StorkServer(tmp_path / "state") as server:
        ids = server.submit("".join(
            f'[ dap_type = transfer; src_url = "{src}"; dest_url = "file://{dest}" ]\n'
            for src, dest in zip(missing * 2, (tmp_path / "new-0.dat", tmp_path / "new-1.dat",
                                               kept, truncated), strict=True)))
        jobs = [server.wait_state(i) for i in ids]
    assert all((j["state"], j["failure_kind"]) == ("FAILED", "permanent") for j in jobs), jobs
    assert all('"created": true' in j["result"]["destination_claim"] for j in jobs[:2]), jobs
    assert sorted(p.name for p in tmp_path.glob("*.dat")) == ["kept.dat"]
    assert kept.read_bytes() == b"the user's old data"


def test_kill_9_in_a_transfer_to_a_new_file_removes_that_file_and_nothing_else(
        tmp_path: Path) -> None:
    """The claim is kept on the job: recovery removes the partial file the attempt made."""
    modules = tmp_path / "modules"
    install_slow_module(modules, "file", "file", delay_s=0.1, chunk=65536)
    src = make_file(tmp_path / "slow.src", 4 * MB, seed=31)
    out = tmp_path / "out.dat"
    server = StorkServer(tmp_path / "state", knobs={"STORK_MODULE_DIR": str(modules)}).start()
    try:
        [job_id] = server.submit(f"""[ dap_type = transfer; max_retries = 0;
          src_url = "file://{src}"; dest_url = "file://{out}" ]""")
        wait_for(lambda: server.job(job_id)["job"]["bytes_done"] > 0, 20, what="a slow copy")
        claim = Destination.from_text(result_of(server, job_id)["destination_claim"])
        assert claim is not None and claim.created
        server.kill9()
        assert 0 < out.stat().st_size < src.stat().st_size
        server.start()
        job = server.wait_state(job_id, timeout_s=60)
        assert job["state"] == "COMPLETED" and md5(out) == md5(src), job
        log = server.stderr_path.read_text()
        removed = log.index(f"job {job_id}: removed file://{out}")
        assert removed < log.index(f"job {job_id} attempt 2:")  # by recovery, before the retry
    finally:
        server.stop()


@pytest.fixture
def shared_area(users: list[pwd.struct_passwd]) -> Iterator[Path]:
    """A directory outside pytest's tree (other users reach it), owned by the first user."""
    top = Path(f"/tmp/stork-dest-area-{os.getpid()}")
    top.mkdir(mode=0o755)
    with removed_after(top):
        area = top / "user"
        area.mkdir()
        os.chown(area, users[0].pw_uid, users[0].pw_gid)
        yield area


def test_a_symlink_swapped_in_cannot_make_the_daemon_write_or_remove_elsewhere(
        tmp_path: Path, users: list[pwd.struct_passwd], shared_area: Path) -> None:
    """The job runs as its owner: a link swapped to a root file during the transfer leads
    the next attempt's tool to a file it may not write, and no clean-up (crash recovery,
    the failed retry) removes or changes the root file or the link."""
    user = users[0]
    modules = shared_area.parent / "modules"  # the module runs as the user: reachable
    install_slow_module(modules, "file", "file", delay_s=0.1, chunk=65536,
                        python="/usr/bin/python3")
    src = make_file(shared_area / "slow.src", 2 * MB, seed=32)
    os.chown(src, user.pw_uid, user.pw_gid)
    mine = shared_area / "mine.dat"
    link = shared_area / "link"
    link.symlink_to(mine)
    os.lchown(link, user.pw_uid, user.pw_gid)
    roots = shared_area.parent / "roots.dat"
    roots.write_bytes(b"root's own")
    roots.chmod(0o644)
    server = StorkServer(tmp_path / "state", knobs={
        "STORK_MODULE_DIR": str(modules),
        "STORK_SOCKET": str(shared_area.parent / "stork.sock")}).start()
    try:
        code, body = as_user(user.pw_uid, server.socket, "POST", "/v1/jobs", {
            "text": f'[ dap_type = transfer; max_retries = 1; '
                    f'src_url = "file://{src}"; dest_url = "file://{link}" ]',
            "filename": "swap.dap", "iwd": str(shared_area)})
        assert code == 201, body
        [job_id] = body["ids"]
        wait_for(lambda: server.job(job_id)["job"]["bytes_done"] > 0, 20, what="a slow copy")
        swapped = shared_area / "swap"
        swapped.symlink_to(roots)
        os.replace(swapped, link)  # the link now points at root's file
        server.kill9()  # the attempt ends mid-write: recovery cleans up after it
        server.start()
        job = server.wait_state(job_id, timeout_s=120)
        assert job["state"] == "FAILED", job
        assert "Permission denied" in job["last_error"], job  # the tool, as the user
        assert roots.read_bytes() == b"root's own" and roots.stat().st_uid == 0
        assert link.is_symlink() and os.readlink(link) == str(roots)
    finally:
        server.stop()


def test_a_device_the_owner_cannot_write_is_a_permanent_failure(
        tmp_path: Path, users: list[pwd.struct_passwd], shared_area: Path,
        gridftp: GridFtpServer, gridftp_root: Path) -> None:
    user = users[0]
    src = make_file(gridftp_root / "to-roots-null.dat", MB, seed=33)
    null = null_node(shared_area / "roots-null", mode=0o600)
    server = StorkServer(tmp_path / "state", knobs={
        "STORK_SOCKET": str(shared_area.parent / "stork.sock")}).start()
    try:
        code, body = as_user(user.pw_uid, server.socket, "POST", "/v1/jobs", {
            "text": f'[ dap_type = transfer; src_url = "{gridftp.url(src)}"; '
                    f'dest_url = "file://{null.path}" ]',
            "filename": "null.dap", "iwd": str(shared_area)})
        assert code == 201, body
        job = server.wait_state(body["ids"][0])
        assert job["state"] == "FAILED" and job["failure_kind"] == "permanent", job
        assert "ermission denied" in job["last_error"] and job["attempts"] == 1
        assert null.intact()
    finally:
        server.stop()
