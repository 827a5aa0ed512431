"""``gpu.sxid``: NVSwitch SXid events in the kernel log.

The NVSwitch driver prints each event as one kernel record::

    nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted
        PRIV error (First)
    nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up

from ``NVSWITCH_PRINT_SXID`` (``"nvidia-%s: SXid (PCI:" NVLINK_PCI_DEV_FMT "): %05d, "``,
src/common/nvswitch/kernel/inc/common_nvswitch.h) with the severity the reporting macros
put first: ``Fatal``, ``Non-fatal`` or ``Correctable``, then ``Link %02d`` for a link's
error (src/common/nvswitch/kernel/inc/error_nvswitch.h; github.com/NVIDIA/
open-gpu-kernel-modules, read 2026-11-29). They come from the same kernel-log read as
gpu.xid's (:func:`nodetune.check.node_health.kernel_log` keeps every record holding
``Xid``, which ``SXid`` holds), in /dev/kmsg's format so each has a time, and count from
the same point as gpu.xid (since boot, or the node's last check whose gpu.xid passed).

Judged as DCGM's NVSwitch health watch judges the switch's errors (github.com/NVIDIA/DCGM
modules/health/DcgmHealthWatch.cpp ``MonitorNvSwitchErrorCounts``, read 2026-11-29): a
fatal one fails (``DCGM_HEALTH_RESULT_FAIL``), a non-fatal one warns; a correctable one
is counted and passes; one without a severity warns, so nothing unknown passes silently.
A node without NVSwitch (no NVIDIA PCI class 0x0680 device) and no SXid skips.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.signal_read import Judged, SignalRead
from nodetune.check.xid import _stamp, message_of

NAME = "gpu.sxid"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.sxid",
     "no fatal NVSwitch SXid in the kernel log over gpu.xid's window (non-fatal",
     "warns; DCGM's NVSwitch health watch); no NVSwitch: skip"),
)
SOURCE = ("NVSwitch driver SXid records (NVIDIA/open-gpu-kernel-modules common_nvswitch.h, "
          "error_nvswitch.h); DCGM NVSwitch health watch (fatal fails, non-fatal warns), "
          "read 2026-11-29")
_SXID = re.compile(r"nvidia-(?P<dev>nvswitch\d{1,3}): SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]{7,16})\)"
                   r": (?P<sxid>\d{1,6}), (?P<rest>.*)$")
SEVERITIES = ("Fatal", "Non-fatal", "Correctable")


@dataclass(frozen=True, slots=True)
class SxidEvent:
    """One SXid record."""

    sxid: int
    switch: str       # nvswitch3
    pci: str
    severity: str     # Fatal, Non-fatal, Correctable, or "" where the record names none
    detail: str
    when: float | None

    @property
    def label(self) -> str:
        return (f"{self.switch} ({self.pci}): SXid {self.sxid} "
                f"{self.severity or 'severity not given'}, {self.detail} at {_stamp(self.when)}")


def parse(records: list[str], boot_time: float | None) -> list[SxidEvent]:
    out = []
    for line in records:
        msg, when = message_of(line, boot_time)
        s = _SXID.search(msg)
        if not s:
            continue
        severity, _, detail = s["rest"].partition(", ")
        if severity not in SEVERITIES:
            severity, detail = "", s["rest"]
        out.append(SxidEvent(int(s["sxid"]), s["dev"], s["pci"].lower(), severity,
                             detail.strip()[:200], when))
    return out


def judge(log: Mapping[str, Any], switches: int, since: float | None,
          since_what: str) -> CheckResult:
    """Fail on a fatal SXid in the window, warn on a non-fatal one."""
    source = f"{SOURCE}; kernel log {log.get('source') or '?'}"
    if log.get("error"):
        return skipped(NAME, f"kernel log unreadable: {log['error']}", source=source)
    boot = log.get("boot_time")
    start = max(since or 0.0, float(boot or 0.0))
    events = [e for e in parse([str(r) for r in log.get("records") or []], boot)
              if e.when is None or e.when >= start]
    if not switches and not events:
        return skipped(NAME, "no NVSwitch on the PCI bus (no NVIDIA class 0x0680 device)",
                       source=source)
    window = since_what if since and (not boot or since >= float(boot)) else "boot"
    expected = f"no fatal SXid since {window}"
    if not events:
        return passed(NAME, f"no SXid since {window} ({switches} NVSwitch(es))", expected,
                      source)
    fatal = [e for e in events if e.severity == "Fatal"]
    warn = [e for e in events if e.severity in ("Non-fatal", "")]
    counts = {s or "no severity": sum(1 for e in events if e.severity == s)
              for s in (*SEVERITIES, "") if any(e.severity == s for e in events)}
    measured = ", ".join(f"{n} {s}" for s, n in counts.items()) + f" SXid(s) since {window}"
    shown = fatal or warn
    words = "; ".join(e.label for e in shown[:5]) + (
        f"; and {len(shown) - 5} more" if len(shown) > 5 else "")
    if fatal:
        return failed(NAME, measured, expected, source, "fatal NVSwitch error: " + words)
    if warn:
        return warned(NAME, measured, expected, source, "NVSwitch error: " + words)
    return passed(NAME, measured, expected, source, "correctable NVSwitch errors only")


def judge_signal(read: SignalRead) -> Judged:
    """gpu.sxid from the reader's kernel log over gpu.xid's window, with the NVSwitches the
    reader found on the PCI bus."""
    found = read.section("fabric_manager").get("nvswitches")
    switches = found if isinstance(found, int) and not isinstance(found, bool) else 0
    return Judged((judge(read.log, switches, read.previous.xid_since,
                          read.previous.xid_what),))
