"""After a run: drain the bad nodes and resume the repaired ones that nodetune drained.

The verdicts come from :mod:`nodetune.verdicts`; the policy, shared with the node-local
health check, is :mod:`nodetune.slurm.policy`. nodetune drains a node whose verdict is
bad with a reason that names the test and the run (``nodetune <verb> <run id>: <why>``)
and, with ``resume``, returns a node to service only when its verdict is good, its
drain was made before this run started (named or not), and either the operator names
its reason with a regular expression, or nodetune provably drained it with the same
kind of test (:func:`nodetune.slurm.reasons.proven_owner`). A validate drain is lifted
only by a pass whose pass mark is at least as strict as the one that drained
(:meth:`~nodetune.slurm.policy.PassMark.covers`); a check drain only by a check run in
which each check that drained it was tested again on that node
(:meth:`~nodetune.slurm.policy.CheckMark.covers`). A ``check`` pass therefore never
lifts a ``validate`` drain, a health check's drain comes back only through the health
check or a --resume-reason that names it, and a reason merely shaped like nodetune's is
nobody's. A node drained for any other reason, or whose state Slurm holds (a reboot,
power saving, maintenance), is left alone and listed."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nodetune import records
from nodetune.action import Action as Rung
from nodetune.ansible.inventory import Host
from nodetune.errors import NodetuneError
from nodetune.records import RunRecord
from nodetune.remote import ssh
from nodetune.slurm import offenders
from nodetune.slurm.model import (
    SETTLE_S,
    Action,
    Progress,
    RunLookup,
    SlurmOptions,
    SlurmPlan,
    SlurmReport,
    log,
)
from nodetune.slurm.policy import (
    Act,
    CheckMark,
    PassMark,
    Whose,
    held_by_slurm,
    ruling,
    writer_of,
)
from nodetune.slurm.reasons import (
    Owner,
    _printable,
    claimed_owner,
    drain_command,
    drain_reason,
    proven_owner,
    reboot_command,
    resume_command,
)
from nodetune.slurm.scontrol import Scontrol, connect
from nodetune.slurm.state import SlurmNode
from nodetune.verdicts import NodeState, NodeVerdict

# --- deciding and acting ------------------------------------------------------------


def whose(slurm_node: SlurmNode, run: RunRecord, owner: Owner | None) -> Whose:
    """Whose ``slurm_node``'s drain is, from this run's side (:mod:`nodetune.slurm.policy`):
    this verb's own when a run of it provably drained it, another nodetune writer's (the
    other verb, the health check, a reboot, nodetune's old form; a controller-form
    reason no run record proves is a person's), else a person's."""
    if not slurm_node.out_of_service:
        return Whose.NONE
    if owner is not None:  # nodetune only drains: DOWN or FAIL over its reason is not its own
        if "drain" not in slurm_node.flags:
            return Whose.PERSON
        return Whose.SELF if owner.kind == run.verb else Whose.OTHER
    writer = writer_of(slurm_node.reason)
    return Whose.OTHER if writer not in (None, "controller") else Whose.PERSON


def decide(verdict: NodeVerdict, slurm_node: SlurmNode, options: SlurmOptions,
           run: RunRecord, owner: Owner | None = None,
           mark: PassMark | CheckMark | None = None,
           drained: Sequence[offenders.Drain] = ()) -> Action | None:
    """What to do with one node, before any command runs (None: nothing to say).

    ``owner`` is the nodetune run that provably drained the node
    (:func:`proven_owner`), None when none did; ``mark`` what this run judged the node
    by (validate: recorded with a drain, compared on a resume) or proved of it (check:
    compared on a resume; a check drain records the verdict's failed checks); ``drained``
    nodetune's recent drains of the node (:mod:`nodetune.slurm.offenders`): a repeat
    offender is serviced, not resumed.
    """
    failed = verdict.details.get("failed_checks") if run.verb == "check" else None

    def action(kind: str, reason: str, command: tuple[str, ...] = ()) -> Action:
        return Action(node=verdict.node, slurm_node=slurm_node.name, action=kind,
                      reason=reason, command=command, dry_run=options.dry_run,
                      state_after=slurm_node.display_state,
                      pass_mark=mark if kind == "drain" and run.verb == "validate" else None,
                      failed_checks=tuple(str(n) for n in failed or ()) if kind == "drain"
                      else (),
                      dcgm_level=mark.dcgm_level
                      if kind == "drain" and isinstance(mark, CheckMark) else None)

    state = verdict.state
    current = f"{slurm_node.display_state}: {slurm_node.reason}"
    held = held_by_slurm(slurm_node)
    mine = whose(slurm_node, run, owner)
    if options.drain and state is not NodeState.GOOD:
        if state is NodeState.NOT_ASSESSED and not options.drain_unknown:
            return action("skip", f"verdict {state.value}, not drained without "
                          f"--drain-unknown: {_printable(verdict.reason)}")
        if state not in (NodeState.BAD, NodeState.NOT_ASSESSED) and \
                not options.drain_unreachable:
            return action("skip", f"verdict {state.value}, not drained without "
                          f"--drain-unreachable: {_printable(verdict.reason)}")
        if ruling(slurm_node, mine, healthy=False) is Act.LEAVE:
            by = (f"Slurm holds its state ({held})" if held else
                  f"drained by {owner.label}" if owner else
                  f"drained by nodetune's {writer_of(slurm_node.reason)} writer"
                  if mine is Whose.OTHER else
                  "out of service for another reason")
            return action("skip", f"left as is, {by} ({current})")
        rung = verdict.action  # the node's action on the ladder (nodetune.action)
        reason = drain_reason(verdict.reason or state.value, kind=run.verb, run_id=run.id,
                              tail=f"[action: {rung.value}]" if rung not in (None, Rung.NONE)
                              else "")
        if options.drain_reboot and rung is Rung.REBOOT:  # --drain-reboot: Slurm reboots it
            return action("drain", reason, reboot_command(slurm_node.name, reason))
        return action("drain", reason, drain_command(slurm_node.name, reason))
    if options.resume and slurm_node.out_of_service:
        if state is not NodeState.GOOD:
            return action("skip", f"verdict {state.value}: not resumed ({current})")
        named = options.resume_reason is not None and \
            re.search(options.resume_reason, slurm_node.reason) is not None
        why = _refused(slurm_node, run, owner, mine, named=named, mark=mark) or \
            offenders.service_reason(list(drained), after=options.service_after,
                                     window_days=options.service_window_days)
        if why:
            return action("skip", f"not resumed: {why} ({current})")
        return action("resume", slurm_node.reason, resume_command(slurm_node.name))
    return None


def _refused(slurm_node: SlurmNode, run: RunRecord, owner: Owner | None, mine: Whose, *,
             named: bool, mark: PassMark | CheckMark | None) -> str | None:
    """Why this run's good verdict may not lift ``slurm_node``'s drain (None: it may): the
    shared policy (Slurm holds the state; the drain is someone else's and not named), then
    the controller's own guards, for every resume: the drain is older than this run, and
    this pass is as strict as the validate pass mark that drained, or passed each check
    that drained."""
    held = held_by_slurm(slurm_node)
    if held:
        return f"Slurm holds its state ({held})"
    if ruling(slurm_node, mine, healthy=True, named=named) is not Act.RESUME:
        return _not_ours(slurm_node, owner, mine)
    return _too_soon(slurm_node, run, owner) or _too_weak(owner, mark)


def _not_ours(slurm_node: SlurmNode, owner: Owner | None, mine: Whose) -> str:
    """Why this run may not lift a drain that is not its own and that no one named."""
    if owner is not None:
        return (f"drained by {owner.label}; only a passing `nodetune {owner.kind}`, or "
                "--resume-reason, lifts it")
    if mine is Whose.OTHER:
        return (f"drained by nodetune's {writer_of(slurm_node.reason)} writer; only it, or "
                "--resume-reason naming it, lifts it")
    if claimed_owner(slurm_node.reason):
        return ("the run its reason names is not a run record of this site that drained "
                "this node with this reason")
    return "drained for a reason nodetune did not write"


def _too_soon(slurm_node: SlurmNode, run: RunRecord, owner: Owner | None) -> str | None:
    """Why this run's pass may not lift a drain made after it started (None: it may). Every
    resume passes this, whether its reason is nodetune's or named by --resume-reason."""
    started = run.started.timestamp()
    if owner is not None and owner.run_id == run.id:
        return "drained after this run started (by this run)"
    when = slurm_node.reason_time if slurm_node.reason_time is not None else (
        owner.ended if owner is not None else None)
    if when is None:
        return ("Slurm did not say when the node was drained (sinfo without --json), so "
                "this run cannot show that it passed after the drain")
    if when > started:
        return "drained after this run started"
    return None


def _too_weak(owner: Owner | None, mark: PassMark | CheckMark | None) -> str | None:
    """Why this run's pass is not as strict as the run that drained (None: it is, or the
    drain judged nothing a pass must match): a check drain needs each check that failed
    passed again (a drain recorded without them, a run that skipped no active check); a
    validate drain a pass mark that covers its own."""
    if owner is not None and owner.kind == "check":
        if not isinstance(mark, CheckMark):
            return ("drained by a check; this run checked nothing on the node (only a "
                    "`nodetune check` that passes the checks that drained it lifts it)")
        return mark.covers(owner.checks, owner.dcgm_level)
    if owner is None or owner.kind != "validate":
        return None
    if isinstance(mark, CheckMark):
        mark = None
    if not owner.mark_recorded:  # a record from before pass marks were recorded
        if mark is None or mark.busbw_gbps is None:
            return ("the drain's record does not say its pass mark, and this run judged no "
                    "bandwidth (no --profile, --min-busbw or inventory pass mark)")
        return None
    drained = owner.mark
    if drained is None or (drained.busbw_gbps is None and drained.expect_transport == "any"
                           and not drained.rdma_bw):
        return None
    if mark is None:
        return (f"the drain's pass mark was {drained.describe()}; this run measured no "
                "pair bandwidth")
    return mark.covers(drained)


def act(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run: RunRecord,
        scontrol: Scontrol, runs: RunLookup = records.find_run,
        progress: Progress = lambda _m: None,
        held: Mapping[str, str] | None = None,
        marks: Mapping[str, PassMark | CheckMark | None] | None = None) -> SlurmReport:
    """Drain/resume per the plan's options, reading each node's state back after its action.

    A failed scontrol command is recorded on its action (``error``) and the
    other nodes are still handled. ``held``: nodes neither drained nor resumed, and why
    (a skip action; ``check --image``: faults that are the training image's). ``marks``:
    what this run judged (validate) or proved (check) of each node (:func:`decide`).

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
        if node in (held or {}) and (options.drain or options.resume):
            actions.append(Action(node=node, slurm_node=names[node], action="skip",
                                  reason=(held or {})[node], dry_run=options.dry_run,
                                  state_after=slurm_node.display_state))
            continue
        owner = proven_owner(slurm_node, runs) if slurm_node.out_of_service else None
        drained = (offenders.of_runs(node, records.runs_dir(),
                                     window_days=options.service_window_days)
                   if options.resume and slurm_node.out_of_service
                   and options.service_after else [])
        action = decide(verdicts[node], slurm_node, options, run, owner,
                        (marks or {}).get(node), drained)
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


def apply_verdicts(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *,
                   run: RunRecord, opener: Callable[[Host], ssh.Session] = ssh.connect,
                   progress: Progress = lambda _m: None,
                   held: Mapping[str, str] | None = None,
                   marks: Mapping[str, PassMark | CheckMark | None] | None = None) -> SlurmReport:
    """Connect to the controller and :func:`act` for ``run`` (whose verb is the drain's kind)."""
    with connect(slurm_plan, opener=opener) as scontrol:
        return act(slurm_plan, verdicts, run=run, scontrol=scontrol, progress=progress,
                   held=held, marks=marks)


@dataclass(frozen=True, slots=True)
class Settled:
    """What Slurm did after a run, or why it could not be asked at all."""

    report: SlurmReport | None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """Whether anything asked of Slurm failed (the run then exits 3)."""
        return self.error is not None or bool(self.report and self.report.failed)


def settle(slurm_plan: SlurmPlan, verdicts: Mapping[str, NodeVerdict], *, run: RunRecord,
           doc: dict[str, Any], progress: Progress = lambda _m: None,
           held: Mapping[str, str] | None = None,
           marks: Mapping[str, PassMark | CheckMark | None] | None = None) -> Settled:
    """Drain/resume from ``verdicts`` (``held``: nodes left alone, and why; ``marks``: what
    this run judged or proved of each node; see :func:`act`) and put what happened into
    ``doc["slurm"]``.

    A Slurm that cannot be reached is recorded there (``error``), not raised: the
    run's own verdicts stand, and the run exits 3.
    """
    try:
        report = apply_verdicts(slurm_plan, verdicts, run=run, progress=progress, held=held,
                                marks=marks)
    except NodetuneError as exc:
        doc["slurm"] = {"controller": slurm_plan.where, "actions": [],
                        "error": {"type": type(exc).__name__, "message": exc.message}}
        return Settled(None, str(exc))
    doc["slurm"] = report.to_dict()
    return Settled(report)
