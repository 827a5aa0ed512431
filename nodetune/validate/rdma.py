"""``validate --rdma-bw``: after a pair's all_reduce, perftest's ``ib_write_bw`` between the
two nodes for every ACTIVE RDMA port of each (``fabric.rdma_bw[D]``, and ``[D/cuda]`` where
both nodes have GPUs and ``nvidia_peermem``).

Each node in turn is the client of a run and the other node serves it, so each result is
the node's own port, measured with the partner. perftest's connection data goes over the
partner's data address (``nodetune_validate_master_addr``, else its ``ansible_host``), the
bytes over the RDMA port. The runs and their clean-up are :mod:`nodetune.check.rdma_peer`'s;
the pass mark is :mod:`nodetune.check.rdma_bw`'s (0.9 x the port's rate). A node with no
ACTIVE port, or without ``ib_write_bw`` (on it or its partner), gets a skip with the reason,
never a pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodetune.ansible.inventory import Host
from nodetune.check import health, rdma_bw, rdma_peer
from nodetune.check.model import CheckResult, Status, failed, skipped
from nodetune.errors import InputError, NodetuneError
from nodetune.remote import ssh
from nodetune.validate.plan import VAR_MASTER, checked_address
from nodetune.verdicts import NodeState, NodeVerdict

NAME = rdma_peer.NAME
# One read-only look per node: is ib_write_bw there, can it use GPU memory, and every RDMA
# port under the sysfs class directory $1 (device, port, state, rate; tab-separated).
_PROBE = r"""
command -v ib_write_bw >/dev/null 2>&1 && echo tool
[ -d /sys/module/nvidia_peermem ] && nvidia-smi -L >/dev/null 2>&1 && echo cuda
for p in "$1"/*/ports/*; do
  [ -r "$p/state" ] || continue
  d=${p%/ports/*}
  printf 'port\t%s\t%s\t%s\t%s\n' "${d##*/}" "${p##*/}" "$(cat "$p/state")" \
    "$(cat "$p/rate" 2>/dev/null)"
done
exit 0
"""


@dataclass(frozen=True, slots=True)
class NodeRdma:
    """What one node offers ib_write_bw."""

    tool: bool                          # ib_write_bw is on its PATH
    cuda: bool                          # GPUs and nvidia_peermem: GPU memory too
    ports: tuple[Mapping[str, str], ...]  # {device, port, state, rate}

    @property
    def active(self) -> tuple[Mapping[str, str], ...]:
        """The ACTIVE ports."""
        return tuple(p for p in self.ports if "ACTIVE" in p["state"])


def parse_probe(text: str) -> NodeRdma:
    """The probe's output -> :class:`NodeRdma`."""
    lines = text.splitlines()
    ports = []
    for line in lines:
        parts = line.split("\t")
        if parts[0] == "port" and len(parts) == 5:
            ports.append(dict(zip(("device", "port", "state", "rate"), parts[1:], strict=True)))
    return NodeRdma("tool" in lines, "cuda" in lines, tuple(ports))


def probe(session: ssh.Session, host: Host, *, timeout: float) -> NodeRdma:
    """Read the node's ib_write_bw, GPUDirect and RDMA ports (``nodetune_rdma_sysfs``)."""
    root = health.inputs(host).rdma_sysfs
    res = session.run(["sh", "-c", _PROBE, "sh", root], timeout=timeout)
    return parse_probe(res.stdout)


def data_address(host: Host) -> str:
    """Where the partner reaches ``host`` for perftest's connection data."""
    var = host.vars.get(VAR_MASTER)
    return checked_address(str(var), VAR_MASTER, host.name) if var else host.address


def judge_node(node: str, mine: NodeRdma, peer: str, theirs: NodeRdma,
               measure: Callable[[Sequence[Mapping[str, str]], bool], list[CheckResult]]
               ) -> list[CheckResult]:
    """``node``'s results: skips with the reason, or ``measure(active ports, cuda)``."""
    if not mine.active:
        found = ", ".join(f"{p['device']}/{p['port']} {p['state']}" for p in mine.ports)
        return [skipped(NAME, f"{node}: no ACTIVE RDMA port to measure"
                        + (f" ({found})" if found else ""), source=rdma_bw.SOURCE)]
    for host, side in ((node, mine), (peer, theirs)):
        if not side.tool:
            return [skipped(NAME, f"ib_write_bw (perftest) is not installed on {host}",
                            source=rdma_bw.SOURCE)]
    return measure(mine.active, mine.cuda and theirs.cuda)


def measure_pair(a: Host, b: Host, *, timeout: float, accept_new_host_keys: bool,
                 progress: Callable[[str], None] = lambda _m: None
                 ) -> dict[str, list[CheckResult]]:
    """fabric.rdma_bw of both nodes of a pair, each the client of its own ports' runs.

    Raises:
        SSHError, NodeTimeout: a node could not be reached or a run hung (both sides of a
            run are ended first).
    """
    sessions: dict[str, ssh.Session] = {}
    try:
        for h in (a, b):
            sessions[h.name] = ssh.connect(h, accept_new_host_keys=accept_new_host_keys,
                                           timeout=min(timeout, 30.0))
        seen = {h.name: probe(sessions[h.name], h, timeout=timeout) for h in (a, b)}
        out: dict[str, list[CheckResult]] = {}
        for node, peer in ((a, b), (b, a)):
            def run(ports: Sequence[Mapping[str, str]], cuda: bool,
                    node: Host = node, peer: Host = peer) -> list[CheckResult]:
                progress(f"ib_write_bw {node.name} -> {peer.name}: "
                         + ", ".join(f"{p['device']}/{p['port']}" for p in ports))
                return rdma_peer.judge_with_peer(
                    sessions[node.name], sessions[peer.name], peer=peer.name,
                    peer_addr=data_address(peer), ports=ports, cuda=cuda, timeout=timeout)
            out[node.name] = judge_node(node.name, seen[node.name], peer.name,
                                        seen[peer.name], run)
        return out
    finally:
        for s in sessions.values():
            s.close()


def measure_or_fail(a: Host, b: Host, *, timeout: float, accept_new_host_keys: bool,
                    progress: Callable[[str], None] = lambda _m: None
                    ) -> dict[str, list[CheckResult]]:
    """:func:`measure_pair`; a node that could not be reached or whose run hung fails."""
    try:
        return measure_pair(a, b, timeout=timeout, accept_new_host_keys=accept_new_host_keys,
                            progress=progress)
    except InputError:
        raise
    except NodetuneError as exc:
        blamed = [h.name for h in (a, b) if h.name == exc.host] or [a.name, b.name]
        return {h.name: [failed(NAME, "no result", "a bandwidth", rdma_bw.SOURCE,
                                f"{exc.host or 'pair'}: {exc.message}")]
                if h.name in blamed else [] for h in (a, b)}


def failed_reason(node: str, results: Sequence[CheckResult]) -> str | None:
    """``rdma_bw: ...`` naming the node's failing ports, measured vs expected; None if none."""
    bad = [r for r in results if r.status is Status.FAIL]
    if not bad:
        return None
    return f"{node}: " + "; ".join(
        f"{r.name} {r.measured}, expected {r.expected}"
        + (f" ({r.message})" if r.message and r.measured == "no result" else "") for r in bad)


def apply_verdicts(verdicts: Mapping[str, NodeVerdict],
                   results: Mapping[str, Sequence[CheckResult]]) -> dict[str, NodeVerdict]:
    """A node whose port fell below the pass mark is bad, whatever its all_reduce did."""
    out = dict(verdicts)
    for node, rows in results.items():
        reason = failed_reason(node, rows)
        if reason is None or node not in out:
            continue
        v = out[node]
        if v.state is NodeState.BAD:
            out[node] = dataclasses.replace(v, reason=f"{v.reason}; {reason}")
        elif v.state is not NodeState.UNREACHABLE:
            out[node] = dataclasses.replace(v, state=NodeState.BAD, reason=reason)
    return out


def section(results: Mapping[str, Sequence[CheckResult]]) -> dict[str, list[dict[str, str]]]:
    """report.json's ``rdma_bw``: every node's results, failures first."""
    return {node: [r.to_dict() for r in sorted(rows, key=lambda r: r.status.order)]
            for node, rows in results.items()}
