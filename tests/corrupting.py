"""An operator module (``stork.transfer.<src>-<dst>`` in STORK_MODULE_DIR) that moves the file
with the real tool and then flips one byte of the destination on this machine's disk, where
the test servers keep their files: a corrupted destination of the right size, which only a
checksum can catch."""

from __future__ import annotations

import sys
from pathlib import Path

from stork.transfer.remote import GFAL_PYTHON, HELPER

SCRIPT = """#!{python}
import os, subprocess, sys
from urllib.parse import urlsplit
src, dest = sys.argv[1], sys.argv[2]
if src.startswith("gsiftp://") and dest.startswith(("gsiftp://", "file://")):
    argv = ["globus-url-copy", src, dest]
else:
    argv = ["{gfal_python}", "-I", "{helper}", "copy", src, dest]
code = subprocess.call(argv)
if code != 0:
    sys.exit(code)
path = "/" + urlsplit(dest).path.lstrip("/")
with open(path, "r+b") as handle:
    first = handle.read(1)
    handle.seek(0)
    handle.write(bytes([first[0] ^ 0xFF]))
"""


def install(module_dir: Path, src: str, dst: str) -> Path:
    module_dir.mkdir(parents=True, exist_ok=True)
    path = module_dir / f"stork.transfer.{src}-{dst}"
    path.write_text(SCRIPT.format(python=sys.executable, gfal_python=GFAL_PYTHON,
                                  helper=HELPER))
    path.chmod(0o755)
    return path
