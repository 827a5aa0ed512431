"""Drain bad nodes and resume repaired ones in Slurm, through ``scontrol`` on the controller.

The verdicts come from :mod:`nodetune.verdicts`. nodetune drains a node whose
verdict is bad with a reason it owns (``nodetune: <why> (run <id>)``) and, with
``resume``, returns a node to service only when its verdict is good and its
drain reason is one nodetune wrote (or one the operator names with a regular
expression). A node drained for any other reason is left alone and listed.

``scontrol`` runs on the host named by the inventory variable
``nodetune_slurm_controller`` (over SSH, like every other remote command), or
on this machine when it is unset. Commands are argument lists, quoted by
:func:`nodetune.ssh.shell_command` on the way through the shell; the reason is
one argument whatever characters it holds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nodetune import inventory as inventory_mod
from nodetune import ssh
from nodetune.errors import InputError, NodetuneError, SlurmError
from nodetune.inventory import Host, Inventory
from nodetune.verdicts import NodeState, NodeVerdict

log = logging.getLogger(__name__)

CONTROLLER_VAR = "nodetune_slurm_controller"
NODENAME_VAR = "nodetune_slurm_nodename"
REASON_PREFIX = "nodetune:"
# slurmctld keeps a node's reason whole (scontrol's update_node.c copies the
# value as given), but slurmdbd records every drain as a node event whose
# `reason` column is a MySQL TINYTEXT (src/plugins/accounting_storage/mysql/
# accounting_storage_mysql.c, event_table_fields): at most 255 bytes. A longer
# reason is cut or refused there, and `sacctmgr show event` is where operators
# look for drain history, so nodetune's reasons fit in 255 UTF-8 bytes.
MAX_REASON_BYTES = 255
# A Slurm node name as nodetune will pass it: one host, no hostlist expression
# (`gpu[1-8]`), list (`a,b`) or anything scontrol would read as another word.
_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Flags of a node out of service (sinfo's StateComplete, e.g. "idle+drain").
_OUT_OF_SERVICE = frozenset({"drain", "down", "fail"})
SCONTROL_TIMEOUT = 30.0
SETTLE_S = 15.0

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """What to do in Slurm after a run (all off by default)."""

    drain: bool = False
    drain_unreachable: bool = False
    resume: bool = False
    resume_reason: str | None = None
    dry_run: bool = False

    @property
    def enabled(self) -> bool:
        """Whether Slurm is touched (or, with ``dry_run``, read) at all."""
        return self.drain or self.resume

    def check(self) -> None:
        """Reject contradictory options before anything runs.

        Raises:
            InputError: an option without the one it qualifies, or a bad regex.
        """
        if self.drain_unreachable and not self.drain:
            raise InputError("--drain-unreachable qualifies --drain; add --drain")
        if self.resume_reason is not None and not self.resume:
            raise InputError("--resume-reason qualifies --resume; add --resume")
        if self.dry_run and not self.enabled:
            raise InputError("--dry-run shows the scontrol commands of --drain/--resume; "
                             "add one of them (a fleet's pairs, contacting nothing: "
                             "validate --plan)")
        if self.resume_reason is not None:
            try:
                re.compile(self.resume_reason)
            except re.error as exc:
                raise InputError(f"--resume-reason {self.resume_reason!r} is not a valid "
                                 f"regular expression: {exc}") from None


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """A node as slurmctld reports it."""

    name: str
    state: str       # sinfo's StateComplete, e.g. "idle+drain"
    reason: str = ""  # "" when Slurm has none

    @property
    def flags(self) -> frozenset[str]:
        """The state's words: {"idle", "drain"}."""
        return frozenset(self.state.lower().replace("*", "").split("+"))

    @property
    def out_of_service(self) -> bool:
        """Drained, draining, down or failed."""
        return bool(self.flags & _OUT_OF_SERVICE)

    @property
    def display_state(self) -> str:
        """The state as ``scontrol show node`` writes it: IDLE+DRAIN."""
        return self.state.upper()


@dataclass(frozen=True, slots=True)
class Action:
    """One thing done (or, dry-run, to be done; or deliberately not done) to one node."""

    node: str
    slurm_node: str
    action: str                 # drain | resume | skip
    reason: str
    command: tuple[str, ...] = ()
    dry_run: bool = False
    state_after: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``slurm.actions[]``."""
        doc: dict[str, Any] = {"node": self.node, "slurm_node": self.slurm_node,
                               "action": self.action, "reason": self.reason,
                               "command": list(self.command), "dry_run": self.dry_run,
                               "state_after": self.state_after}
        if self.error:
            doc["error"] = self.error
        return doc


@dataclass(frozen=True, slots=True)
class SlurmReport:
    """Every Slurm action of a run, where ``scontrol`` ran, and whether any failed."""

    controller: str
    actions: tuple[Action, ...] = ()

    @property
    def failed(self) -> tuple[Action, ...]:
        """Actions whose scontrol command failed."""
        return tuple(a for a in self.actions if a.error)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``slurm``."""
        return {"controller": self.controller, "actions": [a.to_dict() for a in self.actions]}


@dataclass(frozen=True, slots=True)
class SlurmPlan:
    """Resolved before the run: where scontrol runs and each node's Slurm name."""

    options: SlurmOptions
    controller: Host | None
    names: Mapping[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """Where scontrol runs, for messages and the report."""
        return self.controller.name if self.controller else "local"


# --- reasons and commands ----------------------------------------------------------


def drain_reason(why: str, run_id: str) -> str:
    """``nodetune: <why> (run <run_id>)``, one printable line of at most 255 UTF-8 bytes.

    Control characters (newlines included) become spaces and runs of spaces one
    space, so that a reason taken from a node's own output cannot break a line
    of ``sinfo`` or ``scontrol show node``; ``why`` is cut (with "...") so
    that the run id always survives.
    """
    tail = f" (run {_printable(run_id)})"
    head = f"{REASON_PREFIX} "
    why = _printable(why) or "failed"
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


def resume_command(slurm_node: str) -> tuple[str, ...]:
    """``scontrol update nodename=N state=resume`` as an argument list."""
    return ("scontrol", "update", f"nodename={slurm_node}", "state=resume")


def sinfo_command(slurm_nodes: Sequence[str]) -> tuple[str, ...]:
    """Read name, full state and reason of ``slurm_nodes`` (all when empty); reason last."""
    which = ("--nodes", ",".join(slurm_nodes)) if slurm_nodes else ()
    return ("sinfo", "--noheader", "--Node", *which,
            "--Format", "NodeList:|,StateComplete:|,Reason:|")


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """Parse :func:`sinfo_command`'s output (a node in several partitions appears once)."""
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        reason = reason.removesuffix("|")
        name = name.strip()
        nodes.setdefault(name, SlurmNode(name=name, state=state.strip(),
                                         reason="" if reason.strip() == "none" else reason))
    return nodes


# --- resolving the plan -------------------------------------------------------------


def slurm_name(host: Host) -> str:
    """``host``'s Slurm node name: ``nodetune_slurm_nodename``, else the inventory name.

    Raises:
        InputError: a name scontrol would read as a host list or as more words.
    """
    raw = host.vars.get(NODENAME_VAR, host.name)
    name = str(raw) if raw is not None else host.name
    if not _SLURM_NAME.match(name):
        where = NODENAME_VAR if NODENAME_VAR in host.vars else "its inventory name"
        raise InputError(f"{where} {name!r} is not one Slurm node name (letters, digits, "
                         "'.', '_', '-'; no host lists); set nodetune_slurm_nodename",
                         host=host.name)
    return name


def plan(inv: Inventory, hosts: Sequence[Host], options: SlurmOptions) -> SlurmPlan:
    """Resolve the controller and every node's Slurm name; nothing is contacted.

    Raises:
        InputError: hosts disagree on the controller, the controller is not an
            inventory host, or a Slurm node name is not valid.
    """
    options.check()
    names = {h.name: slurm_name(h) for h in hosts}
    dupes = sorted({n for n in names.values() if list(names.values()).count(n) > 1})
    if dupes:
        raise InputError(f"{NODENAME_VAR}: several hosts map to Slurm node {dupes[0]!r}")
    wanted = {str(h.vars[CONTROLLER_VAR]) for h in hosts
              if h.vars.get(CONTROLLER_VAR) not in (None, "")}
    if len(wanted) > 1:
        raise InputError(f"{CONTROLLER_VAR} differs between hosts ({', '.join(sorted(wanted))});"
                         " set it once, for example in group_vars/all")
    controller = None
    if wanted:
        name = wanted.pop()
        # The controller may be outside the hosts the verb acts on (--limit, the GPU group).
        try:
            controller = next((h for h in inv.hosts if h.name == name), None) or \
                inventory_mod.load(inv.source).host(name)
        except InputError:
            raise InputError(f"{CONTROLLER_VAR} {name!r} is not a host in {inv.source}; add it "
                             "(for example in a slurm_controller group) with its connection "
                             "variables") from None
    return SlurmPlan(options=options, controller=controller, names=names)


# --- talking to scontrol ------------------------------------------------------------


class Scontrol:
    """``scontrol``/``sinfo`` on the controller, through one session."""

    def __init__(self, session: ssh.Session, where: str) -> None:
        self.session = session
        self.where = where

    def run(self, argv: Sequence[str]) -> ssh.CommandResult:
        """Run one Slurm command; a missing command is an infrastructure error."""
        result = self.session.run(list(argv), timeout=SCONTROL_TIMEOUT)
        if result.exit_status == 127:
            hint = (f"set {CONTROLLER_VAR} to the inventory host that runs Slurm's commands"
                    if self.where == "local" else f"{CONTROLLER_VAR} names this host")
            raise SlurmError(f"`{argv[0]}` is not installed here ({hint})", host=self.where)
        return result

    def nodes(self, slurm_nodes: Sequence[str]) -> dict[str, SlurmNode]:
        """State and reason of ``slurm_nodes``, read back from slurmctld.

        Raises:
            SlurmError: sinfo fails (no controller, no munge, ...).
        """
        result = self.run(sinfo_command(slurm_nodes))
        if result.exit_status != 0:
            raise SlurmError(f"sinfo failed on {self.where}: "
                             f"{(result.stderr or result.stdout).strip()[-300:]}",
                             host=self.where)
        return parse_sinfo(result.stdout)


@contextmanager
def connect(slurm_plan: SlurmPlan, *,
            opener: Callable[[Host], ssh.Session] = ssh.connect) -> Iterator[Scontrol]:
    """A :class:`Scontrol` on the plan's controller (this machine when none is set)."""
    if slurm_plan.controller is None:
        session: ssh.Session = ssh.LocalSession(
            ssh.ConnectSpec(host="local", address="localhost", local=True))
    else:
        session = opener(slurm_plan.controller)
    try:
        yield Scontrol(session, slurm_plan.where)
    finally:
        session.close()


def preflight(slurm_plan: SlurmPlan, scontrol: Scontrol) -> dict[str, SlurmNode]:
    """Read every planned node from Slurm before the run, so bad names fail early.

    Raises:
        InputError: Slurm has no node of that name.
        SlurmError: the controller cannot be asked.
    """
    found = scontrol.nodes(list(slurm_plan.names.values()))
    for node, name in slurm_plan.names.items():
        if name not in found:
            raise InputError(f"Slurm (asked on {slurm_plan.where}) has no node {name!r}; set "
                             f"{NODENAME_VAR} to the node's Slurm name", host=node)
    return found


# --- deciding and acting ------------------------------------------------------------


def decide(verdict: NodeVerdict, slurm_node: SlurmNode, options: SlurmOptions,
           run_id: str) -> Action | None:
    """What to do with one node, before any command runs (None: nothing to say)."""

    def action(kind: str, reason: str, command: tuple[str, ...] = ()) -> Action:
        return Action(node=verdict.node, slurm_node=slurm_node.name, action=kind,
                      reason=reason, command=command, dry_run=options.dry_run,
                      state_after=slurm_node.display_state)

    state = verdict.state
    current = f"{slurm_node.display_state}: {slurm_node.reason}"
    if options.drain and state is not NodeState.GOOD:
        if state is not NodeState.BAD and not options.drain_unreachable:
            return action("skip", f"verdict {state.value}, not drained without "
                          f"--drain-unreachable: {_printable(verdict.reason)}")
        if slurm_node.out_of_service and not owned(slurm_node.reason):
            return action("skip", f"left as is, out of service for another reason ({current})")
        reason = drain_reason(verdict.reason or state.value, run_id)
        return action("drain", reason, drain_command(slurm_node.name, reason))
    if options.resume and slurm_node.out_of_service:
        if state is not NodeState.GOOD:
            return action("skip", f"verdict {state.value}: not resumed ({current})")
        if not resumable(slurm_node.reason, options.resume_reason):
            return action("skip", f"not resumed, drained for a reason nodetune did not write "
                          f"({current})")
        return action("resume", slurm_node.reason, resume_command(slurm_node.name))
    return None


def owned(reason: str) -> bool:
    """Whether nodetune wrote this drain reason."""
    return reason.startswith(REASON_PREFIX)


def resumable(reason: str, pattern: str | None) -> bool:
    """A reason nodetune wrote, or one matching the operator's ``--resume-reason``."""
    return owned(reason) or (pattern is not None and re.search(pattern, reason) is not None)


def act(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run_id: str,
        scontrol: Scontrol, progress: Progress = lambda _m: None) -> SlurmReport:
    """Drain/resume per the plan's options, reading each node's state back after its action.

    A failed scontrol command is recorded on its action (``error``) and the
    other nodes are still handled.

    Raises:
        SlurmError: Slurm cannot be read at all.
    """
    options = slurm_plan.options
    names = {n: slurm_plan.names[n] for n in verdicts if n in slurm_plan.names}
    before = scontrol.nodes(list(names.values())) if names else {}
    actions: list[Action] = []
    for node in sorted(names):
        slurm_node = before.get(names[node])
        if slurm_node is None:
            actions.append(Action(node=node, slurm_node=names[node], action="skip",
                                  reason="Slurm does not know this node",
                                  dry_run=options.dry_run, state_after="absent"))
            continue
        action = decide(verdicts[node], slurm_node, options, run_id)
        if action is None:
            continue
        if action.command and not options.dry_run:
            action = _execute(action, scontrol, progress)
        actions.append(action)
    return SlurmReport(controller=slurm_plan.where, actions=tuple(actions))


def _execute(action: Action, scontrol: Scontrol, progress: Progress) -> Action:
    from dataclasses import replace

    progress(f"{action.action} {action.slurm_node} on {scontrol.where}")
    error = None
    try:
        result = scontrol.run(action.command)
        if result.exit_status != 0:
            error = (result.stderr or result.stdout).strip()[-300:] or \
                f"scontrol exited {result.exit_status}"
    except NodetuneError as exc:
        error = exc.message
    try:
        state_after = _settled_state(scontrol, action.slurm_node)
    except NodetuneError as exc:
        state_after, error = "unknown", error or exc.message
    if error:
        log.warning("%s: %s failed on %s: %s", action.node, action.action, scontrol.where, error)
    return replace(action, state_after=state_after, error=error)


def _settled_state(scontrol: Scontrol, slurm_node: str) -> str:
    """The node's state once slurmctld has pinged it again.

    A resumed node shows NOT_RESPONDING until slurmctld's ping after the
    resume comes back (about a second on the lab), so the read-back waits for
    that flag to clear, up to ``SETTLE_S``.
    """
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = scontrol.nodes([slurm_node]).get(slurm_node)
        if after is None:
            return "absent"
        if "not_responding" not in after.flags or time.monotonic() > deadline:
            return after.display_state
        time.sleep(0.5)


def run(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run_id: str,
        opener: Callable[[Host], ssh.Session] = ssh.connect,
        progress: Progress = lambda _m: None) -> SlurmReport:
    """Connect to the controller and :func:`act`."""
    with connect(slurm_plan, opener=opener) as scontrol:
        return act(slurm_plan, verdicts, run_id=run_id, scontrol=scontrol, progress=progress)
