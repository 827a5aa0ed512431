"""Talking to scontrol: on the host ``nodetune_slurm_controller`` names (over SSH) or here.

Commands are argument lists, quoted by :func:`nodetune.remote.ssh.shell_command` on the
way through the shell; a reason is one argument whatever characters it holds."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError, SlurmError
from nodetune.remote import ssh
from nodetune.slurm import text
from nodetune.slurm.model import (
    CONTROLLER_VAR,
    NODENAME_VAR,
    SCONTROL_TIMEOUT,
    SlurmPlan,
    controllers_named,
)
from nodetune.slurm.state import SINFO, SQUEUE, SlurmNode, parse_jobs, parse_nodes

# --- talking to scontrol ------------------------------------------------------------


class Scontrol:
    """``scontrol``/``sinfo``/``squeue`` on the controller, through one session."""

    def __init__(self, session: ssh.Session, where: str) -> None:
        self.session = session
        self.where = where
        self.has_json: bool | None = None

    def run(self, argv: Sequence[str]) -> ssh.CommandResult:
        """Run one Slurm command; a missing command is an infrastructure error."""
        result = self.session.run(list(argv), timeout=SCONTROL_TIMEOUT)
        if result.exit_status == 127:
            hint = (f"set {CONTROLLER_VAR} to the inventory host that runs Slurm's commands"
                    if self.where == "local" else f"{CONTROLLER_VAR} names this host")
            raise SlurmError(f"`{argv[0]}` is not installed here ({hint})", host=self.where)
        return result

    def _read_json(self, argv: Sequence[str]) -> str | None:
        """``argv``'s JSON output, or None where this Slurm has no ``--json`` (then its text
        columns are read: :mod:`nodetune.slurm.text`); remembered for the session."""
        if self.has_json is False:
            return None
        result = self.run(argv)
        if result.exit_status != 0 and text.json_missing(result.stderr or result.stdout):
            self.has_json = False
            return None
        self.has_json = True
        return self._checked(argv, result)

    def _read(self, argv: Sequence[str]) -> str:
        return self._checked(argv, self.run(argv))

    def _checked(self, argv: Sequence[str], result: ssh.CommandResult) -> str:
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
            raw = self._read_json(SINFO)
            found = (parse_nodes(raw) if raw is not None else
                     text.parse_nodes(self._read(text.SINFO_NAMES),
                                      self._read(text.SINFO_ROWS)))
        except ValueError as exc:
            raise SlurmError(f"{exc} on {self.where}", host=self.where) from None
        return {n: v for n, v in found.items() if not slurm_nodes or n in slurm_nodes}

    def jobs(self) -> dict[str, tuple[str, ...]]:
        """The ids of the jobs holding each node, from ``squeue --json``.

        Raises:
            SlurmError: squeue fails or prints no job list.
        """
        try:
            raw = self._read_json(SQUEUE)
            if raw is None:
                return text.parse_jobs(self._read(text.SQUEUE_ROWS))
            return parse_jobs(raw)
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
    return bool(controllers_named(hosts)) or shutil.which("sinfo") is not None


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
