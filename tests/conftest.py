from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stork.transfer.remote import helper_available
from tests import gsi, pgcluster
from tests.support import GridFtpServer, StorkServer, missing_tools, removed_after


@pytest.fixture(scope="session")
def gridftp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gridftp")


@pytest.fixture(scope="session")
def gridftp(gridftp_root: Path) -> Iterator[GridFtpServer]:
    """A real globus-gridftp-server on 127.0.0.1 for the whole session."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"GridFTP tools not installed ({', '.join(missing)}); run `make setup`")
    with GridFtpServer(gridftp_root) as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[pgcluster.PostgresCluster]:
    """A private PostgreSQL cluster for the session (initdb in a temporary directory, a Unix
    socket there, run as an unprivileged user); `new_database()` gives each test its own."""
    why = pgcluster.missing()
    if why is not None:
        pytest.skip(why)
    with pgcluster.PostgresCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> gsi.TestCa:
    """A throw-away GSI certificate authority with a host and a user certificate, made with
    Debian's Globus tools once for the session (tests/gsi.py)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the GSI GridFTP server maps the test user to an account")
    missing = gsi.missing_tools()
    if missing:
        pytest.skip(f"GSI tools not installed ({', '.join(missing)}); run `make setup`")
    return gsi.TestCa(tmp_path_factory.mktemp("gsi")).create()


@pytest.fixture
def stork(tmp_path: Path) -> Iterator[StorkServer]:
    """A running personal stork_server with its own state directory."""
    server = StorkServer(tmp_path)
    server.start()
    yield server
    server.stop()


# one pair for each pytest-xdist worker (PYTEST_XDIST_WORKER: gw0, gw1, ...), so that the
# workers neither race to create them nor remove them under each other
USERS = tuple(f"storkt{n}{os.environ.get('PYTEST_XDIST_WORKER', '')}" for n in (1, 2))


@pytest.fixture(scope="session")
def users() -> Iterator[list[pwd.struct_passwd]]:
    """Two real unprivileged users, created for the session and removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates users and runs the daemon as root")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is missing (Debian package passwd)")
    made = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                            "--shell", "/usr/sbin/nologin", name], check=True)
            made.append(name)
    yield [pwd.getpwnam(n) for n in USERS]
    for name in made:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture(scope="module")
def export(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The directory a module's xrootd exports, outside pytest's private tree (xrootd runs as
    nobody)."""
    top = Path(f"/tmp/stork-xrootd-{request.module.__name__.rpartition('.')[2]}-{os.getpid()}")
    top.mkdir(mode=0o755)
    with removed_after(top):
        yield top / "export"


@pytest.fixture(scope="module")
def xrootd(test_ca: gsi.TestCa, export: Path) -> Iterator[gsi.XrootdServer]:
    """A real xrootd serving `export` as root:// and, over TLS with the test CA, davs://."""
    if shutil.which("xrootd") is None or not helper_available():
        pytest.skip("xrootd or the gfal2 bindings are missing; run `make setup`")
    server = gsi.XrootdServer(test_ca, export).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stork_x(test_ca: gsi.TestCa, tmp_path_factory: pytest.TempPathFactory,
            xrootd: gsi.XrootdServer) -> Iterator[StorkServer]:
    """A stork_server that trusts the test CA, for the module's xrootd tests."""
    server = StorkServer(tmp_path_factory.mktemp("stork-xrootd"),
                         env={"X509_CERT_DIR": str(test_ca.trust)}).start()
    yield server
    server.stop()
