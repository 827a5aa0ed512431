"""What ``nvidia-smi -q -x`` and ``nvidia-smi nvlink -s`` report, parsed into values: each
GPU's ECC counters, row remapping, PCIe link, clock event reasons and VBIOS, and each
NVLink's state. :mod:`~nodetune.check.gpu` judges them; the fleet's versions, the health
reading and the all_reduce read them too."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Gpu:
    """What one GPU reported."""

    index: int
    bus_id: str
    product: str
    persistence: str
    ecc_mode: str
    sram_unc_volatile: int | None
    sram_unc_aggregate: int | None
    sram_cor_volatile: int | None
    sram_cor_aggregate: int | None
    dram_unc_volatile: int | None
    dram_unc_aggregate: int | None
    dram_cor_volatile: int | None
    dram_cor_aggregate: int | None
    remap_pending: bool
    remap_failure: bool
    remapped_unc: int | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    pstate: str
    active_reasons: tuple[str, ...] = ()
    vbios: str = ""  # <vbios_version>; the fleet compares it (check/versions.py)

    @property
    def label(self) -> str:
        """``GPU 2 (00000000:00:08.0)``."""
        return f"GPU {self.index} ({self.bus_id})"


@dataclass(frozen=True, slots=True)
class SmiLog:
    """The whole ``nvidia-smi -q -x`` document."""

    driver_version: str
    cuda_version: str
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"^\s*(\d+)", text)
    return int(m[1]) if m else None


def _text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    return found.text.strip() if found is not None and found.text is not None else None


def _sum(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _reasons(gpu: ET.Element) -> tuple[str, ...]:
    # Drivers >= 535 say clocks_event_reasons; older ones clocks_throttle_reasons.
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return ()
    active = []
    for child in block:
        if (child.text or "").strip() == "Active":
            active.append(re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag))
    return tuple(active)


def parse_smi_xml(text: str) -> SmiLog:
    """Parse ``nvidia-smi -q -x``.

    The XML comes from the node; ElementTree does not fetch the external DTD the
    document names, and Python's expat refuses entity expansion bombs.

    Raises:
        ValueError: not an nvidia-smi XML log.
    """
    try:
        root = ET.fromstring(text)  # noqa: S314 - see docstring
    except ET.ParseError as exc:
        raise ValueError(f"nvidia-smi -q -x output is not XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"unexpected XML root <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for index, g in enumerate(root.findall("gpu")):
        vol, agg = "ecc_errors/volatile/", "ecc_errors/aggregate/"
        gpus.append(Gpu(
            index=index,
            bus_id=g.get("id") or _text(g, "pci/pci_bus_id") or "?",
            product=_text(g, "product_name") or "?",
            persistence=_text(g, "persistence_mode") or "?",
            ecc_mode=_text(g, "ecc_mode/current_ecc") or "?",
            sram_unc_volatile=_sum(_int(_text(g, vol + "sram_uncorrectable_parity")),
                                   _int(_text(g, vol + "sram_uncorrectable_secded")),
                                   _int(_text(g, vol + "sram_uncorrectable"))),
            sram_unc_aggregate=_sum(_int(_text(g, agg + "sram_uncorrectable_parity")),
                                    _int(_text(g, agg + "sram_uncorrectable_secded")),
                                    _int(_text(g, agg + "sram_uncorrectable"))),
            sram_cor_volatile=_int(_text(g, vol + "sram_correctable")),
            sram_cor_aggregate=_int(_text(g, agg + "sram_correctable")),
            dram_unc_volatile=_int(_text(g, vol + "dram_uncorrectable")),
            dram_unc_aggregate=_int(_text(g, agg + "dram_uncorrectable")),
            dram_cor_volatile=_int(_text(g, vol + "dram_correctable")),
            dram_cor_aggregate=_int(_text(g, agg + "dram_correctable")),
            remap_pending=_text(g, "remapped_rows/remapped_row_pending") == "Yes",
            remap_failure=_text(g, "remapped_rows/remapped_row_failure") == "Yes",
            remapped_unc=_int(_text(g, "remapped_rows/remapped_row_unc")),
            pcie_gen=_int(_text(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
            pcie_gen_max=_int(_text(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
            pcie_width=_int(_text(g, "pci/pci_gpu_link_info/link_widths/current_link_width")),
            pcie_width_max=_int(_text(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
            pstate=_text(g, "performance_state") or "?",
            active_reasons=_reasons(g),
            vbios=_text(g, "vbios_version") or "",
        ))
    return SmiLog(driver_version=_text(root, "driver_version") or "?",
                  cuda_version=_text(root, "cuda_version") or "?", gpus=tuple(gpus))


def from_probe(nvidia: Mapping[str, Any]) -> tuple[SmiLog | None, str | None, int]:
    """(the parsed nvidia-smi log, why there is none, NVIDIA GPUs on the PCI bus) from the
    probe's ``nvidia`` section."""
    query = nvidia.get("query") or {}
    pci = int(nvidia.get("pci_gpus") or 0)
    if not (nvidia.get("tool") and query):
        return None, None, pci
    if query.get("rc") != 0:
        lines = str(query.get("stdout") or query.get("stderr") or "").strip().splitlines()
        return None, f"nvidia-smi -q -x failed (exit {query.get('rc')}): " + (
            lines[0] if lines else "no output"), pci
    try:
        return parse_smi_xml(str(query.get("stdout", ""))), None, pci
    except ValueError as exc:
        return None, str(exc), pci


_NVLINK_GPU = re.compile(r"^GPU (\d+):")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+):\s*(.+?)\s*$")


def parse_nvlink(text: str) -> dict[int, dict[int, str]]:
    """``nvidia-smi nvlink -s`` (or ``-s -e``) -> {gpu index: {link: "26.562 GB/s" |
    "<inactive>"}}."""
    out: dict[int, dict[int, str]] = {}
    current: int | None = None
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            current = int(m[1])
            out[current] = {}
        elif (m := _NVLINK_LINK.match(line)) and current is not None:
            # `nvlink -s -e`: the state lines come first, and a link's later lines (its
            # error counters, or any other shape) are not its state
            out[current].setdefault(int(m[1]), m[2])
    return out


def fabric_states(xml: str) -> list[tuple[int, str, str]]:
    """(GPU index, state, status) per GPU of ``nvidia-smi -q -x``; [] if unreadable."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 - nvidia-smi's XML, see parse_smi_xml
    except ET.ParseError:
        return []
    out = []
    for i, g in enumerate(root.findall("gpu")):
        state = (g.findtext("fabric/state") or "N/A").strip()
        status = (g.findtext("fabric/status") or "N/A").strip()
        out.append((i, state, status))
    return out
