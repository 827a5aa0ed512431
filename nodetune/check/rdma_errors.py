"""``fabric.rdma_errors[D/P]``: an RDMA port's error counters, absolute and since the
node's previous check, so a link that flapped while it still reads ACTIVE is named.

Counters: ``/sys/class/infiniband/DEV/ports/N/counters/`` (Linux
Documentation/ABI/stable/sysfs-class-infiniband; drivers/infiniband/core/sysfs.c
``PORT_PMA_ATTR``: the IBTA PortCounters, saturating at their width: symbol_error and
port_rcv_errors 16 bits, link_error_recovery and link_downed 8, local_link_integrity_errors
and excessive_buffer_overrun_errors 4), read 2026-11-26.

Limits: infiniband-diags' ``ibcheckerrs`` default thresholds
(https://github.com/linux-rdma/rdma-core infiniband-diags/scripts/ibcheckerrs.in and
etc/error_thresholds, read 2026-11-26): SymbolErrorCounter 10, LinkErrorRecoveryCounter
10, LinkDownedCounter 10, PortRcvErrors 10, LocalLinkIntegrityErrors 10,
ExcessiveBufferOverrunErrors 10; ibcheckerrs flags a counter at or above its threshold
(``$2 >= th[$1]``), and so does this check (it fails). Since the previous check: any new
``link_downed`` or ``link_error_recovery`` (the link went down or retrained: a flap)
fails; a rise of another counter warns. A counter already at its width's maximum cannot
rise, so it is judged by the limit alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.check.model import CheckResult, HelpLines, failed, passed, skipped, warned
from nodetune.check.signal_read import Judged, SignalRead

NAME = "fabric.rdma_errors"
# Its keys of health[NODE] (what the next check counts from): the ports' counters.
KEEPS = ("rdma_counters",)
# Its lines in check's --help (nodetune.check.listing).
HELP: HelpLines = (
    ("fabric.rdma_errors[D/P]",
     "sysfs port error counters < 10 (infiniband-diags ibcheckerrs);",
     "no link_downed / link_error_recovery since the node's previous check"),
)
SOURCE = ("infiniband-diags ibcheckerrs thresholds (rdma-core, 2026-11-26); "
          "sysfs-class-infiniband counters")
LIMITS = {"link_downed": 10, "symbol_error": 10, "link_error_recovery": 10,
          "port_rcv_errors": 10, "local_link_integrity_errors": 10,
          "excessive_buffer_overrun_errors": 10}
FLAP = ("link_downed", "link_error_recovery")


def port_key(port: Mapping[str, Any]) -> str:
    """``mlx5_0/1``."""
    return f"{port.get('device')}/{port.get('port')}"


def counters_of(ports: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{mlx5_0/1: {link_downed: 0, ...}}``: the integers the probe read."""
    out: dict[str, dict[str, int]] = {}
    for p in ports:
        values = {}
        for key, raw in (p.get("counters") or {}).items():
            if key in LIMITS and str(raw).strip().isdigit():
                values[key] = int(str(raw).strip())
        out[port_key(p)] = values
    return out


def previous_counters(doc: object) -> dict[str, dict[str, int]] | None:
    """The counters a previous check kept (None: none kept, or not readable): per port,
    its integers only."""
    if not isinstance(doc, dict):
        return None
    return {str(k): {str(n): v for n, v in c.items()
                     if isinstance(v, int) and not isinstance(v, bool)}
            for k, c in doc.items() if isinstance(c, dict)}


def judge(ports: Sequence[Mapping[str, Any]], previous: Mapping[str, Mapping[str, int]] | None,
          previous_what: str, root: str) -> list[CheckResult]:
    """One result per port: fail above a limit or on a flap since the previous check."""
    if not ports:
        return [skipped(NAME, f"no RDMA port ({root} is empty)",
                        source=SOURCE)]
    expected = "each < 10" + (f", no link_downed/link_error_recovery since {previous_what}"
                               if previous is not None else "")
    out = []
    for key, now in counters_of(ports).items():
        name = f"{NAME}[{key}]"
        if not now:
            out.append(skipped(name, f"{root}/{key.replace('/', '/ports/')}/counters has none "
                               "of the error counters", source=SOURCE))
            continue
        before = (previous or {}).get(key)
        over = [f"{k} {v} >= {LIMITS[k]}" for k, v in now.items() if v >= LIMITS[k]]
        rises = {k: v - before[k] for k, v in now.items()
                 if before is not None and k in before and v > before[k]}
        flaps = [f"{k} +{d}" for k, d in rises.items() if k in FLAP]
        other = [f"{k} +{d}" for k, d in rises.items() if k not in FLAP]
        measured = ", ".join(f"{k} {v}" for k, v in now.items() if v) or "all 0"
        if rises:
            measured += f" (since {previous_what}: {', '.join(flaps + other)})"
        if over or flaps:
            why = "; ".join(over + ([f"the link went down or retrained since {previous_what}: "
                                     + ", ".join(flaps)] if flaps else []))
            out.append(failed(name, measured, expected, SOURCE, f"{key}: {why}"))
        elif other:
            out.append(warned(name, measured, expected, SOURCE,
                              f"{key}: errors since {previous_what}: {', '.join(other)}"))
        else:
            out.append(passed(name, measured, expected, SOURCE))
    return out


def judge_signal(read: SignalRead) -> Judged:
    """fabric.rdma_errors from the reader's RDMA ports, since the previous check that kept
    their counters; this check's counters for the next one."""
    kept = read.previous.of(NAME)
    return Judged(tuple(judge(read.ports, previous_counters(kept.state.get(KEEPS[0])),
                              kept.what, read.inp.rdma_sysfs)),
                  {KEEPS[0]: counters_of(read.ports)})
