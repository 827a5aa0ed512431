"""The /dev/shm mark a node's NCCL needs (``nodetune_min_shm``), read by `check`'s
software.shm and by ``validate --image``'s container checklist."""

from __future__ import annotations

import re

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError

SHM = "/dev/shm"  # noqa: S108 - the mount checked, not a file created
VAR_MIN_SHM = "nodetune_min_shm"
# NCCL's troubleshooting guide: containers need `--shm-size=1g` (Docker's default is 64 MB).
DEFAULT_MIN_SHM = 1 << 30
SHM_SOURCE = f"{VAR_MIN_SHM} unset: NCCL troubleshooting guide (Docker: --shm-size=1g)"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: object, *, name: str, host: str) -> int:
    """``64M``/``1G``/``1073741824`` -> bytes (binary units).

    Raises:
        InputError: not a size.
    """
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{name} {text!r}: expected a size such as 1G, 512M or a byte count",
                         host=host)
    return int(float(m[1]) * _UNITS[m[2].upper()])


def min_shm(host: Host) -> tuple[int, str]:
    """The host's /dev/shm mark in bytes and where it comes from: ``nodetune_min_shm`` where
    the inventory sets it, else NCCL's own advice (:data:`SHM_SOURCE`).

    Raises:
        InputError: the variable is not a size (names host and variable).
    """
    raw = host.vars.get(VAR_MIN_SHM)
    if raw in (None, ""):
        return DEFAULT_MIN_SHM, SHM_SOURCE
    return parse_bytes(raw, name=VAR_MIN_SHM, host=host.name), VAR_MIN_SHM


def human(n: int) -> str:
    """Bytes in binary units: ``64.0 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
