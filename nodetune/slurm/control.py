"""Drain bad nodes and resume repaired ones in Slurm, through ``scontrol`` on the controller.

The verdicts come from :mod:`nodetune.verdicts`. nodetune drains a node whose
verdict is bad with a reason that names the test and the run
(``nodetune <verb> <run id>: <why>``) and, with ``resume``, returns a node to
service only when its verdict is good and either the operator names its reason
with a regular expression, or nodetune provably drained it with the same kind
of test, before this run: the reason names a run of this site whose record
(:mod:`nodetune.records`) says it drained this node with this very reason. A
``check`` pass therefore never lifts a ``validate`` drain (a slow link is not
something ``check`` measures), and a reason merely shaped like nodetune's is
nobody's. A node drained for any other reason is left alone and listed.

Before ``validate`` runs, :func:`prepare` refuses the nodes Slurm has
allocated to jobs (:func:`busy_nodes`), so that a test never competes with
production work unnoticed.

``scontrol`` runs on the host named by the inventory variable
``nodetune_slurm_controller`` (over SSH, like every other remote command), or
on this machine when it is unset. Commands are argument lists, quoted by
:func:`nodetune.remote.ssh.shell_command` on the way through the shell; the reason is
one argument whatever characters it holds.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from nodetune import records
from nodetune.ansible import inventory as inventory_mod
from nodetune.ansible.inventory import Host, Inventory
from nodetune.errors import InputError, NodetuneError, SlurmError
from nodetune.records import RunRecord
from nodetune.remote import ssh
from nodetune.slurm.state import SINFO, SQUEUE, SlurmNode, parse_jobs, parse_nodes
from nodetune.verdicts import NodeState, NodeVerdict

log = logging.getLogger(__name__)

CONTROLLER_VAR = "nodetune_slurm_controller"
NODENAME_VAR = "nodetune_slurm_nodename"
# A reason nodetune writes: "nodetune <verb> <run id>: <why>", the run id as
# records.new_run names it.
_OWNED = re.compile(r"^nodetune (?P<kind>[a-z]+) (?P<run>\d{8}T\d{6}Z-[a-z]+(?:-\d+)?): ")
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
SCONTROL_TIMEOUT = 30.0
SETTLE_S = 15.0

Progress = Callable[[str], None]
RunLookup = Callable[[str], Mapping[str, Any] | None]  # a run record by exact id


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """What to do in Slurm after a run (all off by default)."""

    drain: bool = False
    drain_unreachable: bool = False
    resume: bool = False
    resume_reason: str | None = None
    dry_run: bool = False
    allow_busy: bool = False

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


def drain_reason(why: str, *, kind: str, run_id: str) -> str:
    """``nodetune <kind> <run_id>: <why>``, one printable line of at most 255 UTF-8 bytes.

    ``kind`` is the verb whose verdict drains (``check``, ``validate``): only a
    pass of the same kind lifts the drain. Control characters (newlines
    included) become spaces and runs of spaces one space, so that a reason
    taken from a node's own output stays one line; ``why`` is cut (with "...")
    so that the test and the run id always survive.
    """
    head = f"nodetune {_printable(kind)} {_printable(run_id)}: "
    why = _printable(why) or "failed"
    room = MAX_REASON_BYTES - len(head.encode())
    if room < 8:
        raise InputError(f"run id {run_id!r} leaves no room for a Slurm drain reason")
    encoded = why.encode()
    if len(encoded) > room:
        why = encoded[:room - 3].decode(errors="ignore").rstrip() + "..."
    return head + why


def _printable(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def drain_command(slurm_node: str, reason: str) -> tuple[str, ...]:
    """``scontrol update nodename=N state=drain reason=R`` as an argument list."""
    return ("scontrol", "update", f"nodename={slurm_node}", "state=drain", f"reason={reason}")


def resume_command(slurm_node: str) -> tuple[str, ...]:
    """``scontrol update nodename=N state=resume`` as an argument list."""
    return ("scontrol", "update", f"nodename={slurm_node}", "state=resume")


# --- who drained a node ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """The nodetune run that drained a node, as its reason claims it."""

    kind: str    # the verb: check | validate
    run_id: str

    @property
    def label(self) -> str:
        """``nodetune validate <run id>``, for messages."""
        return f"nodetune {self.kind} {self.run_id}"


def claimed_owner(reason: str) -> Owner | None:
    """The run a reason names in nodetune's form, unproven (anyone can type it)."""
    match = _OWNED.match(reason)
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
            return owner
    return None


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
                inventory_mod.load(inv.source, vault=inv.vault).host(name)
        except InputError:
            raise InputError(f"{CONTROLLER_VAR} {name!r} is not a host in {inv.source}; add it "
                             "(for example in a slurm_controller group) with its connection "
                             "variables") from None
    return SlurmPlan(options=options, controller=controller, names=names)


# --- talking to scontrol ------------------------------------------------------------


class Scontrol:
    """``scontrol``/``sinfo``/``squeue`` on the controller, through one session."""

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

    def _read(self, argv: Sequence[str]) -> str:
        result = self.run(argv)
        if result.exit_status != 0:
            raise SlurmError(f"`{' '.join(argv)}` failed on {self.where}: "
                             f"{(result.stderr or result.stdout).strip()[-300:]}",
                             host=self.where)
        return result.stdout

    def nodes(self, slurm_nodes: Sequence[str]) -> dict[str, SlurmNode]:
        """State and reason of ``slurm_nodes`` (every node when empty), from ``sinfo --json``.

        Raises:
            SlurmError: sinfo fails (no controller, no munge, ...) or prints no node list.
        """
        try:
            found = parse_nodes(self._read(SINFO))
        except ValueError as exc:
            raise SlurmError(f"{exc} on {self.where}", host=self.where) from None
        return {n: v for n, v in found.items() if not slurm_nodes or n in slurm_nodes}

    def jobs(self) -> dict[str, tuple[str, ...]]:
        """The ids of the jobs holding each node, from ``squeue --json``.

        Raises:
            SlurmError: squeue fails or prints no job list.
        """
        try:
            return parse_jobs(self._read(SQUEUE))
        except ValueError as exc:
            raise SlurmError(f"{exc} on {self.where}", host=self.where) from None


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


def configured(hosts: Sequence[Host]) -> bool:
    """Whether these hosts are under Slurm: a controller is set for them, or this
    machine has Slurm's commands (scontrol then runs here)."""
    return (any(h.vars.get(CONTROLLER_VAR) not in (None, "") for h in hosts)
            or shutil.which("sinfo") is not None)


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


@dataclass(frozen=True, slots=True)
class Busy:
    """A node that Slurm has allocated to jobs."""

    node: str
    slurm_node: str
    state: str
    jobs: tuple[str, ...]

    def __str__(self) -> str:
        held = (f"job{'s' if len(self.jobs) > 1 else ''} {', '.join(self.jobs)}"
                if self.jobs else "no job listed by squeue")
        return f"{self.node} ({self.state}: {held})"


def busy_nodes(names: Mapping[str, str], found: Mapping[str, SlurmNode],
               scontrol: Scontrol) -> tuple[Busy, ...]:
    """The nodes (inventory name: Slurm name) that Slurm has allocated (ALLOCATED or MIXED),
    with the ids of the jobs holding them.

    Raises:
        SlurmError: squeue cannot be read.
    """
    busy = {node: found[name] for node, name in names.items()
            if name in found and found[name].busy}
    if not busy:
        return ()
    jobs = scontrol.jobs()
    return tuple(Busy(node=node, slurm_node=sn.name, state=sn.display_state,
                      jobs=jobs.get(sn.name, ())) for node, sn in sorted(busy.items()))


def refuse_busy(busy: Sequence[Busy], where: str) -> None:
    """Refuse to test nodes that run jobs.

    Raises:
        InputError: naming every busy node and its jobs.
    """
    if busy:
        raise InputError(
            f"Slurm (asked on {where}) has allocated {len(busy)} selected node(s) to running "
            f"jobs: {'; '.join(str(b) for b in busy)}; a test there would compete with them "
            "and measure them as well. Choose idle nodes (--limit, --partners), or pass "
            "--allow-busy", host=busy[0].node)


def prepare(inv: Inventory, hosts: Sequence[Host], options: SlurmOptions, *,
            busy: Sequence[Host] | None = None) -> SlurmPlan | None:
    """Before the run: resolve the plan for ``hosts`` and ask Slurm for every node; where
    Slurm is configured, refuse the ``busy`` hosts (the test's nodes and partners) that
    Slurm has allocated to jobs, unless ``options.allow_busy``.

    Returns:
        The plan of what to drain/resume after the run; None when that is nothing.

    Raises:
        InputError: a bad name or option, a node Slurm does not know, or a busy node.
        SlurmError: Slurm cannot be asked.
    """
    check_busy = busy is not None and not options.allow_busy and configured(busy)
    if not options.enabled and not check_busy:
        return None
    everyone = list({h.name: h for h in (*hosts, *(busy or ()))}.values())
    asked = plan(inv, everyone, options)
    with connect(asked) as scontrol:
        found = preflight(asked, scontrol)
        if check_busy:
            names = {h.name: asked.names[h.name] for h in busy or ()}
            refuse_busy(busy_nodes(names, found, scontrol), asked.where)
    return plan(inv, hosts, options) if options.enabled else None


# --- deciding and acting ------------------------------------------------------------


def decide(verdict: NodeVerdict, slurm_node: SlurmNode, options: SlurmOptions,
           run: RunRecord, owner: Owner | None = None) -> Action | None:
    """What to do with one node, before any command runs (None: nothing to say).

    ``owner`` is the nodetune run that provably drained the node
    (:func:`proven_owner`), None when none did.
    """

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
        if slurm_node.out_of_service and (owner is None or owner.kind != run.verb):
            by = f"drained by {owner.label}" if owner else "out of service for another reason"
            return action("skip", f"left as is, {by} ({current})")
        reason = drain_reason(verdict.reason or state.value, kind=run.verb, run_id=run.id)
        return action("drain", reason, drain_command(slurm_node.name, reason))
    if options.resume and slurm_node.out_of_service:
        if state is not NodeState.GOOD:
            return action("skip", f"verdict {state.value}: not resumed ({current})")
        named = options.resume_reason is not None and \
            re.search(options.resume_reason, slurm_node.reason) is not None
        if not named:
            why = _unresumable(slurm_node, run, owner)
            if why:
                return action("skip", f"not resumed: {why} ({current})")
        return action("resume", slurm_node.reason, resume_command(slurm_node.name))
    return None


def _unresumable(slurm_node: SlurmNode, run: RunRecord, owner: Owner | None) -> str | None:
    """Why this run's pass may not lift this drain (None: it may)."""
    if owner is None:
        if claimed_owner(slurm_node.reason):
            return ("the run its reason names is not a run record of this site that drained "
                    "this node with this reason")
        return "drained for a reason nodetune did not write"
    if owner.kind != run.verb:
        return (f"drained by {owner.label}; only a passing `nodetune {owner.kind}`, or "
                "--resume-reason, lifts it")
    started = run.started.timestamp()
    if owner.run_id == run.id or (slurm_node.reason_time is not None
                                  and slurm_node.reason_time > started):
        return "drained after this run started"
    return None


def act(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run: RunRecord,
        scontrol: Scontrol, runs: RunLookup = records.find_run,
        progress: Progress = lambda _m: None) -> SlurmReport:
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
        owner = proven_owner(slurm_node, runs) if slurm_node.out_of_service else None
        action = decide(verdicts[node], slurm_node, options, run, owner)
        if action is None:
            continue
        if action.command and not options.dry_run:
            action = _execute(action, scontrol, progress)
        actions.append(action)
    return SlurmReport(controller=slurm_plan.where, actions=tuple(actions))


def _execute(action: Action, scontrol: Scontrol, progress: Progress) -> Action:
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


def run(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run: RunRecord,
        opener: Callable[[Host], ssh.Session] = ssh.connect,
        progress: Progress = lambda _m: None) -> SlurmReport:
    """Connect to the controller and :func:`act` for ``run`` (whose verb is the drain's kind)."""
    with connect(slurm_plan, opener=opener) as scontrol:
        return act(slurm_plan, verdicts, run=run, scontrol=scontrol, progress=progress)
