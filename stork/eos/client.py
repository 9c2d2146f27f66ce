"""Reaching an EOS: the daemon's embedded one, or a remote eos_server named by opt_server."""

from __future__ import annotations

import socket
from typing import Protocol

import httpx

from stork.eos.types import EstimateRequest, EstimateResult
from stork.errors import ApiError, ServerUnreachable
from stork.urls import parse_hostport

_LOCAL = {"", "localhost", "127.0.0.1", "::1"}


class Estimator(Protocol):
    def estimate(self, request: EstimateRequest) -> EstimateResult: ...


class RemoteEos:
    """An eos_server over HTTP (POST /v1/estimate)."""

    def __init__(self, address: str, token: str, timeout_s: float = 3600) -> None:
        self.address = address
        self.token = token  # EOS_API_TOKEN_FILE's: eos_server's TCP API requires it
        self.timeout_s = timeout_s

    def estimate(self, request: EstimateRequest) -> EstimateResult:
        try:
            response = httpx.post(f"http://{self.address}/v1/estimate", json=request.to_json(),
                                  headers={"Authorization": f"Bearer {self.token}"},
                                  timeout=self.timeout_s)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach eos_server at {self.address}: {exc}") from None
        body = response.json()
        if response.status_code >= 400:
            raise ApiError(f"eos_server at {self.address}: {body.get('error')}",
                           status=response.status_code)
        try:
            return EstimateResult.from_json(body["result"])
        except (KeyError, ValueError, TypeError) as exc:
            raise ApiError(f"eos_server at {self.address} answered without a usable result: "
                           f"{exc!r}", status=response.status_code) from None


def remote_address(opt_server: str | None, default_port: int) -> str | None:
    """HOST:PORT of a remote EOS named by opt_server, or None for the embedded one (no
    opt_server, or a bare host that is this machine). ValueError for a malformed address."""
    if not opt_server:
        return None
    try:
        return str(parse_hostport(opt_server))  # HOST:PORT: an eos_server, even on this host
    except ValueError:
        pass
    address = parse_hostport(opt_server, default_port)  # a bare HOST; raises on a bad port
    if address.host in _LOCAL or address.host in (socket.gethostname(), socket.getfqdn()):
        return None
    return str(address)
