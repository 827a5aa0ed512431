"""The GPUs as the probe read them: through NVML (:mod:`nodetune.check.node_nvml`) or, where
NVML could not be loaded or failed, ``nvidia-smi -q -x``; one value for every check that
judges them, which names the read it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodetune.check import gpu_fabric, nvidia_smi, nvml, retired_pages
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.retired_pages import Retired

NVML = "NVML (libnvidia-ml.so.1)"
NO_LIBRARY = 3  # node_nvml.NO_LIBRARY: the library is not on the node
SMI_XML = "nvidia-smi -q -x"


@dataclass(frozen=True, slots=True)
class GpuRead:
    """What the probe's ``nvidia`` section says of the GPUs."""

    smi: SmiLog | None          # None: no GPU data (``error`` or ``unknown`` says why)
    error: str | None           # the read failed or its output did not parse
    pci: int                    # NVIDIA GPUs on the PCI bus
    source: str                 # NVML or SMI_XML: what was read
    unknown: str | None = None  # the read hung, was killed or could not start
    fabric: tuple[tuple[int, str, str], ...] = ()          # (GPU index, state, status)
    retired: tuple[Retired, ...] | None = field(default=None)  # None: nothing to read


def read(nvidia: Mapping[str, Any]) -> GpuRead:
    """The probe's ``nvidia`` section read once: NVML's document where it answered, else
    ``nvidia-smi -q -x``'s log."""
    pci = int(nvidia.get("pci_gpus") or 0)
    got = nvidia.get("nvml") or {}
    query = nvidia.get("query")
    if query is None:  # the probe asked nvidia-smi nothing: NVML answered, or hung
        if got.get("unknown"):
            return GpuRead(None, None, pci, NVML, unknown=str(got["unknown"]))
        if got.get("rc") == 0:
            try:
                log, fabric, retired = nvml.parse(str(got.get("stdout", "")))
            except ValueError as exc:
                return GpuRead(None, str(exc), pci, NVML)
            return GpuRead(log, None, pci, NVML, fabric=tuple(fabric),
                           retired=tuple(retired))
    elif query.get("unknown"):
        return GpuRead(None, None, pci, SMI_XML, unknown=str(query["unknown"]))
    smi, error, pci = nvidia_smi.from_probe(nvidia)
    if smi is None and error is None and got.get("rc") not in (None, NO_LIBRARY):
        # and no nvidia-smi to ask
        error = (f"the NVML read: {got['unknown']}" if got.get("unknown") else
                 nvml.failure(str(got.get("stdout", ""))))
    xml = str((query or {}).get("stdout", ""))
    pages = retired_pages.parse(xml) if smi is not None else None
    return GpuRead(smi, error, pci, SMI_XML, fabric=tuple(gpu_fabric.fabric_states(xml)),
                   retired=tuple(pages) if pages is not None else None)
