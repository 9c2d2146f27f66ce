"""eos_server's endpoints on the project's HTTP layer (stork.httpd): GET /v1/ping and
POST /v1/estimate, for remote callers holding the token (EOS_API_TOKEN_FILE)."""

from __future__ import annotations

import dataclasses
from http import HTTPStatus

from stork.config import Settings
from stork.eos.access import check_local_ends, request_from, sample_user
from stork.eos.service import EosService
from stork.httpd import Answer, HttpServer, Limits, Request, Route, read_token
from stork.urls import parse_hostport


def routes(eos: EosService, settings: Settings) -> list[Route]:
    run_as = sample_user(settings.eos_sample_user)  # once: EOS_SAMPLE_USER is restart-only

    def ping(request: Request) -> Answer:
        return HTTPStatus.OK, {"server": "eos_server", "sampling_runs": eos.sampling_runs,
                               "caller": request.caller.name}

    def estimate(request: Request) -> Answer:
        wanted = request_from(request.body)
        check_local_ends(wanted.src_url, wanted.dest_url, request.caller, run_as,
                         allow_local=settings.eos_allow_local_sources,
                         knob="EOS_ALLOW_LOCAL_SOURCES")
        result = eos.estimate(dataclasses.replace(wanted, run_as=run_as))
        return HTTPStatus.OK, {"result": result.to_json()}

    return [Route("GET", "/v1/ping", ping), Route("POST", "/v1/estimate", estimate, body=True)]


def eos_http_server(eos: EosService, settings: Settings) -> HttpServer:
    """eos_server on TCP (EOS_API_ADDRESS) with its token."""
    token = read_token(settings.eos_api_token_file, "EOS_API_TOKEN_FILE")
    return HttpServer("eos_server", routes(eos, settings),
                      tcp=parse_hostport(settings.eos_api_address), token=token,
                      token_knob="EOS_API_TOKEN_FILE",  # noqa: S106 - a knob name, not a secret
                      limits=Limits(max_inflight=settings.api_max_inflight, max_waiters=0,
                                    max_body_bytes=1 << 20),
                      workers=max(8, settings.eos_workers))
