"""nvidia-smi's once-a-second samples of ``check --sample`` (:mod:`nodetune.check.node_sample`)
read into one series per GPU.

The lines are ``nvidia-smi --query-gpu=index,pci.bus_id,clocks_event_reasons.active,
power.draw,pcie.link.gen.current,pcie.link.width.current,utilization.gpu
--format=csv,noheader,nounits -lms 1000``'s: the values in that order, ``", "`` between
them; ``pci.bus_id`` as "domain:bus:device.function, in hex" (``00000000:9B:00.0``), the
reasons a bitmask in hex (``0x0000000000000001``), ``[N/A]`` or ``[Not Supported]`` where a
GPU has no value (``nvidia-smi --help-query-gpu``, read 2026-11-30).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BUS = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")
_HEX = re.compile(r"^0x[0-9A-Fa-f]{1,16}$")
NO_VALUE = ("[N/A]", "[Not Supported]")  # a field this GPU does not have: not an error
GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle: "Nothing is running on the GPU" (nvml.h)


@dataclass(frozen=True, slots=True)
class Point:
    """One nvidia-smi line of one GPU (None: the field was N/A or not a number)."""

    second: float
    reasons: int | None
    power: float | None
    gen: int | None
    width: int | None
    util: int | None

    @property
    def busy(self) -> bool:
        """A kernel ran in the sample period (utilization.gpu > 0); where utilization is
        not reported, the clock event reasons do not say GPU idle (0x1)."""
        if self.util is not None:
            return self.util > 0
        return self.reasons is not None and not self.reasons & GPU_IDLE


@dataclass(slots=True)
class Series:
    """One GPU's samples; ``errors``: what nvidia-smi said in place of a value other than
    "no value" (``[GPU is lost]``, ``[Unknown Error]``), one entry a sample that had one."""

    index: int
    pci: str  # 0000:9b:00.0, as sysfs names the function
    points: list[Point] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _num(text: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text)
    except ValueError:
        return None


def parse_smi(smi: Mapping[str, Any]) -> dict[int, Series]:
    """nvidia-smi's CSV lines (``--format=csv,noheader,nounits``, fields in
    :data:`node_sample.FIELDS` order) by GPU index; lines of another shape are left out."""
    fields = smi.get("fields")
    lines = smi.get("lines")
    out: dict[int, Series] = {}
    if not isinstance(fields, list) or not isinstance(lines, list):
        return out
    for item in lines:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int | float)):
            continue
        parts = [p.strip() for p in str(item[1]).split(",")]
        if len(parts) != len(fields) or not parts[0].isdigit() or not (
                bus := BUS.match(parts[1])):
            continue
        pci = f"{bus[1][-4:]}:{bus[2]}:{bus[3]}.{bus[4]}".lower()
        series = out.setdefault(int(parts[0]), Series(int(parts[0]), pci))
        said = [p for p in parts[2:] if p.startswith("[") and p not in NO_VALUE]
        if said:
            series.errors.append("".join(c if c.isprintable() else "?" for c in said[0][:80]))
        series.points.append(Point(
            float(item[0]), int(parts[2], 16) if _HEX.match(parts[2]) else None,
            _num(parts[3], float), _num(parts[4], int), _num(parts[5], int),
            _num(parts[6], int)))
    return out


