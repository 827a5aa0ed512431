"""The links' checks of ``check --sample`` (:mod:`nodetune.check.sample`), over its window:

- ``pcie.flap[DEV]``: a PCIe link that changed speed or width during the window. A GPU's
  link is read from nvidia-smi each second with whether the GPU was busy (a kernel ran:
  ``utilization.gpu`` > 0). nvidia-smi says its link generation and width "may be reduced
  when the GPU is not in use" (``--help-query-gpu``, read 2026-11-30), so only a change
  between two busy samples counts: a width change or two speed changes while busy fail (the
  link retrains under load: a riser, slot or card), one speed change warns. An RDMA device's
  link (and a GPU's where nvidia-smi gave no sample) is read from sysfs
  (``current_link_speed``/``current_link_width``, drivers/pci/pci-sysfs.c), with no busy
  signal: a change warns, as fabric.pcie treats a lower speed, and fails for HCAs where
  ``nodetune_hca_pcie_speed_fails`` is true.
- ``fabric.rdma_window[D/P]``: an RDMA port whose ``state`` changed during the window fails
  (it went down or came up while sampled: a flap); a rise of ``link_downed`` or
  ``link_error_recovery`` fails and of another error counter warns, as fabric.rdma_errors
  judges them between checks (infiniband-diags ibcheckerrs); each rise as a rate per second.
- ``node.pcie_aer_window``: node.pcie_aer's judgement (:mod:`nodetune.check.pcie_aer`) of the
  AER counters at the window's end against its start.
- ``gpu.nvlink_window[N]``: gpu.nvlink_errors' judgement (:mod:`nodetune.check.nvlink_errors`,
  DCGM's limits) of ``nvidia-smi nvlink -e`` at the window's end against its start: a rate.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.check import hca_pcie, nvlink_errors, pcie_aer, rdma_errors
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, unknown, warned
from nodetune.check.sample_smi import Series
from nodetune.measure.node_inputs import HealthInputs

FLAP, RDMA, AER, NVLINK = ("pcie.flap", "fabric.rdma_window", "node.pcie_aer_window",
                           "gpu.nvlink_window")
NAMES = (FLAP, RDMA, AER, NVLINK)
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("pcie.flap[DEV]",
     "no PCIe link speed/width change while the GPU is busy (sysfs links of HCAs",
     "have no busy signal: a change warns)"),
    ("fabric.rdma_window[D/P]",
     "no port state change, no link_downed/link_error_recovery rise"),
    # (the name's second space is --help's own: two spaces after this pair of names)
    ("node.pcie_aer_window, gpu.nvlink_window[N] ",
     "node.pcie_aer's and gpu.nvlink_errors' limits",
     "over the window"),
)
FLAP_SOURCE = ("nvidia-smi pcie.link.gen/width.current + utilization.gpu each second; sysfs "
               "current_link_speed/width (drivers/pci/pci-sysfs.c), read 2026-11-30")
RDMA_SOURCE = "sysfs-class-infiniband ports/N/state and counters each second; " + (
    rdma_errors.SOURCE)
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
SHOWN = 4  # changes named in a message


def _points(doc: Mapping[str, Any], key: str) -> list[tuple[float, Any]]:
    """One series of the sampler (``[[second, value], ...]``), checked for shape."""
    raw = doc.get("series")
    got = raw.get(key) if isinstance(raw, dict) else None
    return [(float(p[0]), p[1]) for p in got or [] if isinstance(p, list) and len(p) == 2
            and isinstance(p[0], int | float)] if isinstance(got, list) else []


def _functions(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    raw = doc.get("functions")
    return {a: f for a, f in raw.items() if _PCI.match(str(a)) and isinstance(f, dict)
            and (f.get("device") is None or _NAME.match(str(f.get("device"))))} \
        if isinstance(raw, dict) else {}


def _changes(points: Sequence[tuple[float, Any]]) -> list[str]:
    return [f"{a[1]} -> {b[1]} at +{b[0]:.0f} s" for a, b in itertools.pairwise(points)]


def _listed(items: Sequence[str]) -> str:
    more = len(items) - SHOWN
    return "; ".join(items[:SHOWN]) + (f"; and {more} more" if more > 0 else "")


def judge_gpu_link(series: Series) -> CheckResult:
    """A GPU's link over nvidia-smi's samples."""
    name = f"{FLAP}[{series.pci}]"
    label = f"GPU {series.index} ({series.pci})"
    pts = [p for p in series.points if p.gen is not None and p.width is not None]
    if not pts:
        return skipped(name, f"{label}: nvidia-smi reports no PCIe link generation/width",
                       source=FLAP_SOURCE)
    busy_width, busy_speed, idle = [], [], []
    for a, b in itertools.pairwise(pts):
        if (a.gen, a.width) == (b.gen, b.width):
            continue
        what = f"gen {a.gen} x{a.width} -> gen {b.gen} x{b.width} at +{b.second:.0f} s"
        if not (a.busy and b.busy):
            idle.append(what)
        elif a.width != b.width:
            busy_width.append(what)
        else:
            busy_speed.append(what)
    expected = "no link speed/width change while the GPU is busy"
    busy = busy_width + busy_speed
    busy_n = sum(1 for p in pts if p.busy)
    measured = (f"while busy: {_listed(busy)}" if busy else "no change while busy" if idle
                else f"gen {pts[0].gen} x{pts[0].width} throughout") + (
        f"; {len(idle)} change(s) while idle" if idle else "") + f"; {len(pts)} samples, " + (
        f"busy in {busy_n}" if busy_n else "the GPU idle in every one")
    if busy_width or len(busy_speed) >= 2:
        return failed(name, measured, expected, FLAP_SOURCE, f"{label}: its PCIe link "
                      f"retrained while the GPU was busy: {_listed(busy)} (reseat the card, "
                      "check the riser or slot)")
    if busy_speed:
        return warned(name, measured, expected, FLAP_SOURCE, f"{label}: link speed changed "
                      f"once while busy: {busy_speed[0]}")
    return passed(name, measured, expected, FLAP_SOURCE,
                  "changes while idle are power saving" if idle else "")


def judge_sysfs_link(doc: Mapping[str, Any], addr: str, f: Mapping[str, Any],
                     inp: HealthInputs) -> CheckResult:
    """An RDMA device's link (or a GPU's nvidia-smi did not sample) over the sysfs reads."""
    hca = f.get("device")
    name = f"{FLAP}[{hca or addr}]"
    label = f"{hca} ({addr})" if hca else f"GPU {addr}"
    speed = _points(doc, f"pci/{addr}/current_link_speed")
    width = _points(doc, f"pci/{addr}/current_link_width")
    if not any(v is not None for _, v in speed + width):
        return skipped(name, f"{label} reports no current link speed/width (not PCIe, or a "
                       "virtual machine's emulated bus)", source=FLAP_SOURCE)
    changes = [f"speed {c}" for c in _changes(speed)] + [f"width {c}" for c in
                                                          _changes(width)]
    expected = "no link speed/width change during the window"
    if not changes:
        gts = hca_pcie.speed(speed[0][1]) if speed else None
        first = f"x{width[0][1]} {gts:g} GT/s" if gts is not None and width else "unchanged"
        return passed(name, f"{first} throughout", expected, FLAP_SOURCE)
    measured = _listed(changes)
    if hca and inp.hca_speed_fails:
        return failed(name, measured, expected, FLAP_SOURCE, f"{label}: its PCIe link changed "
                      f"during the window ({hca_pcie.SPEED_VAR} is true)")
    return warned(name, measured, expected, FLAP_SOURCE, f"{label}: its PCIe link changed "
                  "during the window; sysfs gives no busy signal (a link may train down "
                  "while idle): sample again under load")


def judge_flaps(doc: Mapping[str, Any], gpus: Mapping[int, Series],
                inp: HealthInputs) -> list[CheckResult]:
    sampled = {s.pci for s in gpus.values() if s.points}
    out = [judge_gpu_link(s) for _, s in sorted(gpus.items())]
    out += [judge_sysfs_link(doc, a, f, inp) for a, f in sorted(_functions(doc).items())
            if a not in sampled and not f.get("bridge")]
    return out or [skipped(FLAP, "no GPU or RDMA device on the PCI bus", source=FLAP_SOURCE)]


def _count(value: Any) -> int | None:
    text = str(value).strip()
    return int(text) if text.isdigit() else None


def judge_ports(doc: Mapping[str, Any], seconds: float, root: str) -> list[CheckResult]:
    """fabric.rdma_window for every RDMA port the sampler read."""
    raw = doc.get("series")
    keys = sorted({k.rsplit("/", 1)[0] for k in raw if isinstance(k, str) and k.startswith(
        "rdma/")}) if isinstance(raw, dict) else []
    out = []
    for key in keys:
        parts = key.split("/")
        if len(parts) != 3 or not _NAME.match(parts[1]) or not parts[2].isdigit():
            continue
        port = f"{parts[1]}/{parts[2]}"
        out.append(_judge_port(doc, key, port, seconds))
    return out or [skipped(RDMA, f"no RDMA port ({root} is empty)", source=RDMA_SOURCE)]


def _judge_port(doc: Mapping[str, Any], key: str, port: str, seconds: float) -> CheckResult:
    name = f"{RDMA}[{port}]"
    states = _points(doc, f"{key}/state")
    rises: dict[str, int] = {}
    counted = 0  # counters read (a series keeps a value only where it changed)
    for counter in rdma_errors.LIMITS:
        pts = [(s, c) for s, v in _points(doc, f"{key}/{counter}") if (c := _count(v))
               is not None]
        counted += bool(pts)
        # every step up between reads: a reset within the window (a lower value) does not
        # hide what came before it, and all of a value after a reset came in the window
        rise = sum(b - a if b >= a else b for (_, a), (_, b) in itertools.pairwise(pts))
        if rise:
            rises[counter] = rise
    flips = _changes(states)
    if not counted and not flips:
        return skipped(name, f"{port}: no error counter could be read in the window",
                       source=RDMA_SOURCE)
    per = max(seconds, 1.0)
    rates = [f"{k} +{d} ({d / per:.2g}/s)" for k, d in rises.items() if d]
    measured = (f"state {_listed(flips)}" if flips else
                f"state {states[0][1] if states else '?'} throughout") + (
        f"; {', '.join(rates)}" if rates else f"; no error counter rose in {seconds:.0f} s")
    expected = "state unchanged, no link_downed/link_error_recovery, no error counter rising"
    flaps = [r for r in rates if r.split(" ", 1)[0] in rdma_errors.FLAP]
    if flips or flaps:
        return failed(name, measured, expected, RDMA_SOURCE, f"{port}: the link "
                      + ("changed state during the window: " + _listed(flips) if flips else
                         "went down or retrained during the window: " + ", ".join(flaps)))
    if rates:
        return warned(name, measured, expected, RDMA_SOURCE,
                      f"{port}: error counters rose during the window: {', '.join(rates)}")
    return passed(name, measured, expected, RDMA_SOURCE)


def _aer_at(doc: Mapping[str, Any], fns: Mapping[str, Mapping[str, Any]],
            end: bool) -> dict[str, Any]:
    """The AER part of health's ``pcie`` answer, as the window's first or last read."""
    out = []
    for addr, f in sorted(fns.items()):
        aer = {}
        for kind, _total in pcie_aer.KINDS:
            pts = _points(doc, f"pci/{addr}/aer_{kind}")
            if pts:
                aer[kind] = pts[-1 if end else 0][1]
        out.append({"pci": addr, "roles": [str(f.get("role") or "")], "aer": aer})
    return {"functions": out}


def judge_aer(doc: Mapping[str, Any], inp: HealthInputs, what: str,
              start: float, end: float) -> CheckResult:
    fns = _functions(doc)
    first = pcie_aer.counters_of(_aer_at(doc, fns, end=False))
    got = pcie_aer.judge(_aer_at(doc, fns, end=True), first, start, what, end,
                         per_hour=inp.aer_per_hour, min_hours=0.0)
    return dataclasses.replace(got, name=AER)


def judge_nvlink(doc: Mapping[str, Any], inp: HealthInputs, what: str) -> list[CheckResult]:
    tool = doc.get("tool")
    first, last = doc.get("nvlink_start"), doc.get("nvlink_end")
    hung = next((r["unknown"] for r in (first, last) if isinstance(r, dict) and r.get("unknown")),
                None)
    if tool and hung:
        return [unknown(NVLINK, f"nvidia-smi nvlink -e: {hung}", source=nvlink_errors.SOURCE)]
    for res, when in ((first, "start"), (last, "end")):
        if tool and not isinstance(res, dict):  # a reading the sampler did not keep
            return [skipped(NVLINK, f"nvidia-smi nvlink -e failed at the window's {when}",
                            source=nvlink_errors.SOURCE)]
        why = nvlink_errors.unread({"tool": tool, "nvlink_errors": res
                                    if isinstance(res, dict) else {}}, f" at the window's {when}")
        if why:
            return [skipped(NVLINK, why, source=nvlink_errors.SOURCE)]
    assert isinstance(first, dict) and isinstance(last, dict)
    t0, t1 = first.get("time"), last.get("time")
    if not isinstance(t0, int | float) or not isinstance(t1, int | float):
        return [skipped(NVLINK, "nvidia-smi nvlink -e gave no time", source=nvlink_errors.SOURCE)]
    before = nvlink_errors.counters_of({"nvlink_errors": first}) or {}
    got = nvlink_errors.judge({"tool": tool, "nvlink_errors": last}, before,
                              float(t0), what, float(t1), crc_per_s=inp.nvlink_crc_per_s)
    return [dataclasses.replace(r, name=r.name.replace(nvlink_errors.NAME, NVLINK, 1))
            for r in got]


def judge(doc: Mapping[str, Any], gpus: Mapping[int, Series], inp: HealthInputs, *,
          what: str) -> list[CheckResult]:
    """pcie.flap, fabric.rdma_window, node.pcie_aer_window and gpu.nvlink_window."""
    start, end = doc.get("start"), doc.get("end")
    t0 = float(start) if isinstance(start, int | float) else 0.0
    t1 = float(end) if isinstance(end, int | float) else t0
    return [*judge_flaps(doc, gpus, inp), *judge_ports(doc, t1 - t0, inp.rdma_sysfs),
            judge_aer(doc, inp, what, t0, t1), *judge_nvlink(doc, inp, what)]
