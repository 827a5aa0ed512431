"""Real faults on one lab node, for fleet validation to find (`nodetune lab fault`).

Each fault is a real state of the container, not a mock: a token-bucket
filter on the fabric interface, sshd stopped, or a broken torch in that node's
own Python library path. ``clear`` undoes every one of them.
"""

from __future__ import annotations

import functools
import re
import shlex

from nodetune.errors import InputError, LabError
from nodetune.lab import config as lab_config
from nodetune.lab import health_faults, podman, signal_faults
from nodetune.lab import nodes as lab

# The fabric interface every lab node's ranks talk over (lab/nodes.py: eth1).
FABRIC_IFACE = "eth1"
DEFAULT_RATE = "200mbit"
_RATE = re.compile(r"^[1-9]\d{0,5}(kbit|mbit|gbit)$")
# A module of the node's own standard library directory comes before the shared
# venv's site-packages on sys.path, so it shadows torch on this node only.
TORCH_SHADOW = "/usr/lib/python3.11/torch.py"
_TORCH_SHADOW_TEXT = ('raise ImportError("torch is broken on this node '
                      '(nodetune lab fault broken-torch; clear with: nodetune lab fault NODE '
                      'clear)")\n')

FAULTS = {
    "slow-link": f"rate-limit {FABRIC_IFACE} with tc tbf (--rate, default {DEFAULT_RATE})",
    "sshd-stopped": "stop sshd (the node is unreachable over SSH)",
    "broken-torch": "make `import torch` fail in this node's Python (shadowing module)",
    **health_faults.FAULTS,
    **signal_faults.FAULTS,
    "clear": "undo every fault on the node",
}


def gbps(rate: str) -> float:
    """``392gbit`` -> 392.0 (Gb/s), for the rdma-port stand-in."""
    m = _RATE.match(rate)
    if not m:
        raise InputError(f"--rate {rate!r}: expected a rate like 200mbit, 50mbit or 1gbit")
    return int(rate[: -len(m[1])]) * {"kbit": 1e-6, "mbit": 1e-3, "gbit": 1.0}[m[1]]


def apply(node: str, kind: str, *, rate: str | None = None,
          ofed_version: str | None = None) -> str:
    """Put fault ``kind`` on lab node ``node``; return what was done, in words.

    Raises:
        InputError: unknown kind, bad rate or OFED version, or no such running lab node.
        LabError: podman could not carry it out.
    """
    if kind not in FAULTS:
        raise InputError(f"fault {kind!r}: choose one of {', '.join(FAULTS)}")
    if rate is not None:
        gbps(rate)  # a bad --rate stops here, before the node is touched
    try:  # and a bad --ofed-version
        ofed = signal_faults.ofed_version(ofed_version)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    running = {n.name for n in lab._list_nodes() if n.state == "running"}
    if node not in running:
        raise InputError(f"not a running node of lab {lab_config.NAME} "
                         f"(running: {', '.join(sorted(running)) or 'none'})", host=node)
    if kind == "clear":
        return "; ".join(clear(node)) or "no fault to clear"
    if kind == "rdma-port":
        return health_faults.apply(functools.partial(_exec, node), kind,
                                   gbps=gbps(rate) if rate else health_faults.PORT_GBPS)
    if kind in health_faults.FAULTS:
        return health_faults.apply(functools.partial(_exec, node), kind)
    if kind in signal_faults.FAULTS:
        return signal_faults.apply(functools.partial(_exec, node), kind, ofed=ofed)
    if kind == "slow-link":
        rate = rate or DEFAULT_RATE
        argv = ["tc", "qdisc", "replace", "dev", FABRIC_IFACE, "root", "tbf", "rate", rate,
                "burst", "256kbit", "latency", "100ms"]
        _exec(node, argv)
        return f"{FABRIC_IFACE} limited to {rate}: {shlex.join(argv)}"
    if kind == "sshd-stopped":
        _exec(node, ["systemctl", "stop", "ssh.service"])
        return "sshd stopped (systemctl stop ssh.service)"
    _exec(node, ["sh", "-c", f"printf %s {shlex.quote(_TORCH_SHADOW_TEXT)} > {TORCH_SHADOW}"])
    return f"`import torch` now fails on {node} ({TORCH_SHADOW})"


def clear(node: str) -> list[str]:
    """Undo every fault on ``node``; return what was undone."""
    undone = clear_slow_link(node)
    if _exec(node, ["systemctl", "is-active", "ssh.service"], check=False).strip() != "active":
        _exec(node, ["systemctl", "start", "ssh.service"])
        undone.append("sshd started")
    if _exec(node, ["test", "-e", TORCH_SHADOW], check=False, rc=True) == "0":
        _exec(node, ["rm", "-f", TORCH_SHADOW])
        undone.append("torch works again")
    run = functools.partial(_exec, node)
    return undone + health_faults.clear(run) + signal_faults.clear(run)


def clear_slow_link(node: str) -> list[str]:
    """Undo ``slow-link`` alone on ``node`` (the other faults stay); return what was undone."""
    qdisc = _exec(node, ["tc", "qdisc", "show", "dev", FABRIC_IFACE])
    if " tbf " not in f" {qdisc} ":
        return []
    _exec(node, ["tc", "qdisc", "del", "dev", FABRIC_IFACE, "root"])
    return [f"{FABRIC_IFACE} rate limit removed"]


def active(node: str) -> list[str]:
    """The faults in place on ``node`` now."""
    found = []
    if " tbf " in f" {_exec(node, ['tc', 'qdisc', 'show', 'dev', FABRIC_IFACE])} ":
        found.append("slow-link")
    if _exec(node, ["systemctl", "is-active", "ssh.service"], check=False).strip() != "active":
        found.append("sshd-stopped")
    if _exec(node, ["test", "-e", TORCH_SHADOW], check=False, rc=True) == "0":
        found.append("broken-torch")
    run = functools.partial(_exec, node)
    return found + health_faults.active(run) + signal_faults.active(run)


def _exec(node: str, argv: list[str], *, check: bool = True, rc: bool = False) -> str:
    proc = podman.run("exec", node, *argv, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise LabError(f"`{shlex.join(argv)}` failed: {proc.stderr.strip()[-300:]}", host=node)
    return str(proc.returncode) if rc else proc.stdout
