"""`apply` and `facts` as library calls: run the playbook, reboot who asked, judge, record.

The command line only parses options and prints; everything here returns values
and raises :mod:`nodetune.errors`, never prints or exits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodetune.ansible import extra_vars as extra_vars_mod
from nodetune.ansible import inventory as inventory_mod
from nodetune.ansible import role_vars, targets
from nodetune.ansible.content import content_dir
from nodetune.ansible.results import (
    HostResult,
    HostState,
    PlaybookEvent,
    PlaybookOptions,
    PlaybookResult,
    TaskOutcome,
)
from nodetune.ansible.runner import run_playbook, with_hosts_gone
from nodetune.ansible.vault import NO_VAULT, Vault
from nodetune.apply import busy as busy_mod
from nodetune.apply import hostkeys, unreachable
from nodetune.errors import ExitCode
from nodetune.records import RunRecord
from nodetune.remote import ssh_config

log = logging.getLogger(__name__)

OnEvent = Callable[[str, PlaybookEvent], None]  # (stage: "apply" | "reboot" | "facts", event)


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    """What one ``apply`` did: the playbook, the reboot (if any), the verdict, the record."""

    result: PlaybookResult
    reboot: PlaybookResult | None
    exit_code: ExitCode
    report: Mapping[str, Any]
    record: Path


@dataclass(frozen=True, slots=True)
class FactsOutcome:
    """What ``facts`` gathered, per host, and the verdict."""

    result: PlaybookResult
    facts: Mapping[str, Any]
    exit_code: ExitCode
    report: Mapping[str, Any]
    record: Path


def selection(inventory: Path, *, limit: str | None, extra_vars: Sequence[str] = (),
              playbook: str = "site.yml", vault: Vault = NO_VAULT) -> inventory_mod.Inventory:
    """The inventory with the hosts a bundled playbook's plays target under ``limit``
    (:mod:`nodetune.ansible.targets`: the GPU node group, or ``-e nodetune_hosts=GROUP``).

    The group must have hosts: otherwise Ansible would skip every play and call
    that a success. A playbook of the operator's own (a path) targets what it
    says; then all hosts.

    Raises:
        InventoryError: the inventory is unusable, the target group is missing or
            empty, or ``limit`` leaves none of its hosts (exit 2, nothing has run).
        InputError: an ``-e`` value is not a mapping of variables.
    """
    # Every play of the bundled playbooks targets {{ nodetune_hosts | default('gpu_nodes') }}.
    pattern = targets.pattern_of(extra_vars, vault=vault) if "/" not in playbook else "all"
    return targets.select(inventory, limit=limit, pattern=pattern, vault=vault)


def check_inputs(inventory: Path, *, options: PlaybookOptions, playbook: str,
                 strict_vars: bool, inv: inventory_mod.Inventory | None = None,
                 ) -> tuple[tuple[role_vars.UnknownVar, ...], dict[str, Any]]:
    """What is checked before ansible-playbook starts: the selection (``inv``, when the
    caller has read it already), every host's connection variables (the values that go
    into an ssh_config: :func:`~nodetune.remote.ssh_config.check_hosts`), every ``-e``
    value, and role-prefixed variables no role takes (warned, or refused when strict).

    Returns:
        The unknown role-prefixed variables, and the ``-e`` variables as the play sees
        them (later ones win), read once.

    Raises:
        InputError: any of them is bad input (exit 2).
    """
    inv = inv or selection(inventory, limit=options.limit, extra_vars=options.extra_vars,
                           playbook=playbook, vault=options.vault)
    ssh_config.check_hosts(inv.hosts)
    extras = extra_vars_mod.read(options.extra_vars, vault=options.vault)
    merged: dict[str, Any] = {}
    for values in extras:
        merged.update(values or {})
    return role_vars.check(inv.hosts, extra_vars=extras, inventory=inventory,
                           roles=content_dir() / "roles", strict=strict_vars), merged


def exit_code(result: PlaybookResult) -> ExitCode:
    """The verb's exit code for a playbook result (README, "Exit codes")."""
    if result.status == "timeout":
        return ExitCode.TIMEOUT
    if result.input_problems:  # playbooks/inputs.yml: nothing was changed anywhere
        return ExitCode.BAD_INPUT
    states = {h.state for h in result.hosts}
    if HostState.UNREACHABLE in states:
        return ExitCode.INFRASTRUCTURE
    if HostState.FAILED in states or result.status == "failed":
        return ExitCode.CHECK_FAILED
    return ExitCode.OK


def apply(inventory: Path, *, playbook: str, options: PlaybookOptions, record: RunRecord,
          reboot: bool = False, serial: int = 1, on_event: OnEvent = lambda _s, _e: None,
          cancel: threading.Event | None = None, strict_vars: bool = False,
          inv: inventory_mod.Inventory | None = None,
          fail_on_change: bool = False, accept_new_host_keys: bool = False,
          allow_busy: bool = False) -> ApplyOutcome:
    """Run ``playbook``; with ``reboot``, reboot the hosts that need it in batches of ``serial``
    and re-check them; write the run record. ``inv`` is :func:`selection`'s answer where the
    caller has it: nodetune then reads the inventory once (ansible-playbook reads it itself).

    ``fail_on_change``: a run that changed (or under --check would change) something and
    otherwise passed exits 1, so a pipeline can gate on drift. ``accept_new_host_keys``:
    record the keys of hosts seen for the first time (:mod:`nodetune.apply.hostkeys`).
    Hosts that failed or were unreachable are written to ``retry.txt`` in the record,
    one name a line, for ``--limit @FILE``.

    Hosts Slurm has allocated to jobs (:mod:`nodetune.apply.busy`), unless
    ``allow_busy``: the roles still change files and settings there, and defer what
    would disturb the jobs (restarts, module loads, reboots, ``reboot``'s too); the
    record's ``deferred`` lists per host what was deferred, and the exit code is
    what it would be otherwise (a deferral is no failure).

    Raises:
        InputError: the playbook or an ``-e @file`` is missing, the GPU node group
            is missing or empty, an ``-e`` value is no mapping, a role-prefixed
            variable is unknown under ``strict_vars``, a ``nodetune_reboot_via_slurm``
            is not a boolean, or ansible-playbook refused the options (exit 2).
        PlaybookError: ansible-playbook could not run at all (exit 3).
        SlurmError: Slurm is configured and cannot be asked which nodes run jobs
            (exit 3, nothing has run; --allow-busy does not ask).
        RecordError: the run record cannot be written (exit 3).
    """
    inv = inv or selection(inventory, limit=options.limit, extra_vars=options.extra_vars,
                           playbook=playbook, vault=options.vault)
    unknown, extra = check_inputs(inventory, options=options, playbook=playbook,
                           strict_vars=strict_vars, inv=inv)
    busy_mod.check_via_slurm(inv.hosts, extra)
    found = busy_mod.find(inv, inv.hosts, allow_busy=allow_busy)
    busy = found.busy
    if found.unknown:
        log.warning("Slurm lists no node for %s (nodetune_slurm_nodename): applied as idle "
                    "nodes, nothing deferred there", ", ".join(found.unknown))
    if accept_new_host_keys:
        hostkeys.accept_new(inv.hosts)
    result = run_playbook(playbook, inventory, options=busy_mod.with_busy(options, busy),
                          artifact_dir=record.path,
                          on_progress=lambda e: on_event("apply", e), cancel=cancel)
    result = unreachable.explain(
        with_hosts_gone(result, inventory, forks=options.forks, vault=options.vault), inv)
    code = exit_code(result)
    needed = reboot_required(result)
    doc: dict[str, Any] = {
        "inventory": str(inventory), "options": options.as_dict(), "status": result.status,
        "exit_code": int(code), "duration_s": round(result.duration_s, 2),
        "hosts": [host_dict(h) for h in result.hosts],
        "changed_tasks": [task_dict(t) for t in result.changed_tasks],
        "failed_tasks": [task_dict(t) for t in result.failed_tasks],
        "reboot_required": needed, "artifacts": str(result.artifacts),
        "input_problems": [{"host": p.host, "role": p.role, "task": p.task, "message": p.message}
                           for p in result.input_problems],
        "ansible_config": result.ansible_config,
        "unknown_vars": [u.message() for u in unknown],
        "allow_busy": allow_busy,
        "not_in_slurm": list(found.unknown),
    }
    files = {}
    if result.diffs:
        files["diff.txt"] = "".join(f"=== {t.host}: [{t.task}]\n{t.diff}" for t in result.diffs)
        doc["diff_file"] = str(record.path / "diff.txt")
    if code is ExitCode.OK and fail_on_change and result.changed_tasks:
        code = ExitCode.CHECK_FAILED
        doc["exit_code"] = int(code)
        doc["fail_on_change"] = True
    retry = retry_hosts(result)
    if retry:
        files[RETRY_FILE] = "".join(f"{h}\n" for h in retry)
        doc["retry_file"] = str(record.path / RETRY_FILE)
    # A busy node is rebooted only through Slurm (`scontrol reboot ASAP` waits for its
    # jobs); Slurm is asked again just before the direct reboots, as a job may have
    # started on a node while the play ran.
    # -e nodetune_reboot_via_slurm=true counts as the play counts it (``extra``).
    to_reboot, held, busy, recheck_error = busy_mod.reboots(
        inv, sorted(needed), busy, allow_busy=allow_busy, recheck=reboot and not options.check,
        extra=extra)
    doc["deferred"] = busy_mod.deferred(
        busy, result.custom_stats.get("nodetune_deferred") or {},
        reboot=held if reboot else ())
    if recheck_error:
        doc["reboot_recheck_error"] = recheck_error
    rebooted = None
    if reboot and to_reboot and not options.check:
        rebooted = run_playbook(
            "reboot.yml", inventory,
            options=reboot_options(options, to_reboot, serial, result.artifacts),
            artifact_dir=record.path / "reboot", on_progress=lambda e: on_event("reboot", e),
            cancel=cancel)
        reboot_code = exit_code(rebooted)
        doc["reboot"] = {"hosts": [host_dict(h) for h in rebooted.hosts],
                         "failed_tasks": [task_dict(t) for t in rebooted.failed_tasks],
                         "status": rebooted.status, "exit_code": int(reboot_code),
                         "duration_s": round(rebooted.duration_s, 2)}
        if reboot_code > code:
            code = reboot_code
            doc["exit_code"] = int(code)
    path = record.write(doc, files=files)
    return ApplyOutcome(result=result, reboot=rebooted, exit_code=code, report=doc,
                        record=path)


RETRY_FILE = "retry.txt"


def retry_hosts(result: PlaybookResult) -> list[str]:
    """The hosts to run again: those that failed or could not be reached."""
    return [h.host for h in result.hosts
            if h.state in (HostState.FAILED, HostState.UNREACHABLE)]


def reboot_options(options: PlaybookOptions, hosts: list[str], serial: int,
                   applied: Path) -> PlaybookOptions:
    """Options for playbooks/reboot.yml: exactly ``hosts``, the operator's -e, the batch size,
    and the fact cache of the apply run whose artifacts are ``applied``.

    reboot.yml reads the *_reboot_required facts the roles set in that run. No
    other run reads that cache, so a later apply never sees a need an earlier one found.
    """
    return dataclasses.replace(
        options, check=False, diff=False, tags=(), skip_tags=(), limit=",".join(hosts),
        extra_vars=(*options.extra_vars, json.dumps({"nodetune_reboot_serial": serial})),
        fact_cache=applied / "fact_cache")


def reboot_required(result: PlaybookResult) -> dict[str, Any]:
    """Hosts whose roles said they need a reboot, with the reasons."""
    reboot = dict(result.custom_stats.get("nodetune_reboot_required") or {})
    return {h: r for h, r in reboot.items() if r}


def facts(inventory: Path, *, options: PlaybookOptions, record: RunRecord,
          on_event: OnEvent = lambda _s, _e: None,
          cancel: threading.Event | None = None, strict_vars: bool = False,
          inv: inventory_mod.Inventory | None = None) -> FactsOutcome:
    """Gather node facts with playbooks/facts.yml; write the run record.

    Raises:
        InventoryError: the GPU node group is missing or empty (exit 2).
        InputError: a role-prefixed variable is unknown under ``strict_vars`` (exit 2).
        PlaybookError: ansible-playbook could not run at all (exit 3).
        RecordError: the run record cannot be written (exit 3).
    """
    inv = inv or selection(inventory, limit=options.limit, extra_vars=options.extra_vars,
                           playbook="facts.yml", vault=options.vault)
    unknown, _extra = check_inputs(inventory, options=options, playbook="facts.yml",
                           strict_vars=strict_vars, inv=inv)
    result = run_playbook("facts.yml", inventory, options=options, artifact_dir=record.path,
                          on_progress=lambda e: on_event("facts", e), cancel=cancel)
    result = unreachable.explain(with_hosts_gone(result, inventory, vault=options.vault), inv)
    gathered: dict[str, Any] = dict(result.custom_stats.get("nodetune_facts") or {})
    code = exit_code(result)
    doc = {"inventory": str(inventory), "status": result.status, "exit_code": int(code),
           "hosts": [host_dict(h) for h in result.hosts],
           "failed_tasks": [task_dict(t) for t in result.failed_tasks], "facts": gathered,
           "unknown_vars": [u.message() for u in unknown]}
    path = record.write(doc)
    return FactsOutcome(result=result, facts=gathered, exit_code=code, report=doc, record=path)


def host_dict(h: HostResult) -> dict[str, Any]:
    """A host's counters for the run record."""
    return {"host": h.host, "state": h.state.value, "ok": h.ok, "changed": h.changed,
            "failed": h.failed, "unreachable": h.unreachable, "skipped": h.skipped,
            "rescued": h.rescued, "ignored": h.ignored}


def task_dict(t: TaskOutcome) -> dict[str, Any]:
    """A notable task result for the run record."""
    return {"host": t.host, "task": t.task, "role": t.role, "status": t.status,
            "message": t.message}
