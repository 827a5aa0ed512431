"""Atomic file writes for report files other programs read while nodetune writes them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
