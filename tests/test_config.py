from __future__ import annotations

import re
from pathlib import Path

import pytest

from stork import config
from stork.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def test_defaults_expand_references() -> None:
    s = config.load(None, env={"HOME": "/home/alice"})
    assert s.state_dir == "/home/alice/.stork"
    assert s.database == "/home/alice/.stork/stork.db"
    assert s.socket == "/home/alice/.stork/stork.sock"
    assert s.max_num_jobs == 10 and s.default_streams == 1
    assert s.source == "<defaults>"


def test_file_overrides_and_references(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    cfg.write_text("# comment\n\nSTORK_STATE_DIR = /srv/stork\n"
                   "STORK_SOCKET = $(STORK_STATE_DIR)/api.sock\n"
                   "STORK_MAX_NUM_JOBS = 3\nSTORK_LOG = $ENV(LOGDIR)/s.log\n")
    s = config.load(str(cfg), env={"HOME": "/root", "LOGDIR": "/var/log"})
    assert (s.state_dir, s.socket, s.max_num_jobs, s.log) == (
        "/srv/stork", "/srv/stork/api.sock", 3, "/var/log/s.log")
    assert s.database == "/srv/stork/stork.db"  # default refers to the changed knob


@pytest.mark.parametrize("text, line, fragment", [
    ("STORK_MAX_NUM_JOBS = 2\nSTORK_NO_SUCH = 1\n", 2, "unknown knob STORK_NO_SUCH"),
    ("\n\nSTORK_MAX_NUM_JOBS = many\n", 3, "STORK_MAX_NUM_JOBS: expected an integer"),
    ("STORK_MAX_NUM_JOBS = 0\n", 1, "must be at least 1"),
    ("STORK_STATE_DIR = relative/dir\n", 1, "absolute path"),
    ("just some words\n", 1, "expected NAME = value"),
    ("STORK_API_ADDRESS = nowhere\n", 1, "HOST:PORT"),
    ("STORK_LOG = $(STORK_NOPE)/x\n", 1, "unknown knob $(STORK_NOPE)"),
])
def test_bad_config_names_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    cfg = tmp_path / "stork_config"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        config.load(str(cfg), env={"HOME": "/root"})
    message = str(info.value)
    assert message.startswith(f"{cfg}:{line}: "), message
    assert fragment in message


def test_environment_override_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    cfg.write_text("STORK_MAX_NUM_JOBS = 3\n")
    s = config.load(str(cfg), env={"HOME": "/root", "_STORK_MAX_NUM_JOBS": "7"})
    assert s.max_num_jobs == 7
    with pytest.raises(ConfigError, match="_STORK_MAX_RETRY"):
        config.load(str(cfg), env={"HOME": "/root", "_STORK_MAX_RETRY": "-1"})


def test_config_path_precedence() -> None:
    assert config.config_path("/a", {"STORK_CONFIG": "/b"}) == "/a"
    assert config.config_path(None, {"STORK_CONFIG": "/b"}) == "/b"
    assert config.config_path(None, {}) is None


def test_shipped_config_lists_every_knob_with_its_default() -> None:
    shipped = (REPO / "etc" / "stork_config").read_text()
    values = dict(re.findall(r"^([A-Z_]+)[ \t]*=[ \t]*(.*?)[ \t]*$", shipped, re.M))
    for knob in config.KNOBS:
        assert knob.name in values, f"{knob.name} missing from etc/stork_config"
        assert values[knob.name] == knob.default, knob.name
    assert set(values) == {k.name for k in config.KNOBS}
    # and the shipped file loads as it is
    config.load(str(REPO / "etc" / "stork_config"), env={"HOME": "/root"})


def test_docs_describe_every_knob() -> None:
    docs = (REPO / "docs" / "CONFIG.md").read_text()
    for knob in config.KNOBS:
        assert f"`{knob.name}`" in docs, f"{knob.name} missing from docs/CONFIG.md"


def test_tcp_api_address_without_a_host_binds_loopback(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    cfg.write_text("STORK_API_ADDRESS = :9618\n")
    assert config.load(str(cfg), env={"HOME": "/root"}).api_address == "127.0.0.1:9618"
    assert config.load(None, env={"HOME": "/root"}).api_address == ""  # off by default
