"""``gpu.retired_pages``: dynamic page retirement on the GPUs that retire pages.

Read from what the probe already reads of the GPUs (:mod:`nodetune.check.gpu_read`): NVML's
``nvmlDeviceGetRetiredPages`` count per cause and ``nvmlDeviceGetRetiredPagesPendingStatus``,
or, where NVML is not there, ``nvidia-smi -q -x``'s per GPU
``retired_pages/multiple_single_bit_retirement/retired_count``,
``double_bit_retirement/retired_count`` and ``pending_retirement`` (``pending_blacklist`` on
older drivers). A GPU that remaps rows instead reports them ``N/A``, as every H100 and H200
does (tests/fixtures/check/h200-x4, h100-x1): NVIDIA's GPU memory error management guide
lists row remapping for GA100, GA10x, AD10x, GH100 and GB10x
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/supported-gpus.html, read
2026-11-29), and ``gpu.ecc`` judges their remapped rows; those GPUs are left out here, and
a node where all are skips, saying so.

Limits: DCGM's memory health watch (github.com/NVIDIA/DCGM modules/health/
DcgmHealthWatch.cpp ``MonitorMemRetiredPending``, ``MonitorMemSbeDbeRetiredPages``;
dcgmlib/src/DcgmGpuHardwareLimits.h, read 2026-11-29): single- and double-bit retired
pages together at or above ``DCGM_LIMIT_MAX_RETIRED_PAGES`` (63) fail; a pending retirement
warns (``DCGM_FR_PENDING_PAGE_RETIREMENTS``: it takes effect at the GPU's next reset);
more than ``DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT`` (15) double-bit retired pages warn
(DCGM fails them only when more than one more came within a week, a history one snapshot
does not have).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned

NAME = "gpu.retired_pages"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.retired_pages",
     "SBE+DBE retired pages < 63, none pending, DBE <= 15 (DCGM's limits);",
     "GPUs that remap rows instead (A100, H100, H200): skip"),
)
MAX_RETIRED = 63
DBE_SOFT_LIMIT = 15
SOURCE = ("nvidia-smi -q -x retired_pages; DCGM memory health limits (NVIDIA/DCGM "
          "DcgmHealthWatch.cpp, DcgmGpuHardwareLimits.h, read 2026-11-29)")
ROW_REMAP = ("NVIDIA GPU memory error management guide: row remapping on GA100, GA10x, "
             "AD10x, GH100, GB10x (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "
             "read 2026-11-29)")


@dataclass(frozen=True, slots=True)
class Retired:
    """One GPU's retired pages (None: N/A, the GPU does not retire pages)."""

    index: int
    product: str
    sbe: int | None
    dbe: int | None
    pending: bool


def _count(g: ET.Element, path: str) -> int | None:
    text = (g.findtext(path) or "").strip()
    return int(text) if re.fullmatch(r"\d{1,9}", text) else None


def parse(xml: str) -> list[Retired] | None:
    """Each GPU's retired pages from ``nvidia-smi -q -x`` (None: not its XML)."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 - nvidia-smi's XML, see nvidia_smi.parse_smi_xml
    except ET.ParseError:
        return None
    out = []
    for i, g in enumerate(root.findall("gpu")):
        pending = (g.findtext("retired_pages/pending_retirement")
                   or g.findtext("retired_pages/pending_blacklist") or "").strip()
        out.append(Retired(i, (g.findtext("product_name") or "?").strip(),
                           _count(g, "retired_pages/multiple_single_bit_retirement/"
                                     "retired_count"),
                           _count(g, "retired_pages/double_bit_retirement/retired_count"),
                           pending == "Yes"))
    return out


def judge(gpus: Sequence[Retired] | None, read: str = "nvidia-smi -q -x") -> CheckResult:
    """Fail at DCGM's retired-page limit, warn on a pending retirement or many DBE pages;
    ``gpus`` as ``read`` (NVML, or ``nvidia-smi -q -x``) reported them."""
    source = SOURCE.replace("nvidia-smi -q -x", read, 1)
    if not gpus:
        return skipped(NAME, f"no GPU in {read}", source=source)
    judged = [g for g in gpus if g.sbe is not None or g.dbe is not None or g.pending]
    if not judged:
        models = ", ".join(sorted({g.product for g in gpus}))
        return skipped(NAME, f"the GPUs ({models}) report no retired pages (N/A): they remap "
                       "rows instead of retiring pages, judged by gpu.ecc", source=ROW_REMAP)
    fails, warns = [], []
    for g in judged:
        total = (g.sbe or 0) + (g.dbe or 0)
        if total >= MAX_RETIRED:
            fails.append(f"GPU {g.index}: {total} retired pages >= {MAX_RETIRED}")
        if g.pending:
            warns.append(f"GPU {g.index}: a page retirement is pending (reset the GPU)")
        if (g.dbe or 0) > DBE_SOFT_LIMIT:
            warns.append(f"GPU {g.index}: {g.dbe} double-bit retired pages > "
                         f"{DBE_SOFT_LIMIT}")
    measured = "; ".join(f"GPU {g.index}: SBE {g.sbe if g.sbe is not None else 'N/A'}, "
                         f"DBE {g.dbe if g.dbe is not None else 'N/A'}"
                         f"{', pending' if g.pending else ''}" for g in judged)
    expected = (f"retired pages < {MAX_RETIRED}, none pending, DBE retired <= "
                f"{DBE_SOFT_LIMIT}")
    if fails:
        return failed(NAME, measured, expected, source, "; ".join(fails + warns))
    if warns:
        return warned(NAME, measured, expected, source, "; ".join(warns))
    return passed(NAME, measured, expected, source)
