"""Generate etc/stork_config and docs/CONFIG.md from stork.config.KNOBS, the one knob table.

    .venv/bin/python tools/knobs.py --write   # regenerate both files
    .venv/bin/python tools/knobs.py --check   # exit 1 when either is stale (tests run this)

Both files are wholly generated: the prose of docs/CONFIG.md lives here, in DOCS_HEAD.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from stork.config import KNOBS, Knob

REPO = Path(__file__).resolve().parent.parent
CONFIG_FILE = Path("etc") / "stork_config"
DOCS_FILE = Path("docs") / "CONFIG.md"
WIDTH = 92

CONFIG_HEAD = """\
# Stork configuration (HTCondor syntax: NAME = value, # comments, $(NAME) references,
# $ENV(VAR) for environment variables). Every knob is listed with its default.
# Point the daemon and the commands at a file with -c FILE or STORK_CONFIG; a file of
# your own only needs the knobs it changes. _STORK_<NAME> environment variables override
# a file (for example _STORK_MAX_NUM_JOBS=4).
#
# On SIGHUP stork_server applies the knobs marked [live] at once; a changed [restart] knob
# is logged and keeps its running value until stork_server restarts.
#
# Generated from stork/config.py by tools/knobs.py --write; edit the table there.
"""

DOCS_HEAD = """\
# Configuration reference

<!-- Generated from KNOBS in stork/config.py by `tools/knobs.py --write`; edit there. -->

Stork reads one configuration file in HTCondor syntax: `NAME = value` lines, `#` comments,
`\\` at the end of a line to continue it, `$(NAME)` to refer to another knob and `$ENV(VAR)`
to an environment variable. References are expanded after the whole file is read.

Which file: `-c FILE` on any command or the daemon, otherwise the `STORK_CONFIG`
environment variable, otherwise the built-in defaults below. A file only needs the knobs it
changes. Sources, later winning: defaults, the file, then `_STORK_<NAME>` environment
variables (`_STORK_MAX_NUM_JOBS=4` overrides `STORK_MAX_NUM_JOBS`).

An unknown knob or a bad value stops `stork_server` at start (and any command) with a message
naming the file and line, for example:

    stork_server: error: /etc/stork/stork_config:12: STORK_MAX_NUM_JOBS: \
expected an integer, got 'many'

## Reloading on SIGHUP

`stork_server` re-reads the file on SIGHUP. The *On SIGHUP* column below says what happens to
a knob whose value changed:

- **live**: applied at once; the daemon reads these through its current settings on each use.
- **restart**: bound when the daemon starts: its socket and addresses, the files it opens or
  reads once (database, state directory, pid file, log file, token files), the log level, the
  EOS worker pools and the task matrices built from `EOS_ALPHA` and `EOS_BETA`. The daemon logs
  a warning naming each one that changed and keeps running with its old value until the next
  restart.

A file with an error on SIGHUP is logged and the whole old configuration kept.
`eos_server` reads the file once, when it starts; restart it to change its knobs.

`etc/stork_config` in the repository lists every knob with its default. Both it and the table
below are generated from the knob table in `stork/config.py`.

"""

TABLE_HEAD = "| Knob | Default | On SIGHUP | Meaning |\n| --- | --- | --- | --- |\n"


def render_config() -> str:
    """The text of etc/stork_config."""
    parts = [CONFIG_HEAD]
    for knob in KNOBS:
        comment = textwrap.fill(f"[{knob.reload.value}] {knob.doc}", WIDTH,
                                initial_indent="# ", subsequent_indent="# ")
        parts.append(f"\n{comment}\n{knob.name} = {knob.default}".rstrip() + "\n")
    return "".join(parts)


def _row(knob: Knob) -> str:
    default = f"`{knob.default}`" if knob.default else "(empty)"
    doc = knob.doc.replace("|", "\\|").replace("<", "&lt;")  # <src> is no HTML tag
    return f"| `{knob.name}` | {default} | {knob.reload.value} | {doc} |\n"


def render_docs() -> str:
    """The text of docs/CONFIG.md."""
    return DOCS_HEAD + TABLE_HEAD + "".join(_row(k) for k in KNOBS)


def outputs(repo: Path = REPO) -> dict[Path, str]:
    """Each generated file under `repo` with the text it should hold."""
    return {repo / CONFIG_FILE: render_config(), repo / DOCS_FILE: render_docs()}


def stale(repo: Path = REPO) -> list[Path]:
    """The generated files under `repo` that are missing or differ from the table."""
    out = []
    for path, text in outputs(repo).items():
        try:
            current = path.read_text()
        except FileNotFoundError:
            current = None
        if current != text:
            out.append(path)
    return out


def write(repo: Path = REPO) -> list[Path]:
    """Rewrite the stale generated files under `repo`; returns those rewritten."""
    changed = stale(repo)
    texts = outputs(repo)
    for path in changed:
        path.write_text(texts[path])
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = p.parse_args(argv)
    if args.write:
        for path in write():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    behind = stale()
    for path in behind:
        print(f"{path.relative_to(REPO)} is stale: run tools/knobs.py --write", file=sys.stderr)
    return 1 if behind else 0


if __name__ == "__main__":
    sys.exit(main())
