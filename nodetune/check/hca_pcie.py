"""``fabric.pcie[D]``: an RDMA device's PCIe link trained at its maximum width and speed.

Read on the node from ``/sys/class/infiniband/D/device/`` (the device's PCI function):
``current_link_width``/``max_link_width`` (lanes, a number) and
``current_link_speed``/``max_link_speed`` (``32.0 GT/s PCIe`` since Linux 5.7's
``pci_speed_string()``, ``8 GT/s`` before it, ``Unknown`` where the link reports none), as
drivers/pci/pci-sysfs.c prints them (the PCIe Bandwidth Controller's Kconfig help names
``/sys/bus/pci/devices/.../current_link_speed`` as where the current speed is read;
read 2026-11-29). A virtual function (``physfn`` present, Documentation/ABI/testing/
sysfs-bus-pci) shares its physical function's link and is skipped.

A narrower link fails: its bandwidth is cut for good until it retrains (reseat, a bad
riser or slot). A lower speed warns, since a device may train its link down while idle
(ASPM/power saving) and back up under load; ``nodetune_hca_pcie_speed_fails: true`` makes it
fail, for HCAs known to hold their speed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "fabric.pcie"
HELP: HelpLines = ()  # no line in check's --help yet
SOURCE = ("sysfs current_link_*/max_link_* of the HCA's PCI function (drivers/pci/pci-sysfs.c, "
          "read 2026-11-29)")
SPEED_VAR = "nodetune_hca_pcie_speed_fails"
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) ?GT/s")


def speed(text: object) -> float | None:
    """``32.0 GT/s PCIe`` or ``8 GT/s`` as GT/s; None for ``Unknown`` or nothing."""
    m = _SPEED.match(str(text or "").strip())
    return float(m.group(1)) if m else None


def width(text: object) -> int | None:
    value = str(text or "").strip()
    return int(value) if re.fullmatch(r"[0-9]{1,3}", value) else None


def _gts(value: float) -> str:
    return f"{value:g} GT/s"


def judge_one(hca: Mapping[str, Any], *, speed_fails: bool) -> CheckResult:
    """One RDMA device's link against its maximum."""
    dev = str(hca.get("device"))
    name = f"{NAME}[{dev}]"
    raw = hca.get("link")
    link: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if hca.get("vf"):
        return skipped(name, f"{dev} is a virtual function: its link is its physical "
                       "function's", source=SOURCE)
    cur_w, max_w = width(link.get("current_link_width")), width(link.get("max_link_width"))
    cur_s, max_s = speed(link.get("current_link_speed")), speed(link.get("max_link_speed"))
    if max_w is None or max_s is None:
        return skipped(name, f"{dev}'s PCI function ({hca.get('pci') or 'unknown'}) reports "
                       "no maximum link width/speed (not PCIe, or a virtual machine's "
                       "emulated bus)", source=SOURCE)
    measured = (f"x{cur_w if cur_w is not None else '?'} "
                f"{_gts(cur_s) if cur_s is not None else link.get('current_link_speed')}")
    expected = f"x{max_w} {_gts(max_s)}"
    where = f"{dev} ({hca.get('pci')})"
    if cur_w is None:
        return warned(name, measured, expected, SOURCE,
                      f"{where}: its current link width could not be read "
                      f"({link.get('current_link_width')!r}): not assessed")
    if cur_w < max_w:
        return failed(name, measured, expected, SOURCE,
                      f"{where}: link trained at x{cur_w}, below its x{max_w} (a narrower "
                      "link cuts its bandwidth until it retrains: reseat the card, check "
                      "the slot or riser)")
    if cur_s is None or cur_s < max_s:
        why = (f"{where}: link at {measured.split(' ', 1)[1]}, below its {_gts(max_s)}")
        if speed_fails:
            return failed(name, measured, expected, SOURCE, f"{why} ({SPEED_VAR} is true)")
        return warned(name, measured, expected, SOURCE,
                      f"{why}; links may train down while idle (power saving) and back up "
                      f"under load: check again under load ({SPEED_VAR}: true fails it)")
    return passed(name, measured, expected, SOURCE)


def judge(pcie: Mapping[str, Any] | None, root: str, *, speed_fails: bool) -> list[CheckResult]:
    """One result per RDMA device; a skip where there is none."""
    hcas = (pcie or {}).get("hcas")
    found = [h for h in hcas if isinstance(h, dict)] if isinstance(hcas, list) else []
    if not found:
        return [skipped(NAME, f"no RDMA device with a PCI function ({root}/DEV/device: none)",
                        source=SOURCE)]
    return [judge_one(h, speed_fails=speed_fails) for h in found]


def judge_signal(read: SignalRead) -> Judged:
    """fabric.pcie from the reader's PCI answer."""
    return Judged(tuple(judge(read.pcie, read.inp.rdma_sysfs,
                              speed_fails=read.inp.hca_speed_fails)))
