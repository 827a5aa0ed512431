"""Per-node verdicts: what `check` and a fleet `validate` conclude about each node.

One vocabulary for every consumer (the human table, report.json, JUnit,
Prometheus, Slurm drain/resume), so that a verdict means the same thing
wherever it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nodetune.action import Action


class NodeState(Enum):
    """A node's verdict after a run."""

    GOOD = "good"                # passed everything it was tested with
    BAD = "bad"                  # failed its own checks, or failed with a good partner
    UNRESOLVED = "unresolved"    # suspect, but too few good partners to decide
    UNREACHABLE = "unreachable"  # could not be reached or commanded (SSH, no python/torch)
    # Reached, nothing failed, but a check could not be assessed (a tool hung or crashed):
    # never good; exit 5; not drained for this alone unless asked.
    NOT_ASSESSED = "not_assessed"

    @property
    def order(self) -> int:
        """Sort key: the nodes an operator must look at come first."""
        return {"bad": 0, "unreachable": 1, "unresolved": 2, "not_assessed": 3,
                "good": 4}[self.value]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node's verdict, the reason in plain words, and who it was tested with."""

    node: str
    state: NodeState
    reason: str = ""
    partners: tuple[str, ...] = ()
    busbw_gbps: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # What to do about the node: the highest of its checks' actions (None: not judged
    # by checks, as a pair test's verdict).
    action: Action | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``nodes[NAME]``."""
        return {"verdict": self.state.value, "reason": self.reason,
                "partners": list(self.partners), "busbw_gbps": self.busbw_gbps,
                **({"action": self.action.value} if self.action is not None else {}),
                **({"details": dict(self.details)} if self.details else {})}


def worst_first(verdicts: Mapping[str, NodeVerdict]) -> list[NodeVerdict]:
    """Verdicts ordered bad → unreachable → unresolved → good, then by node name."""
    return sorted(verdicts.values(), key=lambda v: (v.state.order, v.node))


def group_verdicts(hosts: Sequence[str], *, passed: bool | None, reason: str = "",
                   culprit: str | None = None) -> dict[str, NodeVerdict]:
    """Every node's verdict after one test of a group of nodes (a pair is a group of two).

    A pass clears every node. A failure cannot say which node is bad, so every
    node is unresolved; an error that names one node (``culprit``, unreachable or
    unable to run the worker) makes that node unreachable and the others
    unresolved. ``passed`` None means the test did not finish.
    """
    pair = len(hosts) == 2
    out: dict[str, NodeVerdict] = {}
    for node in hosts:
        others = tuple(h for h in hosts if h != node)
        group = f"pair with {others[0]}" if pair else f"group of {len(hosts)}"
        if passed:
            state, why = NodeState.GOOD, (f"{group} passed" if pair else
                                          f"all_reduce across all {len(hosts)} nodes passed")
        elif culprit == node:
            state, why = NodeState.UNREACHABLE, reason
        elif culprit is not None:
            state, why = NodeState.UNRESOLVED, (
                f"{'partner' if pair else 'group member'} {culprit} failed: {reason}")
        else:
            state, why = NodeState.UNRESOLVED, (
                f"{group} failed, {'a pair alone' if pair else 'one group'} cannot tell "
                f"which node: {reason}")
        out[node] = NodeVerdict(node, state, why, partners=others)
    return out


def pair_verdicts(hosts: Sequence[str], *, passed: bool | None, reason: str = "",
                  culprit: str | None = None) -> dict[str, NodeVerdict]:
    """Verdicts of a lone pair test (``nodetune validate`` on two nodes):
    :func:`group_verdicts` of two hosts."""
    if len(hosts) != 2:
        raise ValueError(f"a pair is two hosts, not {len(hosts)}")
    return group_verdicts(hosts, passed=passed, reason=reason, culprit=culprit)
