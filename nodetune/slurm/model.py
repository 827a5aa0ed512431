"""What a run asks of Slurm, and what it did: options, plan, actions, report."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError

log = logging.getLogger(__name__)

CONTROLLER_VAR = "nodetune_slurm_controller"
NODENAME_VAR = "nodetune_slurm_nodename"
# A reason nodetune writes: "nodetune <verb> <run id>: <why>", the run id as
# records.new_run names it.
OWNED_REASON = re.compile(r"^nodetune (?P<kind>[a-z]+) (?P<run>\d{8}T\d{6}Z-[a-z]+(?:-\d+)?): ")
# slurmctld keeps a node's reason whole (scontrol's update_node.c copies the
# value as given), but slurmdbd records every drain as a node event whose
# `reason` column is a MySQL TINYTEXT (src/plugins/accounting_storage/mysql/
# accounting_storage_mysql.c, event_table_fields): at most 255 bytes. A longer
# reason is cut or refused there, and `sacctmgr show event` is where operators
# look for drain history, so nodetune's reasons fit in 255 UTF-8 bytes.
MAX_REASON_BYTES = 255
# A Slurm node name as nodetune will pass it: one host, no hostlist expression
# (`gpu[1-8]`), list (`a,b`) or anything scontrol would read as another word.
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCONTROL_TIMEOUT = 30.0
SETTLE_S = 15.0

Progress = Callable[[str], None]
RunLookup = Callable[[str], Mapping[str, Any] | None]  # a run record by exact id


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """What to do in Slurm after a run (all off by default)."""

    drain: bool = False
    drain_unreachable: bool = False
    drain_unknown: bool = False  # also drain a node whose verdict is not_assessed
    drain_reboot: bool = False   # a check node whose action is reboot: scontrol reboot ASAP
    resume: bool = False
    resume_reason: str | None = None
    dry_run: bool = False
    allow_busy: bool = False
    # A node nodetune drained this many times within service_window_days is serviced, not
    # resumed (nodetune.slurm.offenders; 0: never)
    service_after: int = 3
    service_window_days: float = 7.0

    @property
    def enabled(self) -> bool:
        """Whether Slurm is touched (or, with ``dry_run``, read) at all."""
        return self.drain or self.resume

    def check(self) -> None:
        """Reject contradictory options before anything runs.

        Raises:
            InputError: an option without the one it qualifies, or a bad regex.
        """
        if self.service_after < 0 or self.service_window_days <= 0:
            raise InputError(f"--service-after {self.service_after} in "
                             f"{self.service_window_days:g} days: a count of 0 or more and a "
                             "window of more than 0 days")
        if self.drain_unreachable and not self.drain:
            raise InputError("--drain-unreachable qualifies --drain; add --drain")
        if self.drain_unknown and not self.drain:
            raise InputError("--drain-unknown qualifies --drain; add --drain")
        if self.drain_reboot and not self.drain:
            raise InputError("--drain-reboot qualifies --drain; add --drain")
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
    # A validate drain: what the run judged the node by (None: nothing measured), which
    # a later pass must match to lift it (nodetune.slurm.policy.PassMark)
    pass_mark: Any = None
    # A check drain: the checks that failed, each of which a later check must pass to lift
    # it (nodetune.slurm.policy.CheckMark)
    failed_checks: tuple[str, ...] = ()
    # A check drain: the run's --dcgm-level, which a later check must reach to lift a
    # dcgm.diag drain
    dcgm_level: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``report.json``'s ``slurm.actions[]`` (a validate drain
        with its ``pass_mark``, null when the run measured nothing; a check drain with its
        ``failed_checks``)."""
        doc: dict[str, Any] = {"node": self.node, "slurm_node": self.slurm_node,
                               "action": self.action, "reason": self.reason,
                               "command": list(self.command), "dry_run": self.dry_run,
                               "state_after": self.state_after}
        if self.action == "drain" and self.reason.startswith("nodetune validate "):
            doc["pass_mark"] = self.pass_mark.to_dict() if self.pass_mark else None
        if self.action == "drain" and self.reason.startswith("nodetune check "):
            doc["failed_checks"] = list(self.failed_checks)
            if self.dcgm_level is not None:
                doc["dcgm_level"] = self.dcgm_level
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


def controllers_named(hosts: Sequence[Host]) -> set[str]:
    """The Slurm controllers ``hosts`` name (``nodetune_slurm_controller``; unset or empty:
    none). One rule for where a plan's scontrol runs (:func:`nodetune.slurm.prepare.plan`,
    :meth:`SlurmPlan.only`) and whether hosts are under Slurm
    (:func:`nodetune.slurm.scontrol.configured`)."""
    return {str(h.vars[CONTROLLER_VAR]) for h in hosts
            if h.vars.get(CONTROLLER_VAR) not in (None, "")}


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

    def only(self, hosts: Sequence[Host], options: SlurmOptions | None = None) -> SlurmPlan:
        """This plan for ``hosts``, some of the hosts it was resolved for, in their order and
        with ``options`` (None: this plan's): what resolving the plan for them alone gives,
        without reading the inventory again. The hosts of a plan agree on the controller,
        so it stays where one of ``hosts`` names it; where none does, there is none.

        Raises:
            ValueError: a host this plan was not resolved for.
        """
        missing = [h.name for h in hosts if h.name not in self.names]
        if missing:
            raise ValueError(f"not in this Slurm plan: {', '.join(missing)}")
        return SlurmPlan(options=self.options if options is None else options,
                         controller=self.controller if controllers_named(hosts) else None,
                         names={h.name: self.names[h.name] for h in hosts})
