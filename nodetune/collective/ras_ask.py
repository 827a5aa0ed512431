"""On a stall: ask NCCL's RAS on rank 0's node which ranks are missing, dead or in error.

When a timed NCCL phase stops making progress, before cleanup, the controller runs the
worker's ``ras`` verb on rank 0's node (:mod:`nodetune.collective.ras`, uploaded beside
the worker); its one ``ras`` event goes into the failure message and report.json's
``ras`` key. A rank RAS considers dead convicts its node: the error then names that
node, as a second-round partner would. RAS off, too old, or not applicable (gloo):
the message says so once and the run's verdict is today's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from nodetune.collective import ras
from nodetune.collective.answers import NodeProbe
from nodetune.collective.nodes import ANSWER_TIMEOUT, RunNode
from nodetune.collective.worker_cmd import WORKER_NAME
from nodetune.errors import NodetuneError
from nodetune.measure import protocol
from nodetune.remote.executor import Command

log = logging.getLogger(__name__)

# The worker's total bound on the conversation (RAS waits up to a third of it per leg
# for an unresponsive peer) made of short asks retried while RAS is busy
# (ras.ATTEMPT_S); SSH gets ANSWER_TIMEOUT more. Measured on 2x H200 (NCCL 2.28.9,
# benchmarks/ras_on_gpu.py, docs/benchmarks.md): with one rank's process stopped, RAS
# answered about every other short ask, and one long ask of 15 s or 40 s got nothing.
RAS_TIMEOUT_S = 40.0
NOT_APPLICABLE = "not applicable: the run uses gloo, not NCCL"


def _not_asked(reason: str) -> dict[str, Any]:
    return {"ok": False, "reason": reason}


def ask(node: RunNode, backend: str, env: Mapping[str, str]) -> dict[str, Any]:
    """What RAS on ``node`` (rank 0's) says, as :func:`nodetune.collective.ras.query` gives
    it, or why it was not asked. Never raises."""
    if backend != "nccl":
        return _not_asked(NOT_APPLICABLE)
    if env.get("NCCL_RAS_ENABLE", "").strip() == "0":
        return _not_asked("RAS off (NCCL_RAS_ENABLE=0 in the run's environment)")
    if node.container is not None:
        return _not_asked("not asked: the ranks run in a container (--image)")
    if node.runner is None or not node.tmpdir:
        return _not_asked("not asked: no SSH session to rank 0's node (a Slurm step)")
    if node.silent:
        return _not_asked("not asked: rank 0's node does not answer over SSH")
    argv = [node.plan.python, f"{node.tmpdir}/{WORKER_NAME}", "ras",
            "--timeout", f"{RAS_TIMEOUT_S:g}"]
    addr = env.get("NCCL_RAS_ADDR")
    if addr:
        try:
            ras.parse_addr(addr)
        except ValueError as exc:
            return _not_asked(f"not asked: NCCL_RAS_ADDR: {exc}")
        argv += ["--addr", addr]
    try:
        done = node.runner.run(Command(argv, cwd="/"), timeout=RAS_TIMEOUT_S + ANSWER_TIMEOUT)
    except (NodetuneError, OSError) as exc:
        return _not_asked(f"not asked: {exc}")
    event = protocol.last_events(done.stdout.splitlines()).get("ras")
    if event is None:
        return _not_asked(f"the worker gave no RAS answer (exit {done.exit_status})")
    return checked(event)


def _rank(doc: object, keys: Sequence[str], flags: Sequence[str]) -> dict[str, Any] | None:
    if not isinstance(doc, dict):
        return None
    out: dict[str, Any] = {"host": str(doc.get("host", ""))[:255]}
    for key in ("rank", "pid", "cuda_dev", "nvml_dev", "async_error", "init_state"):
        value = doc.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
        elif key in keys:
            out[key] = None
    for key in flags:
        out[key] = doc.get(key) is True
    return out


def checked(event: Mapping[str, Any]) -> dict[str, Any]:
    """The node's ``ras`` event rebuilt from known fields of known types (a node's output
    is not trusted to be well formed)."""
    if event.get("ok") is not True:
        return _not_asked(str(event.get("reason") or "RAS gave no reason")[:500])
    def listed(value: object) -> list[Any]:
        return value if isinstance(value, list) else []

    comms = []
    for comm in listed(event.get("communicators")):
        if not isinstance(comm, dict):
            continue
        who = ("rank", "pid", "cuda_dev")
        missing = [r for r in (_rank(x, who, ("unresponsive", "dead"))
                               for x in listed(comm.get("missing"))) if r]
        errors = [r for r in (_rank(x, (*who, "async_error", "init_state"), ("abort",))
                              for x in listed(comm.get("errors"))) if r]
        behind = []
        for x in listed(comm.get("behind")):
            r = _rank(x, who, ())
            ops = x.get("ops") if isinstance(x, dict) else None
            if r and isinstance(ops, dict):
                r["ops"] = {str(op)[:32]: [n[0], n[1]] for op, n in ops.items()
                            if isinstance(n, list) and len(n) == 2
                            and all(isinstance(v, int) for v in n)}
                behind.append(r)
        size, count = comm.get("size"), comm.get("missing_ranks_count")
        comms.append({"hash": str(comm.get("hash", ""))[:64],
                      "size": size if isinstance(size, int) else None,
                      "missing_ranks_count": count if isinstance(count, int) else None,
                      "missing": missing, "errors": errors, "behind": behind})
    attempts, note = event.get("attempts"), event.get("note")
    return {"ok": True, "addr": str(event.get("addr", ""))[:255],
            "nccl_version": str(event.get("nccl_version", ""))[:32],
            "healthy": not any(c["missing"] or c["errors"] or c["missing_ranks_count"]
                               for c in comms),
            "communicators": comms,
            **({"attempts": attempts} if isinstance(attempts, int) else {}),
            **({"note": note[:300]} if isinstance(note, str) and note else {})}


def from_sections(sections: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The nodes a failed run's ``ras`` section says hold a dead rank."""
    found = ((sections or {}).get("ras") or {}).get("dead_nodes") or ()
    return tuple(str(n) for n in found) if isinstance(found, list) else ()


def dead_nodes(result: Mapping[str, Any], nodes: Sequence[RunNode],
               probes: Sequence[NodeProbe]) -> list[str]:
    """The run's nodes holding a rank RAS considers dead (RAS names a node by the
    address its ranks bootstrap on: matched to the inventory address or the probe's)."""
    named = set(ras.dead_hosts(dict(result)))
    out = []
    for node, probe in zip(nodes, probes, strict=False):
        addresses = probe.raw.get("addresses")
        held = {node.plan.host.address,
                *(str(a) for a in (addresses if isinstance(addresses, list) else ()))}
        if named & held:
            out.append(node.name)
    return out


def attach(exc: NodetuneError, result: Mapping[str, Any], nodes: Sequence[RunNode],
           probes: Sequence[NodeProbe]) -> None:
    """Put what RAS said into ``exc``: its message, report.json's ``ras`` section (with
    ``dead_nodes``: the run's nodes holding a rank RAS considers dead), and (one such node)
    the node it names."""
    exc.message += "; " + ras.summary(dict(result))
    dead = dead_nodes(result, nodes, probes)
    section = dict(result)
    if dead:  # the fleet convicts these nodes directly (nodetune.fleet.planner.learn)
        section["dead_nodes"] = dead
    exc.sections = {**(exc.sections or {}), "ras": section}
    if len(dead) == 1:
        if exc.host not in (None, dead[0]):
            exc.message += f" (RAS considers a rank on {dead[0]} dead: it is named, not {exc.host})"
        exc.host = dead[0]
