"""eos_server: the EOS on its own, for stork_servers whose jobs name it as opt_server.

Serves POST /v1/estimate (body: src_url, dest_url, arguments, size, use_history) and
GET /v1/ping on EOS_API_ADDRESS (loopback by default) through the project's one HTTP layer,
for callers holding the token in EOS_API_TOKEN_FILE. Its samples run as EOS_SAMPLE_USER
when it starts as root, and local (file://) ends are refused unless EOS_ALLOW_LOCAL_SOURCES.
Its history is in STORK_DATABASE.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from stork.cli.common import EXIT_INVALID, EXIT_OK, error, load_settings, parser
from stork.cli.server import LOG_FORMAT
from stork.eos.api import eos_http_server
from stork.eos.service import EosService
from stork.errors import StorkError
from stork.store import open_store

log = logging.getLogger("stork.eos_server")


def main(argv: list[str] | None = None) -> int:
    p = parser("eos_server", "The Estimation and Optimization Service on its own.")
    args = p.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except StorkError as exc:
        error(str(exc))
        return EXIT_INVALID
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT)
    store = open_store(settings.database)
    eos = EosService(settings, store)
    try:
        server = eos_http_server(eos, settings)
        server.start()
    except (StorkError, OSError) as exc:
        error(f"cannot serve on {settings.eos_api_address}: {exc}")
        eos.shutdown()
        store.close()
        return EXIT_INVALID
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("eos_server serving on %s", settings.eos_api_address)
    stop.wait()
    server.stop()
    eos.shutdown()
    store.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
