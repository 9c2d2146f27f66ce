"""stork_server's endpoints on the project's HTTP layer (stork.httpd).

Endpoints are documented in docs/API.md. Each route only translates a `Request` into a
`Service` call; the layer maps errors to status codes and keeps the limits.
"""

from __future__ import annotations

import ipaddress
from http import HTTPStatus

from stork.config import LiveSettings, Settings
from stork.errors import InvalidRequest
from stork.httpd import Answer, HttpServer, Limits, Raw, Request, Route, WaitRoute, read_token
from stork.server import status
from stork.server.metrics import CONTENT_TYPE, Metrics
from stork.server.service import Service
from stork.urls import parse_hostport


def limits_for(settings: Settings) -> Limits:
    return Limits(max_inflight=settings.api_max_inflight, max_waiters=settings.api_max_waiters,
                  max_body_bytes=settings.max_submit_bytes,
                  wait_timeout_s=settings.api_wait_timeout_s)


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4 loopback written as IPv6."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def operator_routes(service: Service, live: LiveSettings,
                    metrics: Metrics | None) -> list[Route | WaitRoute]:
    """The status page, its data and the Prometheus metrics (all read-only). The page's HTML
    holds no data and is served without the token; /metrics needs it unless
    STORK_METRICS_OPEN lets loopback clients in."""
    overview = status.Overview(service, metrics)
    html = status.page()

    def overview_route(request: Request) -> Answer:
        return HTTPStatus.OK, overview.build(request.number("hours", status.DEFAULT_HOURS,
                                                            minimum=0.01))

    found: list[Route | WaitRoute] = [
        Route("GET", "/", lambda r: (HTTPStatus.OK, Raw(html, "text/html; charset=utf-8")),
              open_to=lambda address: True),
        Route("GET", "/v1/overview", overview_route),
    ]
    if metrics is not None:
        found.append(Route(
            "GET", "/metrics", lambda r: (HTTPStatus.OK, Raw(metrics.exposition(), CONTENT_TYPE)),
            open_to=lambda address: live.current.metrics_open and is_loopback(address)))
    return found


def routes(service: Service, server: HttpServer | None = None) -> list[Route | WaitRoute]:
    def job_id(request: Request) -> int:
        return int(request.params["id"])

    def ping(request: Request) -> Answer:
        body = {**service.ping(), "caller": request.caller.name}
        if server is not None:
            body["api"] = {"inflight": server.inflight, "waiting": server.waiting,
                           "refused": server.refused}
        return HTTPStatus.OK, body

    def submit(request: Request) -> Answer:
        return HTTPStatus.CREATED, service.submit(request.body, request.caller)

    def list_jobs(request: Request) -> Answer:
        return HTTPStatus.OK, service.list_jobs(
            constraint=request.arg("constraint"),
            long=request.arg("long", "0") in ("1", "true"),
            states=list(request.query.get("state", [])) or None, caller=request.caller,
            columns=columns.split(",") if (columns := request.arg("columns")) is not None else None)

    def history(request: Request) -> Answer:
        src, dest = request.arg("src", ""), request.arg("dest", "")
        if not src or not dest:
            raise InvalidRequest("GET /v1/history needs src and dest (hosts or URLs)")
        return HTTPStatus.OK, service.history(src, dest, int(request.number("limit", 50)))

    def transfers(request: Request) -> Answer:
        limit = request.number("limit", -1)
        return HTTPStatus.OK, service.transfers(request.arg("src"), request.arg("dest"),
                                                request.number("since", 0),
                                                int(limit) if limit >= 0 else None)

    def files(request: Request) -> Answer:
        states = [s for part in request.query.get("state", []) for s in part.split(",") if s]
        limit = request.number("limit", -1)
        return HTTPStatus.OK, service.files(job_id(request), request.caller,
                                            states=states or None,
                                            offset=int(request.number("offset", 0)),
                                            limit=int(limit) if limit >= 0 else None)

    def wait_check(request: Request) -> tuple[bool, int, dict[str, object]]:
        seen = request.arg("files")
        done, body = service.wait_check(job_id(request), request.caller,
                                        since=int(request.number("since", 0)),
                                        terminal_only=request.arg("terminal", "0") in ("1", "true"),
                                        files_seen=int(seen) if seen else None)
        return done, HTTPStatus.OK, body

    return [
        Route("GET", "/v1/ping", ping),
        Route("POST", "/v1/jobs", submit, body=True),
        Route("GET", "/v1/jobs", list_jobs),
        Route("GET", "/v1/history", history),
        Route("GET", "/v1/matrix", lambda r: (HTTPStatus.OK, service.matrix())),
        Route("GET", "/v1/nodes", lambda r: (HTTPStatus.OK, service.nodes())),
        Route("POST", "/v1/estimate",
              lambda r: (HTTPStatus.OK, service.estimate(r.body, r.caller)), body=True),
        Route("GET", "/v1/jobs/{id}",
              lambda r: (HTTPStatus.OK, service.status(job_id(r), r.caller))),
        Route("DELETE", "/v1/jobs/{id}",
              lambda r: (HTTPStatus.OK, service.remove(job_id(r), r.caller))),
        WaitRoute("GET", "/v1/jobs/{id}/wait", job_id, wait_check),
        Route("GET", "/v1/jobs/{id}/files", files),
        Route("GET", "/v1/jobs/{id}/flow",
              lambda r: (HTTPStatus.OK, service.flow(job_id(r), r.caller))),
        Route("GET", "/v1/transfers", transfers),
        Route("POST", "/v1/transfers",
              lambda r: (HTTPStatus.OK, service.import_transfers(r.body, r.caller)), body=True),
    ]


def api_server(service: Service, live: LiveSettings,
               metrics: Metrics | None = None) -> HttpServer:
    """The daemon's API: the Unix socket, and TCP with its token when STORK_API_ADDRESS is set.
    Its limits are live knobs, read from `live` at each request. With `metrics`, /metrics."""
    settings = live.current
    tcp = parse_hostport(settings.api_address) if settings.api_address else None
    token = read_token(settings.api_token_file, "STORK_API_TOKEN_FILE") if tcp else ""
    server = HttpServer("stork_server", [], socket_path=settings.socket, tcp=tcp, token=token,
                        limits=lambda: limits_for(live.current))
    server.set_routes([*routes(service, server), *operator_routes(service, live, metrics)])
    return server
