"""The reasons nodetune writes, the scontrol commands, and who drained a node.

A reason is ``nodetune <verb> <run id>: <why>``; a node is nodetune's only when the
run record that reason names says it drained that node with that very reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from nodetune import records
from nodetune.errors import InputError
from nodetune.slurm.model import MAX_REASON_BYTES, OWNED_REASON, RunLookup
from nodetune.slurm.policy import PassMark
from nodetune.slurm.state import SlurmNode

# --- reasons and commands ----------------------------------------------------------


def drain_reason(why: str, *, kind: str, run_id: str, tail: str = "") -> str:
    """``nodetune <kind> <run_id>: <why>``, one printable line of at most 255 UTF-8 bytes.

    ``kind`` is the verb whose verdict drains (``check``, ``validate``): only a
    pass of the same kind lifts the drain. Control characters (newlines
    included) become spaces and runs of spaces one space, so that a reason
    taken from a node's own output stays one line; ``why`` is cut (with "...")
    so that the test and the run id always survive, and so that ``tail`` (the node's
    action, `` [action: reboot]``) is kept whole after it.
    """
    head = f"nodetune {_printable(kind)} {_printable(run_id)}: "
    why = _printable(why) or "failed"
    tail = _printable(tail)
    tail = f" {tail}" if tail else ""
    room = MAX_REASON_BYTES - len(head.encode()) - len(tail.encode())
    if room < 8:
        raise InputError(f"run id {run_id!r} leaves no room for a Slurm drain reason")
    encoded = why.encode()
    if len(encoded) > room:
        why = encoded[:room - 3].decode(errors="ignore").rstrip() + "..."
    return head + why + tail


def _printable(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def drain_command(slurm_node: str, reason: str) -> tuple[str, ...]:
    """``scontrol update nodename=N state=drain reason=R`` as an argument list."""
    return ("scontrol", "update", f"nodename={slurm_node}", "state=drain", f"reason={reason}")


def reboot_command(slurm_node: str, reason: str) -> tuple[str, ...]:
    """``scontrol reboot ASAP nextstate=RESUME reason=R N`` as an argument list: Slurm
    drains the node with ``reason``, lets its jobs end, reboots it and returns it to
    service (the form playbooks/reboot.yml uses)."""
    return ("scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", slurm_node)


def resume_command(slurm_node: str) -> tuple[str, ...]:
    """``scontrol update nodename=N state=resume`` as an argument list."""
    return ("scontrol", "update", f"nodename={slurm_node}", "state=resume")


# --- who drained a node ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """The nodetune run that drained a node, as its reason claims it; once proven, what
    its record says of the drain."""

    kind: str    # the verb: check | validate
    run_id: str
    mark: PassMark | None = None   # the pass mark the drain was judged by (validate)
    mark_recorded: bool = False    # whether the record says (older records do not)
    ended: float | None = None     # when the draining run ended (epoch s), if recorded
    checks: tuple[str, ...] | None = None  # a check drain's failed checks (None: older record)
    dcgm_level: int | None = None  # a check drain's --dcgm-level (None: not recorded)

    @property
    def label(self) -> str:
        """``nodetune validate <run id>``, for messages."""
        return f"nodetune {self.kind} {self.run_id}"


def claimed_owner(reason: str) -> Owner | None:
    """The run a reason names in nodetune's form, unproven (anyone can type it)."""
    match = OWNED_REASON.match(reason)
    return Owner(kind=match["kind"], run_id=match["run"]) if match else None


def proven_owner(node: SlurmNode, runs: RunLookup = records.find_run) -> Owner | None:
    """The run that drained ``node``, if this site's run record of it proves it.

    The reason must name a run in nodetune's form, that run's record must be
    one of this site's (under the runs directory), of the verb the reason
    names, and its Slurm actions must show it draining this node with this
    exact reason. A reason that only looks like nodetune's proves nothing.
    """
    owner = claimed_owner(node.reason)
    if owner is None:
        return None
    doc = runs(owner.run_id)
    if doc is None or doc.get("verb") != owner.kind or doc.get("run_id") != owner.run_id:
        return None
    section = doc.get("slurm")
    actions = section.get("actions") if isinstance(section, Mapping) else None
    for a in actions if isinstance(actions, list) else ():
        if (isinstance(a, Mapping) and a.get("action") == "drain" and not a.get("dry_run")
                and not a.get("error") and a.get("slurm_node") == node.name
                and a.get("reason") == node.reason):
            names, level = a.get("failed_checks"), a.get("dcgm_level")
            return Owner(owner.kind, owner.run_id, mark=PassMark.from_dict(a.get("pass_mark")),
                         mark_recorded="pass_mark" in a, ended=_ended(doc),
                         checks=tuple(str(n) for n in names) if isinstance(names, list)
                         else None,
                         dcgm_level=level if type(level) is int else None)
    return None


def _ended(doc: Mapping[str, object]) -> float | None:
    """When a run record's run ended: its start plus its duration (None: not recorded)."""
    started, duration = doc.get("started"), doc.get("duration_s")
    if not isinstance(started, str) or not isinstance(duration, (int, float)):
        return None
    try:
        return datetime.fromisoformat(started).timestamp() + float(duration)
    except ValueError:
        return None
