"""The GPUs as the probe read them: through NVML (:mod:`nodetune.check.node_nvml`) or, where
NVML could not be loaded, failed or found no GPU, ``nvidia-smi -q -x``; one value for every
check that judges them, which names the read it came from, with the NVLinks' states as
``nvidia-smi nvlink -s -e`` gave them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodetune.check import nvidia_smi, nvml, retired_pages
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.retired_pages import Retired

NVML = "NVML (libnvidia-ml.so.1)"
SMI_XML = "nvidia-smi -q -x"
NO_LIBRARY = 3  # node_nvml.NO_LIBRARY: the library is not on the node
LIMIT = 300     # characters of a node's own words kept
# {GPU index: {link: "26.562 GB/s" | "<inactive>"}}; a string: why nvidia-smi nvlink could
# not be assessed (it hung or crashed); None: it gave no answer
Links = dict[int, dict[int, str]] | str | None


@dataclass(frozen=True, slots=True)
class GpuRead:
    """What the probe's ``nvidia`` section says of the GPUs."""

    smi: SmiLog | None          # None: no GPU data (``error`` or ``unknown`` says why)
    error: str | None           # the read failed or its output did not parse
    pci: int                    # NVIDIA GPUs on the PCI bus
    source: str                 # what was read: NVML, or SMI_XML (and why not NVML)
    unknown: str | None = None  # the read hung, was killed or could not start
    fabric: tuple[tuple[int, str, str], ...] = ()          # (GPU index, state, status)
    retired: tuple[Retired, ...] | None = field(default=None)  # None: nothing to read
    nvlink: Links = None        # the NVLinks' states (:func:`nvlink_states`), with ``smi``


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _words(value: Any) -> str:
    """A node's own words, short and printable, for a report."""
    return "".join(c if c.isprintable() else "?" for c in str(value)[:LIMIT])


def nvlink_states(nvidia: Mapping[str, Any]) -> Links:
    """The NVLinks' states from the probe's ``nvidia`` section (its ``nvlink``: ``nvidia-smi
    nvlink -s -e``, parsed by :func:`nvidia_smi.parse_nvlink`)."""
    nvlink = nvidia.get("nvlink") or {}
    return (str(nvlink["unknown"]) if nvlink.get("unknown") else
            nvidia_smi.parse_nvlink(str(nvlink.get("stdout", ""))) if nvlink.get("rc") == 0
            else None)


def read(nvidia: Mapping[str, Any]) -> GpuRead:
    """The probe's ``nvidia`` section: NVML's document where it answered with GPUs, else
    ``nvidia-smi -q -x``'s log (the node's values are checked for type and size)."""
    count = nvidia.get("pci_gpus")
    pci = count if isinstance(count, int) and not isinstance(count, bool) and \
        0 <= count <= 1024 else 0
    got = _dict(nvidia.get("nvml"))
    query = nvidia.get("query")
    if query is None:  # the probe asked nvidia-smi nothing: NVML answered, or hung
        if got.get("unknown"):
            return GpuRead(None, None, pci, NVML, unknown=_words(got["unknown"]))
        if got.get("rc") == 0:
            try:
                log, fabric, retired = nvml.parse(str(got.get("stdout", "")))
            except ValueError as exc:
                return GpuRead(None, _words(exc), pci, NVML)
            if not log.gpus:  # and no nvidia-smi to ask
                return GpuRead(None, "the NVML read found no GPU", pci, NVML)
            return GpuRead(log, None, pci, NVML, fabric=tuple(fabric),
                           retired=tuple(retired), nvlink=nvlink_states(nvidia))
    elif not isinstance(query, dict):
        return GpuRead(None, "the probe's nvidia-smi -q -x answer is not its shape", pci,
                       SMI_XML)
    elif query.get("unknown"):
        return GpuRead(None, None, pci, SMI_XML, unknown=_words(query["unknown"]))
    why_not = (None if got.get("rc") in (None, 0, NO_LIBRARY) and not got.get("unknown") else
               _words(got["unknown"]) if got.get("unknown") else
               nvml.failure(str(got.get("stdout", ""))))
    smi, error, _ = nvidia_smi.from_probe({**nvidia, "pci_gpus": pci})
    if smi is None and error is None and why_not:  # and no nvidia-smi to ask
        error = why_not
    xml = str(_dict(query).get("stdout", ""))
    pages = retired_pages.parse(xml) if smi is not None else None
    return GpuRead(smi, error, pci, SMI_XML + (f" (NVML: {why_not})" if why_not else ""),
                   fabric=tuple(nvidia_smi.fabric_states(xml)),
                   retired=tuple(pages) if pages is not None else None,
                   nvlink=nvlink_states(nvidia) if smi is not None else None)
