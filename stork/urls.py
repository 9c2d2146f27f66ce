"""URL checks shared by submit validation and the transfer modules."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

# Schemes whose URLs name a host; file URLs name a local absolute path.
HOST_SCHEMES = frozenset({"ftp", "gsiftp", "http", "https", "iperf", "root", "xroot",
                          "davs", "dav"})
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+.-")


@dataclass(frozen=True)
class Url:
    text: str
    scheme: str
    host: str  # empty for file URLs
    port: int | None
    path: str  # percent-decoded

    @property
    def endpoint(self) -> str:
        """``host:port`` (or ``localhost`` for file URLs): the machine the URL touches."""
        if not self.host:
            return "localhost"
        return f"{self.host}:{self.port}" if self.port else self.host


def parse_url(text: str) -> Url:
    """Split and check a URL; raises ValueError with a reason a user can act on."""
    if not text:
        raise ValueError("URL is empty")
    if any(ord(ch) < 33 or ord(ch) == 127 for ch in text):
        raise ValueError("URL contains whitespace or control characters")
    scheme, sep, _ = text.partition("://")
    if not sep or not scheme:
        raise ValueError(f"{text!r} is not a URL of the form scheme://host/path")
    scheme = scheme.lower()
    if not set(scheme) <= _SCHEME_CHARS or not scheme[0].isalpha():
        raise ValueError(f"bad URL scheme {scheme!r}")
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in URL {text!r}") from None
    host = parts.hostname or ""
    path = unquote(parts.path)
    if scheme == "file":
        if host not in ("", "localhost"):
            raise ValueError(f"file URL {text!r} names host {host!r}; use file:///absolute/path")
        if not path.startswith("/"):
            raise ValueError(f"file URL {text!r} needs an absolute path")
        host = ""
    elif not host:
        raise ValueError(f"URL {text!r} names no host")
    if not path or path == "/" or path.endswith("/"):
        raise ValueError(f"URL {text!r} names a directory, not a file")
    if "\x00" in path:
        raise ValueError("URL path contains a NUL byte")
    return Url(text=text, scheme=scheme, host=host, port=port, path=path)


def with_scheme(url: str, scheme: str) -> str:
    """The same URL under another scheme (for alt_protocols)."""
    parts = urlsplit(url)
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class HostPort:
    host: str  # without brackets, even for IPv6 literals
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_hostport(text: str, default_port: int | None = None) -> HostPort:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback) -> HostPort; a bare HOST takes
    `default_port` when one is given. The one parser of addresses in the project; raises
    ValueError naming what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("address is empty; expected HOST:PORT")
    host, sep, port = text.rpartition(":")
    if text.startswith("[") and text.endswith("]"):  # bare IPv6 literal
        host, sep, port = text, "", ""
    if not sep or (host.count(":") and not host.startswith("[")):
        if default_port is None:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        host, port = text, str(default_port)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port in {text!r}; expected HOST:PORT with a port 1-65535")
    host = host.strip("[]") or "127.0.0.1"
    if any(ch.isspace() or ch in "/@" for ch in host):
        raise ValueError(f"bad host {host!r} in {text!r}")
    return HostPort(host, int(port))
