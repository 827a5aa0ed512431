"""``validate --rdma-bw``: after a pair's all_reduce, perftest's ``ib_write_bw`` between the
two nodes for every ACTIVE RDMA port of each (``fabric.rdma_bw[D]``, and ``[D/cuda]`` where
both nodes have GPUs and ``nvidia_peermem``).

Each node in turn is the client of a run and the other node serves it, on the port of the
same name, so a port is measured only where it is ACTIVE on both nodes. perftest's
connection data goes over the partner's data address (``nodetune_validate_master_addr``,
else its ``ansible_host``), the bytes over the RDMA port. The runs and their clean-up are
:mod:`nodetune.measure.rdma_peer`'s; the pass mark is :mod:`nodetune.measure.rdma_bw`'s, 0.9 x
the rate of the slower of the two ports (a link runs at its slower end). A node with no
ACTIVE port, or without ``ib_write_bw`` (on it or its partner), gets a skip with the
reason, never a pass. A run that measured nothing for a node says so
(:func:`unmeasured_note`: the summary and report.json's ``rdma_bw_note``); where the
pair is expected to run over InfiniBand/RoCE (``--expect-transport ib``, or either
node's ``nodetune_validate_expect_transport: ib``) such a node fails ``fabric.rdma_bw``
instead, which leaves the pair unresolved (exit 1), like a port below the mark.

ib_write_bw between two nodes cannot tell which end (HCA, cable, switch port) is slow, so a
result below the mark leaves both nodes of the pair unresolved (exit 1), never bad: no
healthy partner is drained for it. ``check --rdma-peer HOST`` against a known-good peer
names the slow node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodetune.ansible.inventory import Host
from nodetune.collective.addresses import VAR_MASTER, checked_address
from nodetune.collective.plan import VAR_EXPECT
from nodetune.errors import InputError, NodetuneError
from nodetune.measure import node_inputs, rdma_bw, rdma_peer
from nodetune.measure.result import CheckResult, Status, failed, skipped
from nodetune.remote.executor import Command, NodeRunner
from nodetune.remote.ssh_executor import SshExecutor
from nodetune.verdicts import NodeState, NodeVerdict

NAME = rdma_peer.NAME
NO_ACTIVE = "no ACTIVE RDMA port to measure"
NOTHING = "nothing measured"
# One read-only look per node: is ib_write_bw there, can it use GPU memory, and every RDMA
# port under the sysfs class directory $1 (device, port, state, rate; tab-separated).
# sh, not node_facts' rdma_ports (the roles' and check's reading of the ports): it needs no
# Python on the node; test_validate_rdma holds the two to one answer on sysfs's layout.
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


def probe(runner: NodeRunner, host: Host, *, timeout: float) -> NodeRdma:
    """Read the node's ib_write_bw, GPUDirect and RDMA ports (``nodetune_rdma_sysfs``)."""
    root = node_inputs.inputs(host).rdma_sysfs
    res = runner.run(Command(["sh", "-c", _PROBE, "sh", root]), timeout=timeout)
    return parse_probe(res.stdout)


def data_address(host: Host) -> str:
    """Where the partner reaches ``host`` for perftest's connection data."""
    var = host.vars.get(VAR_MASTER)
    return checked_address(str(var), VAR_MASTER, host.name) if var else host.address


def _slower(a: Mapping[str, str], b: Mapping[str, str]) -> Mapping[str, str]:
    """Port ``a`` with the rate of the slower of ``a`` and ``b`` (an unknown rate loses)."""
    ra, rb = rdma_bw.rate_gbps(a.get("rate")), rdma_bw.rate_gbps(b.get("rate"))
    return {**a, "rate": b["rate"]} if rb is not None and (ra is None or rb < ra) else a


def judge_node(node: str, mine: NodeRdma, peer: str, theirs: NodeRdma,
               measure: Callable[[Sequence[Mapping[str, str]], bool], list[CheckResult]]
               ) -> list[CheckResult]:
    """``node``'s results: skips with the reason, or ``measure(ports, cuda)`` for the ports
    ACTIVE on both nodes, each with the slower end's rate (the pass mark's)."""
    if not mine.active:
        found = ", ".join(f"{p['device']}/{p['port']} {p['state']}" for p in mine.ports)
        return [skipped(NAME, f"{node}: {NO_ACTIVE}"
                        + (f" ({found})" if found else ""), source=rdma_bw.SOURCE)]
    for host, side in ((node, mine), (peer, theirs)):
        if not side.tool:
            return [skipped(NAME, f"ib_write_bw (perftest) is not installed on {host}",
                            source=rdma_bw.SOURCE)]
    other = {(p["device"], p["port"]): p for p in theirs.ports}
    joint, out = [], []
    for p in mine.active:
        q = other.get((p["device"], p["port"]))
        if q is not None and "ACTIVE" in q["state"]:
            joint.append(_slower(p, q))
            continue
        out.append(skipped(f"{NAME}[{p['device']}]",
                           f"{peer}'s {p['device']}/{p['port']} is "
                           f"{q['state'] if q else 'absent'}: not measured with {node}'s",
                           source=rdma_bw.SOURCE))
    return (measure(joint, mine.cuda and theirs.cuda) if joint else []) + out


def measure_pair(a: Host, b: Host, *, timeout: float, accept_new_host_keys: bool,
                 progress: Callable[[str], None] = lambda _m: None
                 ) -> dict[str, list[CheckResult]]:
    """fabric.rdma_bw of both nodes of a pair, each the client of its own ports' runs.

    Raises:
        SSHError, NodeTimeout: a node could not be reached or a run hung (both sides of a
            run are ended first).
    """
    over = SshExecutor({})
    try:
        runners = {h.name: over.add(h, accept_new_host_keys=accept_new_host_keys,
                                    timeout=min(timeout, 30.0)) for h in (a, b)}
        seen = {h.name: probe(runners[h.name], h, timeout=timeout) for h in (a, b)}
        out: dict[str, list[CheckResult]] = {}
        for node, peer in ((a, b), (b, a)):
            def run(ports: Sequence[Mapping[str, str]], cuda: bool,
                    node: Host = node, peer: Host = peer) -> list[CheckResult]:
                progress(f"ib_write_bw {node.name} -> {peer.name}: "
                         + ", ".join(f"{p['device']}/{p['port']}" for p in ports))
                return rdma_peer.judge_with_peer(
                    runners[node.name], runners[peer.name], peer=peer.name,
                    peer_addr=data_address(peer), ports=ports, cuda=cuda, timeout=timeout)
            out[node.name] = judge_node(node.name, seen[node.name], peer.name,
                                        seen[peer.name], run)
        return out
    finally:
        over.close()


def expects_ib(option: str | None, hosts: Sequence[Host]) -> bool:
    """Whether the pair must run over InfiniBand/RoCE: ``--expect-transport ib``, else
    either node's ``nodetune_validate_expect_transport`` (the stricter of the two)."""
    if option:
        return option.lower() == "ib"
    return any(str(h.vars.get(VAR_EXPECT) or "").lower() == "ib" for h in hosts)


def measured(rows: Sequence[CheckResult]) -> bool:
    """Whether ib_write_bw gave ``rows`` a result (pass or fail), not only skips."""
    return any(r.status in (Status.PASS, Status.FAIL) and r.measured != NOTHING
               for r in rows)


def measured_nodes(results: Mapping[str, Sequence[CheckResult]]) -> list[str]:
    """The nodes of ``results`` (node: its ib_write_bw rows) that ib_write_bw measured."""
    return [node for node, rows in results.items() if measured(rows)]


def _no_active(node: str, rows: Sequence[CheckResult]) -> bool:
    """Whether ``rows`` say that ``node`` itself has no ACTIVE port."""
    return any(r.message.startswith(f"{node}: {NO_ACTIVE}") for r in rows)


def unmeasured_note(results: Mapping[str, Sequence[CheckResult]]) -> str | None:
    """``ib_write_bw: nothing measured: no ACTIVE port on A, B`` (and why for each other
    node ib_write_bw gave no result); None when every node has a result."""
    empty = sorted(n for n, rows in results.items() if not measured(rows))
    if not empty:
        return None
    no_port = [n for n in empty if _no_active(n, results[n])]
    why = [f"no ACTIVE port on {', '.join(no_port)}"] if no_port else []
    for node in empty:
        if node in no_port:
            continue
        said = [r.message for r in results[node] if r.status is Status.SKIP and r.message]
        why.append(f"{node}: {'; '.join(said) if said else 'no port ACTIVE on both nodes'}")
    head = ("ib_write_bw: nothing measured" if len(empty) == len(results)
            else f"ib_write_bw: nothing measured for {', '.join(empty)}")
    return f"{head}: {'; '.join(why)}"


def _demand_ib(results: dict[str, list[CheckResult]]) -> dict[str, list[CheckResult]]:
    """The pair was to run over InfiniBand/RoCE and nothing shows that it can: a node with
    no ACTIVE port fails ``fabric.rdma_bw``; where neither lacks one (no port ACTIVE on
    both, no ib_write_bw), each node with no result does."""
    empty = [n for n, rows in results.items()
             if not measured(rows) and not any(r.status is Status.FAIL for r in rows)]
    own = [n for n in empty if _no_active(n, results[n])]
    out = dict(results)
    for node in own or empty:
        rows = results[node]
        why = "; ".join(r.message for r in rows if r.message) or "no port ACTIVE on both"
        out[node] = [failed(NAME, NOTHING, "a measured ACTIVE RDMA port (--expect-transport "
                            "ib)", rdma_bw.SOURCE, why), *rows]
    return out


def measure_or_fail(a: Host, b: Host, *, timeout: float, accept_new_host_keys: bool,
                    progress: Callable[[str], None] = lambda _m: None,
                    expect_transport: str | None = None,
                    ) -> dict[str, list[CheckResult]]:
    """:func:`measure_pair`; a node that could not be reached or whose run hung fails, and
    so does one with nothing measured where the pair must run over InfiniBand/RoCE
    (:func:`expects_ib` of ``expect_transport``, the ``--expect-transport`` option)."""
    try:
        found = measure_pair(a, b, timeout=timeout, accept_new_host_keys=accept_new_host_keys,
                             progress=progress)
    except InputError:
        raise
    except NodetuneError as exc:
        blamed = [h.name for h in (a, b) if h.name == exc.host] or [a.name, b.name]
        return {h.name: [failed(NAME, "no result", "a bandwidth", rdma_bw.SOURCE,
                                f"{exc.host or 'pair'}: {exc.message}")]
                if h.name in blamed else [] for h in (a, b)}
    return _demand_ib(found) if expects_ib(expect_transport, (a, b)) else found


def failed_reason(node: str, results: Sequence[CheckResult]) -> str | None:
    """``rdma_bw: ...`` naming the node's failing ports, measured vs expected; None if none."""
    bad = [r for r in results if r.status is Status.FAIL]
    if not bad:
        return None
    return f"{node}: " + "; ".join(
        f"{r.name} {r.measured}, expected {r.expected}"
        + (f" ({r.message})" if r.message and r.measured in ("no result", NOTHING) else "")
        for r in bad)


CANNOT_TELL = "ib_write_bw between two nodes cannot tell which end is slow"


def apply_verdicts(verdicts: Mapping[str, NodeVerdict],
                   results: Mapping[str, Sequence[CheckResult]], *,
                   pair: bool = False) -> dict[str, NodeVerdict]:
    """A node with a port below the pass mark is unresolved, whatever its all_reduce did
    (:data:`CANNOT_TELL`); in a lone pair (``pair``) its partner is too. A bad node stays
    bad, the reason added; an unreachable one stays as it is."""
    out = dict(verdicts)
    reasons = {n: r for n, rows in results.items() if (r := failed_reason(n, rows))}
    for node, v in verdicts.items():
        reason = reasons.get(node)
        if reason is None and pair and reasons:
            reason = "partner " + "; ".join(reasons.values())
        if reason is None or v.state is NodeState.UNREACHABLE:
            continue
        if v.state is NodeState.GOOD:
            out[node] = dataclasses.replace(v, state=NodeState.UNRESOLVED,
                                            reason=f"{reason} ({CANNOT_TELL})")
        else:
            out[node] = dataclasses.replace(v, reason=f"{v.reason}; {reason}")
    return out


def section(results: Mapping[str, Sequence[CheckResult]]) -> dict[str, list[dict[str, str]]]:
    """report.json's ``rdma_bw``: every node's results, failures first."""
    return {node: [r.to_dict() for r in sorted(rows, key=lambda r: r.status.order)]
            for node, rows in results.items()}


def note_section(results: Mapping[str, Sequence[CheckResult]]) -> dict[str, str]:
    """report.json's ``rdma_bw_note`` (:func:`unmeasured_note`), where there is one."""
    note = unmeasured_note(results)
    return {"rdma_bw_note": note} if note else {}
