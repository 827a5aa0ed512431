"""The document :mod:`nodetune.check.node_nvml` printed on a node, read into the values
``nvidia-smi -q -x`` gives (:class:`~nodetune.check.nvidia_smi.SmiLog`, each GPU's fabric
state and retired pages), every value checked for type and size: it comes from the node."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.nvidia_smi import Gpu, SmiLog
from nodetune.check.retired_pages import Retired

_TEXT = re.compile(r"^[\x20-\x7e]{0,120}\Z")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\Z")
# the clock event reasons node_nvml.REASONS names (a test holds the two equal)
REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                     "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
                     "sw_thermal_slowdown", "display_clocks_setting"})
_COUNTS = tuple(f"{memory}_{kind}_{counter}" for memory in ("sram", "dram")
                for kind in ("unc", "cor") for counter in ("volatile", "aggregate"))
_LIMIT = 1 << 63


def _text(doc: Mapping[str, Any], key: str, *, empty: str = "?") -> str:
    value = doc.get(key)
    if value is None:
        return empty
    if not isinstance(value, str) or not _TEXT.match(value):
        raise ValueError(f"{key}: not a plain text of at most 120 characters")
    return value


def _count(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _LIMIT:
        raise ValueError(f"{key}: not a count")
    return value


def _flag(doc: Mapping[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: not true or false")
    return value


def _gpu(index: int, g: Any) -> tuple[Gpu, tuple[int, str, str], Retired]:
    if not isinstance(g, dict):
        raise ValueError(f"GPU {index}: not an object")
    if g.get("index") != index:
        raise ValueError(f"GPU {index}: its index is {g.get('index')!r}")
    bus_id = _text(g, "bus_id")
    if bus_id != "?" and not _BUS_ID.match(bus_id):
        raise ValueError(f"GPU {index}: bus_id {bus_id!r} is not a PCI address")
    reasons = g.get("active_reasons") or []
    if not isinstance(reasons, list) or len(reasons) > len(REASONS) or not all(
            isinstance(r, str) and r in REASONS for r in reasons):
        raise ValueError(f"GPU {index}: active_reasons is not a list of NVML's reason names")
    counts = {key: _count(g, key) for key in _COUNTS}
    gpu = Gpu(index=index, bus_id=bus_id, product=_text(g, "product"),
              persistence=_text(g, "persistence"), ecc_mode=_text(g, "ecc_mode"),
              **counts, remap_pending=_flag(g, "remap_pending"),
              remap_failure=_flag(g, "remap_failure"),
              remapped_unc=_count(g, "remapped_unc"), pcie_gen=_count(g, "pcie_gen"),
              pcie_gen_max=_count(g, "pcie_gen_max"), pcie_width=_count(g, "pcie_width"),
              pcie_width_max=_count(g, "pcie_width_max"), pstate=_text(g, "pstate"),
              active_reasons=tuple(reasons), vbios=_text(g, "vbios", empty=""))
    fabric = (index, _text(g, "fabric_state", empty="N/A"),
              _text(g, "fabric_status", empty="N/A"))
    retired = Retired(index, gpu.product, _count(g, "retired_sbe"), _count(g, "retired_dbe"),
                      _flag(g, "retired_pending"))
    return gpu, fabric, retired


def parse(stdout: str) -> tuple[SmiLog, list[tuple[int, str, str]], list[Retired]]:
    """(the GPUs as nvidia_smi.SmiLog, (index, fabric state, status) per GPU, retired pages
    per GPU) from node_nvml.py's output.

    Raises:
        ValueError: not node_nvml.py's document, or a value of the wrong type or size.
    """
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise ValueError("the NVML read's output is not JSON") from None
    if not isinstance(doc, dict) or doc.get("nvml") != 1:
        raise ValueError("the NVML read's output is not its document")
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or len(gpus) > 64:
        raise ValueError("the NVML read's gpus is not a list of at most 64")
    try:
        read = [_gpu(i, g) for i, g in enumerate(gpus)]
    except ValueError as exc:
        raise ValueError(f"the NVML read: {exc}") from None
    smi = SmiLog(driver_version=_text(doc, "driver_version"),
                 cuda_version=_text(doc, "cuda_version"), gpus=tuple(r[0] for r in read))
    return smi, [r[1] for r in read], [r[2] for r in read]


def failure(stdout: str) -> str:
    """Why the NVML read failed, in its own words (its ``error``), for a report."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    why = doc.get("error") if isinstance(doc, dict) else None
    return f"the NVML read failed: {why[:300] if isinstance(why, str) else 'no answer'}"
