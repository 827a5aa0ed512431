"""Report files a verb writes on request (``--junit``, ``--prom-textfile``), checked first."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodetune.errors import InputError
from nodetune.reports import junit, prom


def check_writable(path: Path | None, option: str) -> None:
    """Refuse, before anything runs, an output path that cannot be written.

    Raises:
        InputError: the path is a directory, or its folder is missing or not writable.
    """
    if path is None:
        return
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: folder {parent} is not writable")


def write_outputs(doc: Mapping[str, Any], *, junit_path: Path | None = None,
                  prom_path: Path | None = None) -> list[Path]:
    """Write the JUnit XML and Prometheus textfile for ``doc`` where asked; return the paths."""
    written = []
    if junit_path is not None:
        written.append(junit.write(junit_path, doc))
    if prom_path is not None:
        written.append(prom.write(prom_path, doc))
    return written
