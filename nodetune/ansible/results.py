"""What a playbook run tells: per-host results, task outcomes, input problems, events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from nodetune.ansible.vault import NO_VAULT, Vault


class HostState(Enum):
    """A host's overall outcome of one playbook run."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class PlaybookOptions:
    """How any playbook (site, facts, reboot, the operator's own) is run by ansible-playbook."""

    check: bool = False
    diff: bool = False
    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    forks: int = 10
    # The operator's -e values, untouched: ansible-playbook parses them (K=V, JSON/YAML,
    # @file, a vaulted @file), so they mean exactly what they mean to ansible-playbook.
    extra_vars: tuple[str, ...] = ()
    timeout: int | None = None
    # -v count, passed on as ansible-playbook -v...; its output then comes as "output" events.
    verbosity: int = 0
    # The run's fact cache (a directory) instead of ansible-runner's own
    # (artifacts/fact_cache of this run): `apply --reboot` gives its reboot run
    # the apply run's, so reboot.yml sees the *_reboot_required facts the roles set.
    fact_cache: Path | None = None
    # The operator's --vault-id / --vault-password-file / --ask-vault-pass (nodetune.ansible.vault).
    vault: Vault = NO_VAULT

    def as_dict(self) -> dict[str, Any]:
        """The options as JSON-ready data for the run record."""
        return {
            "check": self.check, "diff": self.diff, "limit": self.limit,
            "tags": list(self.tags), "skip_tags": list(self.skip_tags), "forks": self.forks,
            "extra_vars": list(self.extra_vars), "timeout": self.timeout,
            "verbosity": self.verbosity, **self.vault.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class HostResult:
    """Per-host counters from ansible's final stats."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def state(self) -> HostState:
        """Worst outcome of the host."""
        if self.unreachable:
            return HostState.UNREACHABLE
        if self.failed:
            return HostState.FAILED
        if self.changed:
            return HostState.CHANGED
        return HostState.OK


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """One task's notable result on one host (changed, failed or unreachable)."""

    host: str
    task: str
    status: str
    message: str = ""
    role: str = ""
    # Unified diff of what the task changed or, in check mode, would change (--diff).
    diff: str = ""
    # The file a changed task names in its result (dest/path), when it has no diff.
    target: str = ""


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A role input rejected by playbooks/inputs.yml on one host (nothing was changed)."""

    host: str
    role: str
    task: str
    message: str


@dataclass(frozen=True, slots=True)
class PlaybookEvent:
    """A live event of a running playbook, for a progress display."""

    kind: str  # "play", "task", "result", "output" (ansible's own text, with -v)
    host: str | None = None
    task: str | None = None
    status: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class PlaybookResult:
    """The outcome of one playbook run."""

    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    hosts: tuple[HostResult, ...]
    failed_tasks: tuple[TaskOutcome, ...]
    changed_tasks: tuple[TaskOutcome, ...]
    custom_stats: Mapping[str, Any]
    artifacts: Path
    duration_s: float
    # The ansible.cfg in force and where it came from (ansible_env.AnsibleConfig.describe).
    ansible_config: str = ""

    @property
    def input_problems(self) -> tuple[InputProblem, ...]:
        """Inputs that playbooks/inputs.yml rejected (set_stats nodetune_input_errors)."""
        raw = self.custom_stats.get("nodetune_input_errors") or {}
        out = []
        for host, errors in sorted(raw.items()) if isinstance(raw, Mapping) else ():
            for err in errors if isinstance(errors, list) else [errors]:
                e = err if isinstance(err, Mapping) else {"msg": str(err)}
                out.append(InputProblem(host=str(host), role=str(e.get("role", "")),
                                        task=str(e.get("task", "")),
                                        message=" ".join(str(e.get("msg", "")).split())))
        return tuple(out)

    @property
    def diffs(self) -> tuple[TaskOutcome, ...]:
        """Changed (or, in check mode, would-change) tasks that carry a diff."""
        return tuple(t for t in self.changed_tasks if t.diff)
