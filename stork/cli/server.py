"""stork_server: the daemon. Detaches with python-daemon unless -f is given. SIGUSR2
writes every thread's stack to its log."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys

from stork import config
from stork.cli.common import EXIT_INVALID, EXIT_OK, error, parser
from stork.errors import ConfigError, StorkError
from stork.httpd import read_token, socket_in_use
from stork.server.daemon import Daemon

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _logging(settings: config.Settings, foreground: bool) -> logging.FileHandler:
    os.makedirs(os.path.dirname(settings.log), exist_ok=True)
    handler = logging.FileHandler(settings.log)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    if foreground:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(console)
    root.setLevel(settings.log_level)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    return handler


def _dump_stacks_on_usr2(handler: logging.FileHandler) -> None:
    """SIGUSR2 writes every thread's stack to the log (a daemon that seems stuck can say
    where, without stopping it: `kill -USR2 PID`)."""
    if handler.stream is not None:  # (opened at once: the handler is not delayed)
        faulthandler.register(signal.SIGUSR2, file=handler.stream, all_threads=True)


def main(argv: list[str] | None = None) -> int:
    p = parser("stork_server", "The Stork data placement daemon.")
    p.add_argument("-f", "--foreground", action="store_true",
                   help="stay in the foreground (log to stderr too)")
    args = p.parse_args(argv)
    path = config.config_path(args.config, os.environ)
    try:
        settings = config.load(path)
        if settings.api_address:
            read_token(settings.api_token_file, "STORK_API_TOKEN_FILE")
    except ConfigError as exc:
        error(str(exc))
        return EXIT_INVALID
    if socket_in_use(settings.socket):
        error(f"another stork_server is already serving on {settings.socket}")
        return EXIT_INVALID
    os.makedirs(settings.state_dir, mode=0o755, exist_ok=True)
    daemon_obj = Daemon(settings, path)
    if args.foreground:
        _dump_stacks_on_usr2(_logging(settings, foreground=True))
        try:
            daemon_obj.run()
        except StorkError as exc:
            logging.getLogger("stork.server").error("%s", exc)
            return EXIT_INVALID
        return EXIT_OK

    import daemon
    import daemon.pidfile

    handler = _logging(settings, foreground=False)
    context = daemon.DaemonContext(
        working_directory=settings.state_dir,
        umask=0o022,
        pidfile=daemon.pidfile.TimeoutPIDLockFile(settings.pid_file, acquire_timeout=1),
        files_preserve=[handler.stream],
        signal_map={},  # Daemon.install_signals sets the handlers after detaching
    )
    with context:
        _dump_stacks_on_usr2(handler)
        try:
            daemon_obj.run()
        except StorkError as exc:
            logging.getLogger("stork.server").error("%s", exc)
            return EXIT_INVALID
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
