from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

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
    ("\nSTORK_API_MAX_INFLIGHT = 0\n", 2, "STORK_API_MAX_INFLIGHT: must be at least 1"),
    ("STORK_API_MAX_INFLIGHT = lots\n", 1, "STORK_API_MAX_INFLIGHT: expected an integer"),
    ("STORK_API_MAX_WAITERS = -1\n", 1, "STORK_API_MAX_WAITERS: must be at least 0"),
    ("STORK_API_WAIT_TIMEOUT = 0.5\n", 1, "STORK_API_WAIT_TIMEOUT: must be at least 1"),
    ("STORK_API_WAIT_TIMEOUT = soon\n", 1, "STORK_API_WAIT_TIMEOUT: expected a number"),
    ("EOS_API_TOKEN_FILE = token\n", 1, "EOS_API_TOKEN_FILE: expected an absolute path"),
    ("EOS_ALLOW_LOCAL_SOURCES = maybe\n", 1, "EOS_ALLOW_LOCAL_SOURCES: expected true or false"),
    ("EOS_SAMPLE_USER = two words\n", 1, "EOS_SAMPLE_USER: expected a user name"),
    ("EOS_SAMPLE_USER =\n", 1, "EOS_SAMPLE_USER: expected a user name"),
    ("EOS_API_ADDRESS = host\n", 1, "EOS_API_ADDRESS: expected HOST:PORT"),
    ("EOS_API_ADDRESS = host:0\n", 1, "EOS_API_ADDRESS: bad port"),
])
def test_bad_config_names_file_and_line(tmp_path: Path, text: str, line: int,
                                        fragment: str) -> None:
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


def test_addresses_go_through_the_one_hostport_parser(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    cfg.write_text("STORK_API_ADDRESS = [::1]:9618\nEOS_API_ADDRESS = :9700\n")
    s = config.load(str(cfg), env={"HOME": "/root"})
    assert (s.api_address, s.eos_api_address) == ("[::1]:9618", "127.0.0.1:9700")
    cfg.write_text("STORK_API_ADDRESS = ::1:9618\n")  # an unbracketed IPv6 host is ambiguous
    with pytest.raises(ConfigError, match="STORK_API_ADDRESS: expected HOST:PORT"):
        config.load(str(cfg), env={"HOME": "/root"})


def test_new_api_and_eos_knobs(tmp_path: Path) -> None:
    s = config.load(None, env={"HOME": "/root"})
    assert (s.api_max_inflight, s.api_max_waiters, s.api_wait_timeout_s) == (1024, 10000, 60.0)
    assert (s.eos_api_token_file, s.eos_allow_local_sources, s.eos_sample_user) == (
        "", False, "nobody")
    cfg = tmp_path / "cfg"
    cfg.write_text("STORK_API_TOKEN_FILE = /etc/stork/token\nSTORK_API_MAX_INFLIGHT = 1\n"
                   "STORK_API_MAX_WAITERS = 0\nSTORK_API_WAIT_TIMEOUT = 2.5\n"
                   "EOS_ALLOW_LOCAL_SOURCES = yes\nEOS_SAMPLE_USER = stork-eos\n")
    s = config.load(str(cfg), env={"HOME": "/root"})
    assert (s.api_max_inflight, s.api_max_waiters, s.api_wait_timeout_s) == (1, 0, 2.5)
    assert s.eos_api_token_file == "/etc/stork/token"  # follows STORK_API_TOKEN_FILE
    assert (s.eos_allow_local_sources, s.eos_sample_user) == (True, "stork-eos")
    s = config.load(str(cfg), env={"HOME": "/root", "_STORK_EOS_API_TOKEN_FILE": "/eos/token"})
    assert (s.api_token_file, s.eos_api_token_file) == ("/etc/stork/token", "/eos/token")


# -- live and restart-only knobs, SIGHUP ---------------------------------------------------

RESTART_ONLY = {"STORK_STATE_DIR", "STORK_DATABASE", "STORK_NODE_NAME", "STORK_LEASE_TIME",
                "STORK_SOCKET", "STORK_API_ADDRESS",
                "STORK_API_TOKEN_FILE", "STORK_PID_FILE", "STORK_LOG", "STORK_LOG_LEVEL",
                "EOS_SAMPLE_USER", "EOS_WORKERS", "EOS_API_ADDRESS", "EOS_API_TOKEN_FILE",
                "EOS_ALPHA", "EOS_BETA"}


def test_every_knob_is_marked_live_or_restart() -> None:
    for knob in config.KNOBS:
        assert isinstance(knob.reload, config.Reload), knob.name
        assert knob.live == (knob.reload is config.Reload.LIVE)
    # pinned, so that changing a mark is a decision seen in review
    assert {k.name for k in config.KNOBS if not k.live} == RESTART_ONLY
    assert len({k.name for k in config.KNOBS}) == len({k.field for k in config.KNOBS}) == len(
        config.KNOBS)


def _settings(tmp_path: Path, text: str) -> config.Settings:
    cfg = tmp_path / "cfg"
    cfg.write_text(text)
    return config.load(str(cfg), env={"HOME": "/home/alice"})


def test_reload_plan_applies_live_knobs_and_keeps_restart_only_ones(tmp_path: Path) -> None:
    old = config.load(None, env={"HOME": "/home/alice"})
    new = _settings(tmp_path, "STORK_MAX_NUM_JOBS = 3\nSTORK_SOCKET = /run/stork.sock\n"
                              "EOS_WORKERS = 2\nEOS_PENALTY_LIMIT = 1.5\n"
                              "STORK_API_MAX_INFLIGHT = 16\nEOS_SAMPLE_USER = daemon\n")
    plan = config.reload_plan(old, new)
    assert plan.live_changed == ("STORK_API_MAX_INFLIGHT", "STORK_MAX_NUM_JOBS",
                                 "EOS_PENALTY_LIMIT")  # in KNOBS order
    assert plan.restart_changed == ("STORK_SOCKET", "EOS_SAMPLE_USER", "EOS_WORKERS")
    assert config.KnobChange("EOS_WORKERS", False, 8, 2) in plan.changes
    assert config.KnobChange("STORK_MAX_NUM_JOBS", True, 10, 3) in plan.changes
    s = plan.settings
    assert (s.max_num_jobs, s.eos_penalty_limit, s.api_max_inflight) == (3, 1.5, 16)
    assert (s.socket, s.eos_workers, s.eos_sample_user) == (
        "/home/alice/.stork/stork.sock", 8, "nobody")
    assert s.source == new.source == str(tmp_path / "cfg")
    # a second SIGHUP with the same file applies nothing more and still reports the restart
    again = config.reload_plan(plan.settings, new)
    assert again.live_changed == ()
    assert again.restart_changed == plan.restart_changed
    assert again.settings == plan.settings


def test_reload_plan_with_nothing_changed(tmp_path: Path) -> None:
    old = config.load(None, env={"HOME": "/home/alice"})
    new = _settings(tmp_path, "STORK_MAX_NUM_JOBS = 10\n")
    plan = config.reload_plan(old, new)
    assert plan.changes == () and plan.live_changed == () and plan.restart_changed == ()
    assert plan.settings == new


# -- generated files --------------------------------------------------------------------------

def _knobs_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tools_knobs", REPO / "tools" / "knobs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_up_to_date() -> None:
    knobs = _knobs_tool()
    assert knobs.stale() == [], "run: .venv/bin/python tools/knobs.py --write"
    assert knobs.main(["--check"]) == 0


def test_generator_marks_each_knob_and_notices_stale_files(tmp_path: Path) -> None:
    knobs = _knobs_tool()
    (tmp_path / "etc").mkdir()
    (tmp_path / "docs").mkdir()
    assert sorted(knobs.stale(tmp_path)) == sorted(knobs.outputs(tmp_path))  # missing
    knobs.write(tmp_path)
    assert knobs.stale(tmp_path) == []
    docs = (tmp_path / "docs" / "CONFIG.md").read_text()
    shipped = (tmp_path / "etc" / "stork_config").read_text()
    blocks = {b.splitlines()[-1].partition(" =")[0]: b for b in shipped.split("\n\n")[1:]}
    assert list(blocks) == [k.name for k in config.KNOBS]
    for knob in config.KNOBS:
        assert re.search(rf"^\| `{knob.name}` \| [^|]* \| {knob.reload.value} \|", docs, re.M)
        assert blocks[knob.name].startswith(f"# [{knob.reload.value}] "), blocks[knob.name]
    prose = " ".join(docs.split())
    assert "keeps running with its old value until the next restart" in prose
    (tmp_path / "docs" / "CONFIG.md").write_text(docs.replace("| live |", "| restart |", 1))
    assert knobs.stale(tmp_path) == [tmp_path / "docs" / "CONFIG.md"]
