"""What the node-local health check does to its node (pure: no I/O): drain, resume or
nothing, by the drain policy both nodetune writers share (:mod:`nodetune.slurm.policy`),
and the drain reason it writes (:mod:`nodetune.check.slurm_local` carries it out)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from nodetune.action import Action
from nodetune.check.model import NodeChecks
from nodetune.slurm.model import MAX_REASON_BYTES
from nodetune.slurm.policy import (
    HEALTHCHECK_PREFIX,
    Act,
    Whose,
    held_by_slurm,
    ruling,
    untested,
    writer_of,
)
from nodetune.slurm.state import SlurmNode

# This writer's own reason form (nodetune.slurm.policy); drains recorded in drained.json
# under the old form ("nodetune: ...") are still recognised, by their exact reason.
PREFIX = HEALTHCHECK_PREFIX


@dataclass(frozen=True, slots=True)
class Decision:
    """What this run does to its node, and why."""

    action: str   # "drain" | "resume" | "none"
    reason: str   # the drain reason set, or why nothing was done
    forget: bool = False  # the recorded drain is no longer ours (resumed, or taken over)
    checks: tuple[str, ...] = ()  # a drain: the checks it is for (recorded in drained.json)


def printable(text: str) -> str:
    """Control characters (newlines included) as spaces, runs of spaces as one."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def drain_reason(checks: NodeChecks) -> str:
    """``nodetune healthcheck: <check> <measured>, expected <expected>[; ...] [action:
    <action>]`` (the highest action of the node's checks, :mod:`nodetune.action`,
    kept whole when the rest is cut), at most 255 UTF-8 bytes."""
    if checks.error is not None:
        why = f"check could not run: {checks.error}"
    else:
        why = "; ".join([f"{r.name} {r.measured or '?'}, expected {r.expected or '?'}"
                         for r in checks.failures]
                        + [f"{r.name} not assessed" for r in checks.unknowns]) or "failed"
    action = checks.action if checks.error is None else Action.NONE
    tail = f" [action: {action.value}]" if action is not Action.NONE else ""
    why = printable(why)
    room = MAX_REASON_BYTES - len(PREFIX.encode()) - len(tail.encode())
    encoded = why.encode()
    if len(encoded) > room:
        why = encoded[:room - 3].decode(errors="ignore").rstrip() + "..."
    return PREFIX + why + tail


def decide(checks: NodeChecks, node: SlurmNode, owned: str | None,
           drained_for: Sequence[str] | None = None,
           not_run: Collection[str] = (), *, drain_unknown: bool = False) -> Decision:
    """The action for this node (pure: no I/O), by the drain policy both nodetune writers
    share (:func:`nodetune.slurm.policy.ruling`).

    ``owned`` is the reason this program recorded when it last drained the node,
    ``drained_for`` the checks it recorded that drain for (None: not recorded), ``not_run``
    the active checks this run did not run (:func:`nodetune.slurm.policy.untested`).

    A node with checks that could not be assessed (``unknown``: a tool hung or crashed)
    and no failure is neither drained nor resumed, unless ``drain_unknown``
    (``nodetune-healthcheck --drain-unknown``, the role's
    ``slurm_healthcheck_drain_unknown``) drains it as for a failure.
    """
    if checks.error is None and not checks.failures and checks.unknowns and not drain_unknown:
        said = ", ".join(r.name for r in checks.unknowns)
        return Decision("none", f"not assessed ({said}): neither drained nor resumed for "
                        "that alone (--drain-unknown drains it)")
    ours = owned is not None and "drain" in node.flags and node.reason == owned
    healthy = checks.error is None and not checks.failures and not checks.unknowns
    left = untested(drained_for or (), [(r.name, r.status.value) for r in checks.results],
                    not_run) if ours else ()
    if ours:
        whose = Whose.SELF
    elif not node.out_of_service:
        whose = Whose.NONE
    else:
        whose = Whose.OTHER if writer_of(node.reason) else Whose.PERSON
    act = ruling(node, whose, healthy=healthy)
    if healthy:
        if act is Act.RESUME and left:
            return Decision("none", f"drained for {', '.join(left)}, which this run did not "
                            "test")
        if act is Act.RESUME:
            return Decision("resume", "every check passed again", forget=True)
        if owned is not None and not ours:  # resumed or re-drained by someone else since
            return Decision("none", f"the drain is not nodetune's ({node.reason or 'none'})",
                            forget=True)
        if ours:
            return Decision("none", f"{node.display_state}: Slurm holds its state "
                            f"({held_by_slurm(node)}): not resumed now")
        return Decision("none", "every check passed")
    reason = drain_reason(checks)
    if act is Act.DRAIN:  # a renewed drain keeps the checks this run did not pass
        names = tuple(dict.fromkeys([*(r.name for r in (*checks.failures, *checks.unknowns)),
                                     *left]))
        return Decision("drain" if reason != node.reason else "none", reason, checks=names)
    return Decision("none", f"{node.display_state} ({node.reason or 'no reason'}): "
                    "left as it is", forget=owned is not None and not ours)
