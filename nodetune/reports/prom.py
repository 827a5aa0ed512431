"""Prometheus text exposition for node_exporter's textfile collector.

Metrics (all gauges; every series carries ``verb`` so that a ``check`` file
and a ``validate`` file in the same textfile directory never expose the same
series twice, which node_exporter rejects):

- ``nodetune_validate_busbw_gbps{node,peer,bytes,verb}``: busbw in GB/s
  (10^9 bytes/s, as nccl-tests reports it) per pair and message size, once
  from each node's side.
- ``nodetune_node_healthy{node,verb}``: 1 when the node's verdict is good, else 0.
- ``nodetune_check_status{node,check,verb}``: -1 skip, 0 pass, 1 warn, 2 fail,
  3 unknown (could not be assessed) (so ``>= 1`` is "needs a look" and ``== 2`` is
  "failed").
- ``nodetune_node_action{node,verb}``: what to do about the node, its rung on the ladder
  (:mod:`nodetune.action`): 0 none, 1 re-run, 2 reset-gpu,
  3 restart-fabric-manager, 4 reboot, 5 service (so ``>= 4`` is "take it out").
- ``nodetune_last_run_timestamp_seconds{verb}``: when the run started, Unix seconds.

prometheus_client renders the text format (its escaping of label values and
HELP text) and writes the file (``write_to_textfile``: a temp file beside it,
named so that the collector, which reads ``*.prom``, skips it, then a rename).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

from nodetune.action import Action
from nodetune.reports import model

CHECK_STATUS = {"skip": -1, "pass": 0, "warn": 1, "fail": 2, "unknown": 3}
ACTION_RANK = {a.value: a.rank for a in Action}

_HELP = {
    "nodetune_validate_busbw_gbps": (
        "bus bandwidth of a collective (label collective: all_reduce, all_gather, "
        "reduce_scatter, alltoall) a node measured with a peer at a message size, in GB/s "
        "(1e9 bytes per second, with nccl-tests' bus factor)"),
    "nodetune_node_healthy": "1 if nodetune's verdict for the node is good, else 0",
    "nodetune_check_status": "nodetune check result per node and check: -1 skip, 0 pass, "
                             "1 warn, 2 fail, 3 unknown (could not be assessed)",
    "nodetune_node_action": "what to do about the node: 0 none, 1 re-run, 2 reset-gpu, "
                            "3 restart-fabric-manager, 4 reboot, 5 service",
    "nodetune_last_run_timestamp_seconds": "Start of the last nodetune run, in Unix seconds",
    "nodetune_rdma_bw_gbps": "ib_write_bw average bandwidth of a node's RDMA device to a peer, "
                             "in Gb/s (memory: host or gpu)",
}
# fabric.rdma_bw[D] / [D/cuda]'s measured value: "392.51 Gb/s (host memory, 65536 B, with P)".
_RDMA_BW = re.compile(r"^fabric\.rdma_bw\[(?P<dev>[^]/]+)(?P<cuda>/cuda)?\]$")
_RDMA_MEASURED = re.compile(r"^(?P<gbps>[\d.]+) Gb/s \(.*, with (?P<peer>[^)]+)\)$")
_LABELS = {
    "nodetune_validate_busbw_gbps": ("node", "peer", "bytes", "collective", "verb"),
    "nodetune_node_healthy": ("node", "verb"),
    "nodetune_check_status": ("node", "check", "verb"),
    "nodetune_node_action": ("node", "verb"),
    "nodetune_last_run_timestamp_seconds": ("verb",),
    "nodetune_rdma_bw_gbps": ("node", "device", "peer", "memory", "verb"),
}


class _Families:
    """Gauges registered on first use, so that a family without samples is left out."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges: dict[str, Gauge] = {}

    def set(self, name: str, labels: Mapping[str, object], value: float) -> None:
        if name not in self._gauges:
            self._gauges[name] = Gauge(name, _HELP[name], labelnames=_LABELS[name],
                                       registry=self.registry)
        self._gauges[name].labels(**{k: str(v) for k, v in labels.items()}).set(value)


def registry_of(doc: Mapping[str, Any]) -> CollectorRegistry:
    """The metrics of a ``check`` or ``validate`` run record."""
    verb = str(doc.get("verb") or "validate")
    fams = _Families()
    seen: set[tuple[str, str, int]] = set()
    collective = model.collective(doc)
    for p in model.pairs_of(doc):
        for s in p.sizes:
            for node, peer in ((h, p.peer(h)) for h in p.hosts):
                # A node met in two rounds keeps its first measurement with that peer.
                if (node, peer, s.bytes) in seen:
                    continue
                seen.add((node, peer, s.bytes))
                fams.set("nodetune_validate_busbw_gbps",
                         {"node": node, "peer": peer, "bytes": s.bytes,
                          "collective": collective, "verb": verb}, s.busbw)
    for n in model.nodes_of(doc):
        fams.set("nodetune_node_healthy", {"node": n.name, "verb": verb},
                 1.0 if n.healthy else 0.0)
        if n.action in ACTION_RANK:  # check's verdicts carry one; validate's pairs do not
            fams.set("nodetune_node_action", {"node": n.name, "verb": verb},
                     float(ACTION_RANK[n.action]))
    for c in model.checks_of(doc):
        if c.status in CHECK_STATUS:  # a check named twice on a node: the last one counts
            fams.set("nodetune_check_status", {"node": c.node, "check": c.name, "verb": verb},
                     float(CHECK_STATUS[c.status]))
    for c in (*model.checks_of(doc), *model.checks_of(doc, "rdma_bw")):
        if (name := _RDMA_BW.match(c.name)) and (got := _RDMA_MEASURED.match(c.measured)):
            fams.set("nodetune_rdma_bw_gbps", {
                "node": c.node, "device": name["dev"], "peer": got["peer"],
                "memory": "gpu" if name["cuda"] else "host", "verb": verb}, float(got["gbps"]))
    fams.set("nodetune_last_run_timestamp_seconds", {"verb": verb},
             _started(doc.get("started")))
    return fams.registry


def to_text(doc: Mapping[str, Any]) -> str:
    """The textfile for a ``check`` or ``validate`` run record."""
    return generate_latest(registry_of(doc)).decode("utf-8")


def _started(value: object) -> float:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.now(UTC).timestamp()
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write the textfile atomically with prometheus_client (temp file beside it, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry_of(doc))
    return path
