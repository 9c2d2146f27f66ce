from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture
def stork(tmp_path: Path) -> Iterator[StorkServer]:
    """A running personal stork_server with its own state directory."""
    server = StorkServer(tmp_path)
    server.start()
    yield server
    server.stop()
