"""``gpu.xid``: NVRM Xid events in the kernel log, classified by NVIDIA's Xid catalogue.

The driver logs each event as one kernel record::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=2345, name=python3, GPU has fallen off the bus.

The records are read in /dev/kmsg's format (``PRI,SEQ,USEC,FLAGS;MESSAGE``, USEC since
boot; Linux Documentation/ABI/testing/dev-kmsg), so each event has a time.

Catalogue: NVIDIA, "XID Errors" (docs.nvidia.com/deploy/xid-errors/, read 2026-11):
each Xid's meaning and the action it asks for. Those asking for a GPU reset, a node
reboot or contacting NVIDIA (RMA) fail the node; those an application causes (an
illegal address, a page fault, a stopped or pre-empted channel) warn; an Xid not in
this table warns with its number, so nothing unknown passes silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodetune.check.gpu import SmiLog
from nodetune.check.model import CheckResult, failed, passed, skipped, warned

CATALOGUE = "NVIDIA XID Errors catalogue (docs.nvidia.com/deploy/xid-errors, 2026-11)"
NAME = "gpu.xid"
RESET, REBOOT, RMA, APP = "GPU reset", "node reboot", "contact NVIDIA (RMA)", "application"
# Xid -> (meaning, action). Fail: RESET, REBOOT, RMA. Warn: APP.
XIDS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", APP),
    31: ("GPU memory page fault", APP),
    32: ("invalid or corrupted push buffer stream", APP),
    38: ("driver firmware error", RESET),
    43: ("GPU stopped processing", APP),
    45: ("preemptive cleanup, due to previous errors", APP),
    48: ("double bit ECC error (DBE)", RESET),
    54: ("auxiliary power is not connected to the GPU board", REBOOT),
    56: ("display engine error", RESET),
    57: ("error programming video memory interface", RESET),
    61: ("internal micro-controller breakpoint/warning (GSP)", RESET),
    62: ("internal micro-controller halt", RESET),
    63: ("ECC page retirement or row remapping recording event", APP),
    64: ("ECC page retirement or row remapper recording failure", RESET),
    68: ("video processor exception", APP),
    69: ("graphics engine class error", APP),
    74: ("NVLink error", RESET),
    79: ("GPU has fallen off the bus", REBOOT),
    92: ("high single-bit ECC error rate", APP),
    94: ("contained ECC error (row remap pending: reset at the next chance)", RESET),
    95: ("uncontained ECC error", RESET),
    109: ("context switch timeout", APP),
    119: ("GSP RPC timeout", RESET),
    120: ("GSP error", RESET),
    121: ("C2C link error", RESET),
    123: ("SPI PMU RPC write failure", RMA),
    136: ("link training failed", RESET),
    140: ("unrecovered ECC error", RESET),
    143: ("GPU initialization failure", RMA),
    154: ("GPU recovery action changed", RESET),
}
_KMSG = re.compile(r"^\s*\d+,\d+,(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
                  r"(?:\.[0-7])?)\): (?P<xid>\d+),\s*(?P<rest>.*)$")


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One Xid record."""

    xid: int
    pci: str          # as the driver prints it: 0000:3b:00
    detail: str       # the rest of the line (pid, name, the driver's words)
    when: float | None  # UNIX time, None when the record has no time

    @property
    def meaning(self) -> str:
        return XIDS.get(self.xid, ("not in the catalogue nodetune knows", APP))[0]

    @property
    def action(self) -> str:
        return XIDS.get(self.xid, ("", APP))[1]

    @property
    def fatal(self) -> bool:
        """Whether the catalogue asks for a reset, a reboot or an RMA (154: read its words)."""
        if self.xid == 154:
            return "0x0 (None)" not in self.detail.split(" to ")[-1]
        return self.action != APP


def parse(records: Sequence[str], boot_time: float | None) -> list[XidEvent]:
    """The Xid events of kmsg-format records (a plain ``NVRM: Xid`` line has no time)."""
    out = []
    for line in records:
        m = _KMSG.match(line)
        msg, when = (m["msg"], (boot_time + int(m["usec"]) / 1e6) if boot_time else None) \
            if m else (line, None)
        x = _XID.search(msg)
        if x:
            out.append(XidEvent(int(x["xid"]), x["pci"].lower(), x["rest"].strip(), when))
    return out


def _gpu_of(pci: str, smi: SmiLog | None) -> str:
    """``GPU 2 (0000:3b:00.0)`` where nvidia-smi knows the bus, else the driver's address."""
    for g in smi.gpus if smi else ():
        bus = g.bus_id.lower()  # 00000000:3B:00.0
        domain, _, rest = bus.partition(":")
        if rest.rsplit(".", 1)[0] == pci.split(":", 1)[-1].rsplit(".", 1)[0] and (
                int(domain, 16) == int(pci.split(":", 1)[0], 16)):
            return f"GPU {g.index} ({pci})"
    return f"GPU at {pci}"


def _stamp(when: float | None) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds") if when else \
        "time unknown"


def judge(log: Mapping[str, Any], smi: SmiLog | None, since: float | None,
          since_what: str) -> CheckResult:
    """Fail on a reset/reboot/RMA Xid in the window, warn on an application one."""
    source = f"{CATALOGUE}; kernel log {log.get('source') or '?'}"
    if log.get("error"):
        return skipped(NAME, f"kernel log unreadable: {log['error']} (reading /dev/kmsg needs "
                       "root or kernel.dmesg_restrict=0)", source=source)
    boot = log.get("boot_time")
    start = max(since or 0.0, float(boot or 0.0))
    window = since_what if since and (not boot or since >= float(boot)) else "boot"
    events = [e for e in parse(log.get("records") or [], boot)
              if e.when is None or e.when >= start]
    expected = f"no reset/reboot/RMA Xid since {window}"
    if not events:
        return passed(NAME, f"no Xid since {window}", expected, source)
    bad = [e for e in events if e.fatal]
    shown = bad or events
    words = [f"{_gpu_of(e.pci, smi)}: Xid {e.xid} {e.meaning} at {_stamp(e.when)}"
             f"{f' (needs {e.action})' if e.fatal else ''}" for e in shown[:5]]
    more = f"; and {len(shown) - 5} more" if len(shown) > 5 else ""
    measured = ", ".join(sorted({f"Xid {e.xid}" for e in shown}, key=lambda s: int(s[4:])))
    if bad:
        return failed(NAME, measured, expected, source, "; ".join(words) + more)
    return warned(NAME, measured, expected, source,
                  "; ".join(words) + more + " (application-caused per the catalogue)")
