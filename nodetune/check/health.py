"""The checks of what kills GPU jobs while they run: gpu.xid, gpu.sxid, gpu.fabric, gpu.imex,
gpu.kernel_module, gpu.nvlink_errors, fabric.rdma_errors, fabric.pcie, node.pcie_aer,
dcgm.diag, gpu.pcie_acs.
One read-only command per node (:mod:`nodetune.check.node_health`; the NVLink counters come
with the probe's nvidia-smi reads), judged against the node's previous check.

Its inventory variables are :mod:`nodetune.measure.node_inputs`' (checked before any node
is contacted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune.ansible.role_defaults import Value
from nodetune.check import (
    dcgm,
    gpu_fabric,
    hca_pcie,
    imex,
    node_health,
    node_program,
    nvlink_errors,
    pcie_acs,
    pcie_aer,
    rdma_errors,
    sxid,
    xid,
)
from nodetune.check.gpu import module_flavour
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult, Status
from nodetune.errors import InputError
from nodetune.measure.node_inputs import HealthInputs
from nodetune.remote import ssh


@dataclass(frozen=True, slots=True)
class Previous:
    """What the node's previous check left in the run history."""

    xid_since: float | None = None       # the last check whose gpu.xid did not fail
    xid_what: str = ""
    counters: Mapping[str, Mapping[str, int]] | None = None
    counters_what: str = ""
    aer: Mapping[str, Mapping[str, int]] | None = None  # node.pcie_aer's counters
    aer_time: float | None = None
    aer_what: str = ""
    aer_window: Mapping[str, Any] | None = None  # the correctable baseline (pcie_aer)
    nvlink: Mapping[str, Mapping[str, int]] | None = None  # gpu.nvlink_errors' counters
    nvlink_time: float | None = None
    nvlink_what: str = ""
    time: float | None = None  # the newest previous check's (None: there is none)
    what: str = ""


def previous(node: str, records: list[dict[str, Any]]) -> Previous:
    """The node's previous check (newest record holding its ``health`` entry)."""
    xid_since, xid_what, counters, counters_what = None, "", None, ""
    aer: dict[str, dict[str, int]] | None = None
    aer_time, aer_what, aer_window = None, "", None
    nvlink: dict[str, dict[str, int]] | None = None
    nvlink_time, nvlink_what = None, ""
    newest: tuple[float | None, str] = (None, "")
    for doc in reversed(records):
        entry = (doc.get("health") or {}).get(node)
        if not isinstance(entry, dict) or not isinstance(entry.get("time"), int | float):
            continue
        what = f"the check of {doc.get('started', '?')} ({doc.get('run_id', '?')})"
        if newest[0] is None:
            newest = (float(entry["time"]), what)
        if counters is None and isinstance(entry.get("rdma_counters"), dict):
            counters, counters_what = entry["rdma_counters"], what
        if aer is None and isinstance(entry.get("pcie_aer"), dict):
            aer = pcie_aer.previous_counters(entry["pcie_aer"])
            aer_time, aer_what = float(entry["time"]), what
            aer_window = entry.get("pcie_aer_window")
        if nvlink is None and isinstance(entry.get("nvlink_errors"), dict):
            nvlink = nvlink_errors.previous_counters(entry["nvlink_errors"])
            nvlink_time, nvlink_what = float(entry["time"]), what
        if xid_since is None and entry.get("xid") in ("pass", "warn"):
            xid_since, xid_what = float(entry["time"]), what
        if counters is not None and xid_since is not None and aer is not None and (
                nvlink is not None):
            break
    return Previous(xid_since, xid_what, counters, counters_what, aer, aer_time, aer_what,
                    aer_window if isinstance(aer_window, dict) else None,
                    nvlink, nvlink_time, nvlink_what, time=newest[0], what=newest[1])


def window_of(prev: Previous) -> dict[str, Any]:
    """``report.json``'s ``window[NODE].previous_check``: when the previous check the
    counters count from ran, and which it was (``at`` None: there was none)."""
    at = (datetime.fromtimestamp(prev.time, UTC).isoformat(timespec="seconds")
          if prev.time is not None else None)
    return {"at": at, "what": prev.what or None}


def previous_doc(prev: Previous) -> dict[str, Any]:
    """``prev`` as JSON, for a node that checks itself (``check --launcher slurm``)."""
    return {"xid_since": prev.xid_since, "xid_what": prev.xid_what,
            "counters": prev.counters, "counters_what": prev.counters_what,
            "aer": prev.aer, "aer_time": prev.aer_time, "aer_what": prev.aer_what,
            "aer_window": prev.aer_window, "nvlink": prev.nvlink,
            "nvlink_time": prev.nvlink_time, "nvlink_what": prev.nvlink_what,
            "time": prev.time, "what": prev.what}


def previous_from(doc: object, *, source: str) -> Previous:
    """The :class:`Previous` :func:`previous_doc` wrote (``source`` names the file).

    Raises:
        InputError: not what previous_doc writes.
    """
    since = doc.get("xid_since") if isinstance(doc, dict) else "?"
    counters = doc.get("counters") if isinstance(doc, dict) else "?"
    if not isinstance(doc, dict) or not (since is None or isinstance(since, int | float)) or not (
            counters is None or isinstance(counters, dict)):
        raise InputError(f"{source}: not a previous check's summary")
    aer_time = doc.get("aer_time")
    nvlink_time = doc.get("nvlink_time")
    when = doc.get("time")
    return Previous(None if since is None else float(since), str(doc.get("xid_what") or ""),
                    counters, str(doc.get("counters_what") or ""),
                    pcie_aer.previous_counters(doc.get("aer")),
                    float(aer_time) if isinstance(aer_time, int | float) else None,
                    str(doc.get("aer_what") or ""),
                    window if isinstance(window := doc.get("aer_window"), dict) else None,
                    nvlink_errors.previous_counters(doc.get("nvlink")),
                    float(nvlink_time) if isinstance(nvlink_time, int | float) else None,
                    str(doc.get("nvlink_what") or ""),
                    time=float(when) if isinstance(when, int | float) else None,
                    what=str(doc.get("what") or ""))


def load_history(runs_dir: Path) -> list[dict[str, Any]]:
    """Earlier check records, oldest first (unreadable ones are skipped)."""
    from nodetune.reports.history import load_records

    return load_records(runs_dir, verbs=("check",))


def source() -> str:
    """The node-side reader's source, run with ``python -c``; it carries
    :mod:`nodetune.check.node_run` (the runner every tool goes through) and node_facts'
    fact script (which lists the RDMA ports, for the roles and the probe too)."""
    return node_program.embed("node_health.py", FACT_SOURCE=node_program.fact_text())


def read_node(session: ssh.Session, python: str, host: str, inp: HealthInputs, *,
              dcgm_level: int, timeout: float) -> dict[str, Any]:
    """Run the reader on the node (one command, nothing left there) and parse its answer.

    Raises:
        LaunchError: its answer is not the reader's.
        NodeTimeout: no answer within ``timeout``.
    """
    request = {"kernel_log": inp.kernel_log, "rdma_sysfs": inp.rdma_sysfs,
               "pci_sysfs": inp.pci_sysfs,
               "dcgm_level": dcgm_level, "timeout": max(5.0, timeout / 4),
               "dcgm_timeout": max(5.0, timeout - 10)}
    return node_program.run(session, python, source(), request, timeout=timeout,
                            mark="health", what="the health reader", host=host)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _trusted_pcie(pcie: dict[str, Any]) -> dict[str, Any]:
    """The reader's PCI answer with only the devices whose names the reader itself would
    accept (plain RDMA device names, PCI addresses): what reaches a check's name, a message
    or the state file is checked again here, as the probe's answers are."""
    hcas, functions = pcie.get("hcas"), pcie.get("functions")
    return {**pcie,
            "hcas": [h for h in hcas if isinstance(h, dict)
                     and node_health.NAME.match(str(h.get("device", "")))]
            if isinstance(hcas, list) else [],
            "functions": [f for f in functions if isinstance(f, dict)
                          and node_health.PCI_ADDR.match(str(f.get("pci", "")))]
            if isinstance(functions, list) else []}


def _switches(doc: Mapping[str, Any]) -> int:
    """The NVSwitches the reader found on the PCI bus."""
    found = _dict(doc.get("fabric_manager")).get("nvswitches")
    return found if isinstance(found, int) and not isinstance(found, bool) else 0


def judge(doc: Mapping[str, Any], nvidia: Mapping[str, Any], gpus: GpuRead,
          rdma_ports: int, inp: HealthInputs, exp_modules: Value | None,
          prev: Previous) -> tuple[tuple[CheckResult, ...], dict[str, Any]]:
    """The checks, and what the next check compares against (``health[NODE]``)."""
    log = _dict(doc.get("kernel_log"))
    now = float(log["now"]) if isinstance(log.get("now"), float) else datetime.now().timestamp()
    pcie = _trusted_pcie(_dict(doc.get("pcie")))
    ports = [p for p in doc.get("rdma_counters") or [] if isinstance(p, dict)]
    smi = gpus.smi
    nvidia_ports: list[dict[str, Any]] = [{}] * max(rdma_ports, len(ports))
    lspci = doc.get("lspci")
    aer = pcie_aer.counters_of(pcie)  # node.pcie_aer's and the next check's, parsed once
    results = (
        xid.judge(log, smi, prev.xid_since, prev.xid_what),
        sxid.judge(log, _switches(doc), prev.xid_since, prev.xid_what),
        gpu_fabric.judge_fabric(smi, gpus.fabric, _dict(doc.get("fabric_manager"))),
        imex.judge(_dict(doc.get("imex"))),
        gpu_fabric.judge_module(smi, module_flavour(nvidia.get("module")), exp_modules,
                                bool(doc.get("peermem")), nvidia_ports, inp.peermem_enabled),
        *rdma_errors.judge(ports, prev.counters, prev.counters_what, inp.rdma_sysfs),
        *hca_pcie.judge(pcie, inp.rdma_sysfs, speed_fails=inp.hca_speed_fails),
        pcie_aer.judge(pcie, prev.aer, prev.aer_time, prev.aer_what, now,
                       per_hour=inp.aer_per_hour, window=prev.aer_window, counters=aer),
        *nvlink_errors.judge(nvidia, prev.nvlink, prev.nvlink_time, prev.nvlink_what, now,
                             crc_per_s=inp.nvlink_crc_per_s),
        dcgm.judge(_dict(doc.get("dcgm"))),
        pcie_acs.judge(lspci if isinstance(lspci, dict) else None),
    )
    state = {"time": now,
             "xid": next(r.status.value for r in results if r.name == xid.NAME),
             "rdma_counters": rdma_errors.counters_of(ports),
             "pcie_aer": aer,
             "pcie_aer_window": pcie_aer.next_window(aer, prev.aer_window, now),
             "nvlink_errors": nvlink_errors.counters_of(nvidia),
             "xid_last": xid.newest(log, prev.xid_since)}
    if state["xid"] == Status.SKIP.value:
        state["xid"] = "skip"
    return results, state
