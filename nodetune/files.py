"""Atomic file writes for report files other programs read while nodetune writes them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` by a temp file in the same directory and a rename.

    A reader (node_exporter, a CI job) sees the old file or the new one, never half.
    The temp name starts with a dot and ends in ``.tmp`` so that node_exporter's
    textfile collector (which reads ``*.prom``) never picks it up.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_yaml(path: Path) -> Any:
    """A YAML file's data, through libyaml's safe loader where PyYAML has it (the roles'
    specs and defaults are read on every run: the pure-Python loader took 0.26 s of a
    validate's start)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - safe
