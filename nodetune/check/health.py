"""The checks of what kills GPU jobs while they run (the signals, :data:`SIGNALS`): gpu.xid,
gpu.sxid, gpu.fabric, gpu.imex, gpu.kernel_module, fabric.rdma_errors, fabric.pcie,
node.pcie_aer, gpu.nvlink_errors, dcgm.diag, gpu.pcie_acs.
One read-only command per node (:mod:`nodetune.check.node_health`; the NVLink counters come
with the probe's nvidia-smi reads), judged against the node's previous check: Xids since
the last check whose gpu.xid did not fail, each counted signal (:data:`COUNTED`) from what
the newest check that kept it kept (:class:`Previous`).

Its inventory variables are :mod:`nodetune.measure.node_inputs`' (checked before any node
is contacted).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
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
from nodetune.check.gpu_read import GpuRead
from nodetune.check.model import CheckResult
from nodetune.check.signal_read import (
    Kept,
    Previous,
    Signal,
    SignalRead,
    as_number,
    as_object,
    kept_state,
)
from nodetune.errors import InputError
from nodetune.measure.node_inputs import HealthInputs
from nodetune.remote.executor import NodeRunner

# The signals, in report order: each module's judge_signal gives its results from the
# health reader's answer (and, for a counted signal, what the next check counts from). A
# new signal is one line here; tests/unit/test_check_registry.py holds the list complete.
SIGNALS: tuple[Signal, ...] = (
    xid.judge_signal,                  # gpu.xid
    sxid.judge_signal,                 # gpu.sxid
    gpu_fabric.judge_signal_fabric,    # gpu.fabric
    imex.judge_signal,                 # gpu.imex
    gpu_fabric.judge_signal_module,    # gpu.kernel_module
    rdma_errors.judge_signal,          # fabric.rdma_errors[D/P]
    hca_pcie.judge_signal,             # fabric.pcie[D]
    pcie_aer.judge_signal,             # node.pcie_aer
    nvlink_errors.judge_signal,        # gpu.nvlink_errors[N]
    dcgm.judge_signal,                 # dcgm.diag
    pcie_acs.judge_signal,             # gpu.pcie_acs
)
# The signals counted from the previous check, by name: each one's keys of health[NODE]
# (its module's KEEPS; the first holds its counters), in report order.
COUNTED: dict[str, tuple[str, ...]] = {
    m.NAME: m.KEEPS for m in (sys.modules[fn.__module__] for fn in SIGNALS)
    if hasattr(m, "KEEPS")}


def previous(node: str, records: list[dict[str, Any]]) -> Previous:
    """The node's previous check (newest record holding its ``health`` entry); each counted
    signal's, the newest that kept it."""
    xid_since, xid_what = None, ""
    kept: dict[str, Kept] = {}
    newest: tuple[float | None, str] = (None, "")
    for doc in reversed(records):
        entry = (doc.get("health") or {}).get(node)
        if not isinstance(entry, dict) or not isinstance(entry.get("time"), int | float):
            continue
        what = f"the check of {doc.get('started', '?')} ({doc.get('run_id', '?')})"
        if newest[0] is None:
            newest = (float(entry["time"]), what)
        for name, keys in COUNTED.items():
            if name not in kept and (state := kept_state(keys, entry)) is not None:
                kept[name] = Kept(state, float(entry["time"]), what)
        if xid_since is None and entry.get("xid") in ("pass", "warn"):
            xid_since, xid_what = float(entry["time"]), what
        if xid_since is not None and len(kept) == len(COUNTED):
            break
    return Previous(xid_since, xid_what, kept, time=newest[0], what=newest[1])


def window_of(prev: Previous) -> dict[str, Any]:
    """``report.json``'s ``window[NODE].previous_check``: when the previous check the
    counters count from ran, and which it was (``at`` None: there was none)."""
    at = (datetime.fromtimestamp(prev.time, UTC).isoformat(timespec="seconds")
          if prev.time is not None else None)
    return {"at": at, "what": prev.what or None}


# previous_doc's keys of the signals counted before Previous kept each by its name: the
# file goes from the controller to nodes that may run another nodetune, so these keep
# them ({health key: file key}, time key, what key; tests/unit/test_check_registry.py holds
# the health keys to the signal's KEEPS); a signal counted since goes under "kept" by its
# name.
_DOC_KEYS: dict[str, tuple[dict[str, str], str, str]] = {
    rdma_errors.NAME: ({"rdma_counters": "counters"}, "counters_time", "counters_what"),
    pcie_aer.NAME: ({"pcie_aer": "aer", "pcie_aer_window": "aer_window"}, "aer_time",
                    "aer_what"),
    nvlink_errors.NAME: ({"nvlink_errors": "nvlink"}, "nvlink_time", "nvlink_what"),
}


def previous_doc(prev: Previous) -> dict[str, Any]:
    """``prev`` as JSON, for a node that checks itself (``check --launcher slurm``)."""
    doc: dict[str, Any] = {"xid_since": prev.xid_since, "xid_what": prev.xid_what}
    for name, (keys, at, what) in _DOC_KEYS.items():
        kept = prev.of(name)
        doc.update({key: kept.state.get(health_key) for health_key, key in keys.items()})
        doc.update({at: kept.time, what: kept.what})
    doc["kept"] = {name: {"state": dict(k.state), "time": k.time, "what": k.what}
                   for name, k in prev.kept.items() if name not in _DOC_KEYS}
    return {**doc, "time": prev.time, "what": prev.what}


def _kept_in(doc: Mapping[str, Any]) -> dict[str, Kept]:
    """The counted signals' :class:`Kept` in a :func:`previous_doc` (where each kept one)."""
    kept: dict[str, Kept] = {}
    for name, (keys, at, what) in _DOC_KEYS.items():
        counted = COUNTED.get(name)  # None: a signal no longer in SIGNALS, nothing to keep
        if not counted:
            continue
        # The file's keys, under the health keys they stand for.
        state = kept_state(counted, {health_key: doc.get(key) for health_key, key in keys.items()})
        if state is not None:
            kept[name] = Kept(state, as_number(doc.get(at)), str(doc.get(what) or ""))
    others = doc.get("kept")
    for name, k in (others.items() if isinstance(others, dict) else ()):
        if name not in COUNTED or name in _DOC_KEYS or not isinstance(k, dict) or (
                not isinstance(k.get("state"), dict)):
            continue
        state = kept_state(COUNTED[name], k["state"])
        if state is not None:
            kept[name] = Kept(state, as_number(k.get("time")), str(k.get("what") or ""))
    return kept


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
    return Previous(as_number(since), str(doc.get("xid_what") or ""), _kept_in(doc),
                    time=as_number(doc.get("time")), what=str(doc.get("what") or ""))


def load_history(runs_dir: Path) -> list[dict[str, Any]]:
    """Earlier check records, oldest first (unreadable ones are skipped)."""
    from nodetune.reports.history import load_records

    return load_records(runs_dir, verbs=("check",))


def source() -> str:
    """The node-side reader's source, run with ``python -c``; it carries
    :mod:`nodetune.check.node_run` (the runner every tool goes through) and node_facts'
    fact script (which lists the RDMA ports, for the roles and the probe too)."""
    return node_program.embed("node_health.py", FACT_SOURCE=node_program.fact_text())


def read_node(node: NodeRunner, python: str, host: str, inp: HealthInputs, *,
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
    return node_program.run(node, python, source(), request, timeout=timeout,
                            mark="health", what="the health reader", host=host)


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


def judge(doc: Mapping[str, Any], nvidia: Mapping[str, Any], gpus: GpuRead,
          rdma_ports: int, inp: HealthInputs, exp_modules: Value | None,
          prev: Previous) -> tuple[tuple[CheckResult, ...], dict[str, Any]]:
    """The checks (:data:`SIGNALS`), and what the next check compares against
    (``health[NODE]``: gpu.xid's point and each counted signal's ``KEEPS``)."""
    log = as_object(doc.get("kernel_log"))
    now = float(log["now"]) if isinstance(log.get("now"), float) else datetime.now().timestamp()
    read = SignalRead(doc=doc, log=log, pcie=_trusted_pcie(as_object(doc.get("pcie"))),
                      ports=[p for p in doc.get("rdma_counters") or [] if isinstance(p, dict)],
                      nvidia=nvidia, gpus=gpus, rdma_ports=rdma_ports, inp=inp,
                      exp_modules=exp_modules, previous=prev, now=now)
    judged = [signal(read) for signal in SIGNALS]
    results = tuple(r for j in judged for r in j.results)
    state = {"time": now,
             "xid": next(r.status.value for r in results if r.name == xid.NAME),
             **{key: value for j in judged for key, value in j.keep.items()},
             "xid_last": xid.newest(log, prev.xid_since)}
    return results, state
