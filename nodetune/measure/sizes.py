"""Message sizes as nccl-tests takes them: ``64M``, ``MIN:MAX[:FACTOR]`` or ``A,B,C``."""

from __future__ import annotations

import re

from nodetune.errors import InputError

SIZE_FACTOR = 4
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'64M' -> 67108864 (binary units, as nccl-tests' -b/-e).

    Raises:
        InputError: not a size.
    """
    m = _SIZE.match(text)
    if not m or int(m[1]) <= 0:
        raise InputError(f"size {text!r}: expected a positive number with an optional K, M or "
                         "G suffix (binary: 1M = 1048576 bytes)")
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_sizes(spec: str) -> tuple[int, ...]:
    """Sizes from ``MIN:MAX[:FACTOR]`` (x4 by default, like ``-b MIN -e MAX -f 4``) or ``A,B,C``.

    Sizes are rounded down to whole float32 elements.

    Raises:
        InputError: malformed, MIN > MAX, a factor < 2, or more than 40 sizes.
    """
    spec = spec.strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"--sizes {spec!r}: expected MIN:MAX or MIN:MAX:FACTOR, e.g. 1M:1G")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = int(parts[2]) if len(parts) == 3 else SIZE_FACTOR
        except ValueError:
            raise InputError(
                f"--sizes {spec!r}: factor {parts[2]!r} is not a whole number") from None
        if factor < 2:
            raise InputError(f"--sizes {spec!r}: factor must be >= 2")
        if low > high:
            raise InputError(f"--sizes {spec!r}: MIN is larger than MAX")
        sizes = []
        size = low
        while size <= high:
            sizes.append(size)
            size *= factor
    else:
        sizes = [parse_size(p) for p in spec.split(",") if p.strip()]
        if not sizes:
            raise InputError("--sizes is empty")
    if len(sizes) > 40:
        raise InputError(f"--sizes {spec!r} gives {len(sizes)} sizes; at most 40")
    rounded = sorted({max(4, s - s % 4) for s in sizes})
    return tuple(rounded)
