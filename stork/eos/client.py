"""Reaching an EOS: the daemon's embedded one, or a remote eos_server named by opt_server."""

from __future__ import annotations

import socket
from typing import Any, Protocol

import httpx

from stork.eos.service import EstimateRequest
from stork.errors import ApiError, ServerUnreachable

_LOCAL = {"", "localhost", "127.0.0.1", "::1"}


class Estimator(Protocol):
    def estimate(self, request: EstimateRequest) -> dict[str, Any]: ...


class RemoteEos:
    """An eos_server over HTTP (POST /v1/estimate)."""

    def __init__(self, address: str, timeout_s: float = 3600) -> None:
        self.address = address
        self.timeout_s = timeout_s

    def estimate(self, request: EstimateRequest) -> dict[str, Any]:
        try:
            response = httpx.post(f"http://{self.address}/v1/estimate", json=request.to_json(),
                                  timeout=self.timeout_s)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach eos_server at {self.address}: {exc}") from None
        body = response.json()
        if response.status_code >= 400:
            raise ApiError(f"eos_server at {self.address}: {body.get('error')}",
                           status=response.status_code)
        return dict(body["result"])


def remote_address(opt_server: str | None, default_port: int) -> str | None:
    """HOST:PORT of a remote EOS named by opt_server, or None for the embedded one."""
    if not opt_server:
        return None
    host, sep, port = opt_server.rpartition(":")
    if not (sep and port.isdigit()):
        host, port = opt_server, str(default_port)
    if host in _LOCAL or host in (socket.gethostname(), socket.getfqdn()):
        return None if not (sep and port.isdigit()) else f"{host or '127.0.0.1'}:{port}"
    return f"{host}:{port}"
