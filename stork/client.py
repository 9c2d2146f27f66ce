"""Thin client of the stork_server API (Unix socket or TCP)."""

from __future__ import annotations

import socket
from typing import Any

import httpx

from stork.config import Settings
from stork.errors import ApiError, ServerUnreachable
from stork.urls import parse_hostport

DEFAULT_TIMEOUT_S = 60.0
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def resolve_server(name: str | None, settings: Settings) -> str:
    """Where to talk: `-name` or the ad's stork_server, else the configured socket.

    A name containing "/" is a Unix socket path; HOST:PORT is the TCP API; a bare host that
    is this machine means the local socket.
    """
    if not name:
        return settings.socket
    if "/" in name:
        return name
    try:
        return str(parse_hostport(name))  # HOST:PORT
    except ValueError:
        pass
    try:
        host = parse_hostport(name, default_port=1).host  # a bare HOST (the port is unused)
    except ValueError as exc:
        raise ApiError(f"stork_server {name!r}: {exc}") from None
    if host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return settings.socket
    raise ApiError(f"stork_server {name!r} is a remote host without a port; "
                   "write HOST:PORT (the server's STORK_API_ADDRESS)")


def _token(settings: Settings) -> str | None:
    if not settings.api_token_file:
        return None
    try:
        return open(settings.api_token_file).read().strip()
    except OSError:
        return None


class Client:
    def __init__(self, target: str, token: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if "/" in target:
            transport = httpx.HTTPTransport(uds=target)
            base = "http://stork"
        else:
            transport = httpx.HTTPTransport()
            base = f"http://{target}"
        self._http = httpx.Client(transport=transport, base_url=base, timeout=timeout_s,
                                  headers=headers)

    @classmethod
    def from_settings(cls, settings: Settings, name: str | None = None) -> Client:
        target = resolve_server(name, settings)
        return cls(target, _token(settings) if "/" not in target else None)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"cannot reach stork_server at {self.target}: {exc or type(exc).__name__} "
                "(is stork_server running with the same configuration?)") from None
        try:
            body = response.json()
        except ValueError:
            raise ApiError(f"stork_server at {self.target} sent a response that is not JSON "
                           f"(HTTP {response.status_code})", status=response.status_code) from None
        if response.status_code >= 400:
            raise ApiError(body.get("error", f"HTTP {response.status_code}"),
                           status=response.status_code)
        return body

    def ping(self) -> dict[str, Any]:
        return self._call("GET", "/v1/ping")

    def submit(self, text: str, filename: str, iwd: str, lognotes: str | None = None,
               dry_run: bool = False) -> list[int]:
        body = {"text": text, "filename": filename, "iwd": iwd, "lognotes": lognotes,
                "dry_run": dry_run}
        return list(self._call("POST", "/v1/jobs", json=body)["ids"])

    def jobs(self, constraint: str | None = None, long: bool = False,
             states: list[str] | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if constraint:
            params["constraint"] = constraint
        if long:
            params["long"] = "1"
        if states:
            params["state"] = states
        return list(self._call("GET", "/v1/jobs", params=params)["jobs"])

    def status(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def history(self, src: str, dest: str, limit: int = 50) -> dict[str, Any]:
        return self._call("GET", "/v1/history", params={"src": src, "dest": dest, "limit": limit})

    def matrix(self) -> dict[str, Any]:
        return self._call("GET", "/v1/matrix")

    def remove(self, job_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/jobs/{job_id}")["job"]
