"""`parse_hostport`, the one HOST:PORT parser, and the two places that name servers with it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stork import config
from stork.client import resolve_server
from stork.eos.client import remote_address
from stork.errors import ApiError
from stork.urls import HostPort, parse_hostport


@pytest.mark.parametrize("text, host, port", [
    ("example.org:9620", "example.org", 9620),
    ("10.0.0.7:1", "10.0.0.7", 1),
    ("  example.org:65535 ", "example.org", 65535),
    (":9620", "127.0.0.1", 9620),  # no host: loopback
    ("[::1]:9620", "::1", 9620),
    ("[2001:db8::5]:2811", "2001:db8::5", 2811),
])
def test_host_and_port(text: str, host: str, port: int) -> None:
    assert parse_hostport(text) == HostPort(host, port)
    assert parse_hostport(text, default_port=1) == HostPort(host, port)  # an explicit port wins


@pytest.mark.parametrize("text, host", [
    ("example.org", "example.org"),
    ("localhost", "localhost"),
    ("::1", "::1"),  # a bare IPv6 literal: its colons are not a port
    ("[::1]", "::1"),
])
def test_bare_host_takes_the_default_port(text: str, host: str) -> None:
    assert parse_hostport(text, default_port=9621) == HostPort(host, 9621)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_hostport(text)


@pytest.mark.parametrize("text", ["example.org:0", "example.org:65536", "example.org:http",
                                  "example.org:", "example.org:-1", "[::1]:x"])
def test_bad_port(text: str) -> None:
    for default in (None, 9621):
        with pytest.raises(ValueError, match="bad port"):
            parse_hostport(text, default)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_hostport(text, 9621)


@pytest.mark.parametrize("text", ["a b:80", "user@host:80", "host/x:80"])
def test_bad_host(text: str) -> None:
    with pytest.raises(ValueError, match="bad host"):
        parse_hostport(text)


def test_str_brackets_ipv6_so_it_parses_back() -> None:
    for address in (HostPort("::1", 80), HostPort("example.org", 80)):
        assert parse_hostport(str(address)) == address
    assert str(HostPort("::1", 80)) == "[::1]:80"


def test_resolve_server_names_a_socket_or_a_tcp_address(tmp_path: Path) -> None:
    settings = config.load(None, env={"HOME": str(tmp_path)})
    assert resolve_server(None, settings) == settings.socket
    assert resolve_server("/run/stork.sock", settings) == "/run/stork.sock"
    assert resolve_server("example.org:9620", settings) == "example.org:9620"
    assert resolve_server(":9620", settings) == "127.0.0.1:9620"
    assert resolve_server("[::1]:9620", settings) == "[::1]:9620"
    assert resolve_server("localhost", settings) == settings.socket
    assert resolve_server(socket.gethostname(), settings) == settings.socket
    with pytest.raises(ApiError, match="remote host without a port"):
        resolve_server("example.org", settings)
    with pytest.raises(ApiError, match="bad port"):
        resolve_server("example.org:http", settings)


def test_remote_address_of_opt_server() -> None:
    assert remote_address(None, 9621) is None
    assert remote_address("", 9621) is None
    assert remote_address("localhost", 9621) is None  # this machine: the embedded EOS
    assert remote_address(socket.gethostname(), 9621) is None
    assert remote_address("localhost:9700", 9621) == "localhost:9700"  # a port: an eos_server
    assert remote_address(":9700", 9621) == "127.0.0.1:9700"
    assert remote_address("eos.example.org", 9621) == "eos.example.org:9621"
    assert remote_address("eos.example.org:9700", 9621) == "eos.example.org:9700"
    assert remote_address("[2001:db8::5]:9700", 9621) == "[2001:db8::5]:9700"
    with pytest.raises(ValueError, match="bad port"):
        remote_address("eos.example.org:0", 9621)
