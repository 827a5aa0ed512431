"""Per-node verdicts from a fleet's pair outcomes, the nodes Slurm leaves alone, and the
run's exit code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodetune.errors import ExitCode
from nodetune.fleet.planner import FleetSpec, Knowledge, Outcome, PairOutcome, learn
from nodetune.verdicts import NodeState, NodeVerdict


def decide(spec: FleetSpec, outcomes: Sequence[PairOutcome], *,
           preflight: Mapping[str, NodeVerdict] | None = None) -> dict[str, NodeVerdict]:
    """Every node's verdict: the preflight ones as given, then what the pairs prove.

    Nodes under test always get a verdict; a ``--partners`` node only once it was
    paired. A node that passed with anyone is good, whatever else happened.
    """
    knowledge = learn(spec, outcomes)
    verdicts: dict[str, NodeVerdict] = dict(preflight or {})
    by_node: dict[str, list[PairOutcome]] = {}
    for o in sorted(outcomes, key=lambda o: o.round):
        for h in o.hosts:
            by_node.setdefault(h, []).append(o)
    for node in (*spec.nodes, *(p for p in spec.partners if p in by_node)):
        if node in verdicts:
            continue
        mine = by_node.get(node, [])
        partners = tuple(dict.fromkeys(_other(o, node) for o in mine))
        state, reason, busbw = _judge(node, mine, spec, knowledge, len(outcomes) > 0)
        verdicts[node] = NodeVerdict(node, state, reason, partners, busbw)
    return verdicts


def _judge(node: str, mine: Sequence[PairOutcome], spec: FleetSpec, k: Knowledge,
           ran: bool) -> tuple[NodeState, str, float | None]:
    passes = [o for o in mine if o.passed]
    if node in k.good:
        best = max(passes, key=lambda o: o.busbw_gbps or 0.0)
        text = f"passed with {_other(passes[0], node)} (round {passes[0].round})"
        fails = [o for o in mine if not o.passed]
        if fails:
            text += "; " + "; ".join(
                f"{_failed(o)} with {_other(o, node)} (round {o.round}), "
                + (f"put down to {_other(o, node)}" if _other(o, node) in k.bad
                   else "never blamed on a node that passed")
                for o in fails)
        return NodeState.GOOD, text, best.busbw_gbps
    if node in k.unreachable:
        o = next(o for o in mine if node in o.unreachable)
        return NodeState.UNREACHABLE, f"round {o.round}: {o.reason}", None
    if node in k.bad:
        o = k.bad[node]
        other = _other(o, node)
        if node in o.dead:
            return (NodeState.BAD, f"{_failed(o)} with {other}, round {o.round}: NCCL's RAS "
                    f"considers a rank on it dead: {o.reason}", o.busbw_gbps)
        why = "a known-good partner" if other in spec.partners and other not in k.good else "good"
        return (NodeState.BAD, f"{_failed(o)} with {other} ({why}), round {o.round}"
                + (f": {o.reason}" if o.reason else ""), o.busbw_gbps)
    if node in k.suspect_partners:
        return (NodeState.UNRESOLVED,
                "suspect partner: failed with " + " and ".join(k.suspect_partners[node])
                + ", different nodes under test", _best(mine))
    if node in spec.partners:
        o = mine[0]
        return (NodeState.GOOD, f"known-good partner (--partners); {_failed(o)} once, with "
                f"{_other(o, node)}, which is blamed for it", _best(mine))
    if not mine:
        if spec.partners:
            why = "every known-good partner was busy or suspect"
        else:
            why = "odd node out of round 1" if ran else "no other node to pair with"
        return NodeState.UNRESOLVED, f"not tested: {why}, and no good partner was free", None
    last = mine[-1]
    good_left = len(k.good)
    text = (f"{_failed(last)} with {_other(last, node)} (round {last.round})"
            + (f": {last.reason}" if last.reason else "")
            + f"; no good partner it had not met was free ({good_left} good node"
            + ("s" if good_left != 1 else "") + " in all)")
    return NodeState.UNRESOLVED, text, _best(mine)


def _failed(o: PairOutcome) -> str:
    return {Outcome.FAIL: "failed", Outcome.ERROR: "crashed",
            Outcome.TIMEOUT: "hung", Outcome.PASS: "passed"}[o.outcome]


def _other(o: PairOutcome, node: str) -> str:
    return o.hosts[1] if o.hosts[0] == node else o.hosts[0]


def _best(mine: Sequence[PairOutcome]) -> float | None:
    values = [o.busbw_gbps for o in mine if o.busbw_gbps is not None]
    return max(values) if values else None


def image_held(verdicts: Mapping[str, NodeVerdict],
               outcomes: Sequence[PairOutcome]) -> dict[str, str]:
    """The nodes Slurm leaves alone after the fleet, and why: those not proven good or bad
    whose pairs failed for the training image (missing, checklist, its container's step
    hung), which says nothing of the nodes, even under --drain-unreachable."""
    faults = {h: o.reason for o in outcomes if o.image_fault for h in o.hosts}
    return {n: f"not drained: the failure is the training image's, not the node's: "
               f"{faults[n]}" for n, v in verdicts.items()
            if n in faults and v.state is NodeState.UNRESOLVED}


def exit_code(verdicts: Mapping[str, NodeVerdict], outcomes: Sequence[PairOutcome]) -> ExitCode:
    """1 if any node is bad; else 3 if any is unreachable; else 4 if a pair hung; else 1 if
    any node is unresolved; else 0."""
    states = {v.state for v in verdicts.values()}
    if NodeState.BAD in states:
        return ExitCode.CHECK_FAILED
    if NodeState.UNREACHABLE in states:
        return ExitCode.INFRASTRUCTURE
    if any(o.outcome is Outcome.TIMEOUT for o in outcomes):
        return ExitCode.TIMEOUT
    if NodeState.UNRESOLVED in states:
        return ExitCode.CHECK_FAILED
    return ExitCode.OK
