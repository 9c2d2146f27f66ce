from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pgcluster
from tests.support import GridFtpServer, StorkServer, missing_tools


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


@pytest.fixture
def stork(tmp_path: Path) -> Iterator[StorkServer]:
    """A running personal stork_server with its own state directory."""
    server = StorkServer(tmp_path)
    server.start()
    yield server
    server.stop()


USERS = ("storkt1", "storkt2")


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
