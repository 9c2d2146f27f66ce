"""Regenerate etc/stork_config and the knob table of docs/CONFIG.md from stork.config.KNOBS.

    .venv/bin/python tools/knobs.py

tests/test_config.py checks that both files list every knob with its default.
"""

from __future__ import annotations

from pathlib import Path

from stork.config import KNOBS

REPO = Path(__file__).resolve().parent.parent
HEADER = """# Stork configuration (HTCondor syntax: NAME = value, # comments, $(NAME) references,
# $ENV(VAR) for environment variables). Every knob is listed with its default.
# Point the daemon and the commands at a file with -c FILE or STORK_CONFIG; a file of
# your own only needs the knobs it changes. _STORK_<NAME> environment variables override
# a file (for example _STORK_MAX_NUM_JOBS=4).
"""
TABLE_START = "| Knob | Default | Meaning |"


def main() -> None:
    lines = [HEADER]
    for knob in KNOBS:
        lines += [f"# {knob.doc}", f"{knob.name} = {knob.default}", ""]
    (REPO / "etc" / "stork_config").write_text("\n".join(lines))
    docs = REPO / "docs" / "CONFIG.md"
    text = docs.read_text()
    head = text[: text.index(TABLE_START)]
    rows = [TABLE_START, "| --- | --- | --- |"]
    rows += [f"| `{k.name}` | `{k.default or '(empty)'}` | {k.doc} |" for k in KNOBS]
    docs.write_text(head + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
