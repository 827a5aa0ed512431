"""``gpu.xid``: NVRM Xid events in the kernel log, classified by NVIDIA's Xid catalogue.

The driver logs each event as one kernel record, with or without the process::

    NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:55:00): 48, pid=2187734, name=python, channel 0x00000002
    NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:55:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain
        and Reset)

(as pasted from real nodes in github.com/NVIDIA/open-gpu-kernel-modules/issues/1151 and
the comment of leptonai/gpud's Xid reader, read 2026-11-26). The records are read in
/dev/kmsg's format (``PRI,SEQ,USEC,FLAGS;MESSAGE``, USEC since boot; Linux
Documentation/ABI/testing/dev-kmsg), so each event has a time.

Catalogue: NVIDIA, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-11-26),
Ampere and newer: each Xid's description and its "Resolution Bucket (Immediate Action)".
An Xid whose immediate action is RESET_GPU, RESTART_BM (restart the machine),
CHECK_MECHANICALS, or a workflow the catalogue says needs a GPU reset or a node reboot
(WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR) fails the node; RESTART_APP, IGNORE and
WORKFLOW_XID_45 (what an application causes, or a report that follows another Xid)
warn; Xid 154 is read for the action it names. An Xid not in this table warns with its
number, so nothing unknown passes silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodetune.action import Action, highest
from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.nvidia_smi import SmiLog
from nodetune.check.signal_read import Judged, SignalRead

CATALOGUE = ("NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog"
             ".html, read 2026-11-26)")
NAME = "gpu.xid"
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("gpu.xid",
     "no Xid in the kernel log since boot or the node's last clean gpu.xid that",
     "NVIDIA's Xid catalogue says needs a GPU reset, reboot or RMA (app Xids warn)"),
)
# The catalogue's immediate-action buckets, in words.
RESET, REBOOT, MECHANICALS = "GPU reset", "node reboot (RESTART_BM)", "check power cabling"
RESET_OR_REBOOT = "GPU reset or node reboot"
APP, IGNORE = "application restart", "none (informational)"
WARN_ONLY = (APP, IGNORE)
# The catalogue's immediate actions on nodetune's ladder (nodetune.action).
LADDER = {RESET: Action.RESET_GPU, RESET_OR_REBOOT: Action.RESET_GPU, REBOOT: Action.REBOOT,
          MECHANICALS: Action.SERVICE, APP: Action.RERUN, IGNORE: Action.NONE}
# Xid -> (catalogue description, immediate action). Fail unless the action is in WARN_ONLY.
XIDS: dict[int, tuple[str, str]] = {
    8: ("GPU stopped processing", APP),
    13: ("Graphics Engine Exception", APP),
    31: ("GPU memory page fault", APP),
    32: ("Invalid or corrupted push buffer stream", APP),
    38: ("Driver firmware error", IGNORE),
    43: ("GPU stopped processing", IGNORE),
    45: ("Preemptive cleanup, due to previous errors", APP),
    46: ("GPU stopped processing", RESET),
    48: ("Double Bit ECC Error", RESET_OR_REBOOT),
    54: ("Auxiliary power is not connected to the GPU board", MECHANICALS),
    62: ("Internal micro-controller halt", RESET),
    63: ("GPU memory remapping event", IGNORE),
    64: ("GPU memory remapping failure", RESET),
    68: ("NVDEC0 Exception", APP),
    69: ("Graphics Engine class error", APP),
    74: ("NVLINK Error", RESET_OR_REBOOT),
    79: ("GPU has fallen off the bus", REBOOT),
    92: ("High single-bit ECC error rate", IGNORE),
    94: ("Contained memory error (reset the GPU when convenient)", APP),
    95: ("Uncontained memory error", RESET),
    109: ("Context Switch Timeout Error", RESET),
    110: ("Security Fault Error", RESET),
    119: ("GSP RPC Timeout", RESET),
    120: ("GSP Error", RESET),
    121: ("C2C Error (corrected; reset at a service window)", IGNORE),
    136: ("Link Training Failed", RESET),
    137: ("NVLink Privilege Error", IGNORE),
    140: ("ECC Unrecovered Error", RESET),
    143: ("GPU Initialization Error", RESET),
    154: ("GPU Recovery Action Changed", RESET),
    155: ("NVLINK: SW Defined Error", RESET),
    156: ("Resource Retirement Event", RESET),
    158: ("GPU Fatal Timeout", RESET),
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
    def rung(self) -> Action:
        """The catalogue's immediate action on nodetune's ladder; for Xid 154, the recovery
        action the driver changed to (NVML's None / GPU reset / node reboot)."""
        if self.xid == 154:
            to = self.detail.split(" to ")[-1].lower()
            return Action.REBOOT if "reboot" in to else Action.NONE if "(none)" in to \
                else Action.RESET_GPU
        return LADDER.get(self.action, Action.RERUN)

    @property
    def fatal(self) -> bool:
        """Whether the catalogue asks for a reset, a reboot or a hardware fix (154: the
        action it changed to, "None" being the only one that needs nothing)."""
        if self.xid == 154:
            return "(None)" not in self.detail.split(" to ")[-1]
        return self.action not in WARN_ONLY


def message_of(line: str, boot_time: float | None) -> tuple[str, float | None]:
    """A kernel-log record's message and its UNIX time: a /dev/kmsg record
    (``PRI,SEQ,USEC,FLAGS;MESSAGE``) is dated from its USEC since boot where the boot time
    is known; any other line is its own message, with no time."""
    m = _KMSG.match(line)
    if not m:
        return line, None
    return m["msg"], (boot_time + int(m["usec"]) / 1e6) if boot_time else None


def parse(records: Sequence[str], boot_time: float | None) -> list[XidEvent]:
    """The Xid events of kmsg-format records (a plain ``NVRM: Xid`` line has no time)."""
    out = []
    for line in records:
        msg, when = message_of(line, boot_time)
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


def counted(log: Mapping[str, Any], since: float | None) -> list[XidEvent]:
    """The events of ``log`` a check counts: since ``since`` (the previous check's point)
    and since boot."""
    boot = log.get("boot_time")
    start = max(since or 0.0, float(boot or 0.0))
    return [e for e in parse(log.get("records") or [], boot)
            if e.when is None or e.when >= start]


def newest(log: Mapping[str, Any], since: float | None) -> float | None:
    """The time of the newest event counted (None: none, or none with a time)."""
    times = [e.when for e in counted(log, since) if e.when is not None]
    return max(times) if times else None


def judge(log: Mapping[str, Any], smi: SmiLog | None, since: float | None,
          since_what: str) -> CheckResult:
    """Fail on a reset/reboot/RMA Xid in the window, warn on an application one."""
    source = f"{CATALOGUE}; kernel log {log.get('source') or '?'}"
    if log.get("error"):
        return skipped(NAME, f"kernel log unreadable: {log['error']} (reading /dev/kmsg needs "
                       "root or kernel.dmesg_restrict=0)", source=source)
    boot = log.get("boot_time")
    window = since_what if since and (not boot or since >= float(boot)) else "boot"
    events = counted(log, since)
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
        return failed(NAME, measured, expected, source, "; ".join(words) + more,
                      action=highest(e.rung for e in bad))
    return warned(NAME, measured, expected, source,
                  "; ".join(words) + more
                  + " (the catalogue's immediate action: restart the application, or none)")


def judge_signal(read: SignalRead) -> Judged:
    """gpu.xid from the reader's kernel log, since the point the previous checks left."""
    return Judged((judge(read.log, read.gpus.smi, read.previous.xid_since,
                          read.previous.xid_what),))
