"""Prometheus text exposition for node_exporter's textfile collector.

Metrics (all gauges; every series carries ``verb`` so that a ``check`` file
and a ``validate`` file in the same textfile directory never expose the same
series twice, which node_exporter rejects):

- ``nodetune_validate_busbw_gbps{node,peer,bytes,verb}``: busbw in GB/s
  (10^9 bytes/s, as nccl-tests reports it) per pair and message size, once
  from each node's side.
- ``nodetune_node_healthy{node,verb}``: 1 when the node's verdict is good, else 0.
- ``nodetune_check_status{node,check,verb}``: -1 skip, 0 pass, 1 warn, 2 fail
  (so ``>= 1`` is "needs a look" and ``== 2`` is "failed").
- ``nodetune_last_run_timestamp_seconds{verb}``: when the run started, Unix seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodetune.files import write_atomic
from nodetune.reports import model

CHECK_STATUS = {"skip": -1, "pass": 0, "warn": 1, "fail": 2}

_HELP = {
    "nodetune_validate_busbw_gbps": (
        "bus bandwidth of a collective (label collective: all_reduce, all_gather, "
        "reduce_scatter, alltoall) a node measured with a peer at a message size, in GB/s "
        "(1e9 bytes per second, with nccl-tests' bus factor)"),
    "nodetune_node_healthy": "1 if nodetune's verdict for the node is good, else 0",
    "nodetune_check_status": "nodetune check result per node and check: -1 skip, 0 pass, "
                             "1 warn, 2 fail",
    "nodetune_last_run_timestamp_seconds": "Start of the last nodetune run, in Unix seconds",
    "nodetune_rdma_bw_gbps": "ib_write_bw average bandwidth of a node's RDMA device to a peer, "
                             "in Gb/s (memory: host or gpu)",
}
# fabric.rdma_bw[D] / [D/cuda]'s measured value: "392.51 Gb/s (host memory, 65536 B, with P)".
_RDMA_BW = re.compile(r"^fabric\.rdma_bw\[(?P<dev>[^]/]+)(?P<cuda>/cuda)?\]$")
_RDMA_MEASURED = re.compile(r"^(?P<gbps>[\d.]+) Gb/s \(.*, with (?P<peer>[^)]+)\)$")


def escape_label(value: object) -> str:
    r"""A label value as the text format wants it: ``\``, ``"`` and newlines escaped."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _sample(name: str, labels: Mapping[str, object], value: float) -> str:
    inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
    if math.isnan(value):
        rendered = "NaN"
    elif math.isinf(value):
        rendered = "+Inf" if value > 0 else "-Inf"
    else:
        rendered = repr(float(value))
    return f"{name}{{{inner}}} {rendered}"


def _family(name: str, samples: Iterable[str]) -> list[str]:
    rows = list(samples)
    if not rows:
        return []
    return [f"# HELP {name} {_help(_HELP[name])}", f"# TYPE {name} gauge", *rows]


def to_text(doc: Mapping[str, Any]) -> str:
    """The textfile for a ``check`` or ``validate`` run record."""
    verb = str(doc.get("verb") or "validate")
    lines: list[str] = []
    busbw = []
    seen: set[tuple[str, str, int]] = set()
    collective = model.collective(doc)
    for p in model.pairs_of(doc):
        for s in p.sizes:
            for node, peer in (p.hosts, p.hosts[::-1]):
                # A node met in two rounds keeps its last measurement with that peer.
                if (node, peer, s.bytes) in seen:
                    continue
                seen.add((node, peer, s.bytes))
                busbw.append(_sample("nodetune_validate_busbw_gbps",
                                     {"node": node, "peer": peer, "bytes": s.bytes,
                                      "collective": collective, "verb": verb}, s.busbw))
    lines += _family("nodetune_validate_busbw_gbps", busbw)
    lines += _family("nodetune_node_healthy", (
        _sample("nodetune_node_healthy", {"node": n.name, "verb": verb}, 1.0 if n.healthy else 0.0)
        for n in model.nodes_of(doc)))
    checks = {}
    for c in model.checks_of(doc):
        if c.status in CHECK_STATUS:
            checks[(c.node, c.name)] = _sample(
                "nodetune_check_status", {"node": c.node, "check": c.name, "verb": verb},
                float(CHECK_STATUS[c.status]))
    lines += _family("nodetune_check_status", checks.values())
    rdma = []
    for c in model.checks_of(doc):
        if (name := _RDMA_BW.match(c.name)) and (got := _RDMA_MEASURED.match(c.measured)):
            rdma.append(_sample("nodetune_rdma_bw_gbps", {
                "node": c.node, "device": name["dev"], "peer": got["peer"],
                "memory": "gpu" if name["cuda"] else "host", "verb": verb}, float(got["gbps"])))
    lines += _family("nodetune_rdma_bw_gbps", rdma)
    lines += _family("nodetune_last_run_timestamp_seconds", [_sample(
        "nodetune_last_run_timestamp_seconds", {"verb": verb}, _started(doc.get("started")))])
    return "\n".join(lines) + "\n"


def _started(value: object) -> float:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.now(UTC).timestamp()
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write the textfile atomically (temp file in the same directory, then rename)."""
    write_atomic(path, to_text(doc))
    return path
