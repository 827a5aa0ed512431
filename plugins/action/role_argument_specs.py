"""Validate several roles' variables against their argument specs in one task.

The inputs pass (playbooks/inputs.yml) checks every selected role before any
role changes a node. Ansible's implicit validation is one task per role; a
converged run pays per task, so this action validates each role's entry point
(``validate`` by default) the way ``ansible.builtin.validate_argument_spec``
does, and reports every role's errors, one entry a role, without failing: the
play records them with the other input errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.nodetune.cluster.plugins.plugin_utils.booleans import two_faced

# plugins/action/<this> in the collection: its roles are two levels up.
ROLES = Path(__file__).resolve().parents[2] / "roles"
# Each task runs in a forked worker, so nothing read here outlives the task: the
# specs are read every time, with libyaml's loader where it is there (about a
# tenth of the pure-Python loader's time for the eight specs).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def role_spec(role: str, entry: str, roles: Path = ROLES) -> dict[str, Any]:
    """The ``entry`` point's spec of ``role`` (its short description and options)."""
    path = roles / role / "meta" / "argument_specs.yml"
    try:
        text = path.read_text(encoding="utf-8")
        spec: dict[str, Any] = yaml.load(text, Loader=_LOADER)["argument_specs"][entry]  # noqa: S506
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(
            f"role {role}: no argument spec {entry!r} in {path}: {exc}") from exc
    return spec


def ambiguous(options: dict[str, Any], provided: dict[str, Any]) -> list[str]:
    """A bool option given text the spec reads as true and the role's ``| bool`` as false
    (``y``, ``t``: :mod:`plugin_utils.booleans`), which would turn the role off unseen."""
    return [f"{name}: {provided[name]!r} is true to this argument spec but false to the "
            "role's `| bool`; write true or yes"
            for name, opt in options.items()
            if isinstance(opt, dict) and opt.get("type") == "bool" and name in provided
            and two_faced(provided[name])]


class ActionModule(ActionBase):
    """nodetune.cluster.role_argument_specs: one validation for several roles."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("roles", "entry_point"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        roles = self._task.args.get("roles") or []
        entry = str(self._task.args.get("entry_point") or "validate")
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise AnsibleActionFail(f"roles must be a list of role names, got {roles!r}")
        errors = []
        for role in roles:
            spec = role_spec(role, entry)
            options = spec.get("options") or {}
            provided = self._templar.template(
                {name: task_vars[name] for name in options if name in task_vars})
            checked = ArgumentSpecValidator(options).validate(
                provided, validate_role_argument_spec=True)
            messages = list(checked.error_messages) + ambiguous(options, provided)
            if messages:
                errors.append({
                    "role": role,
                    "task": f"Validating arguments against arg spec '{entry}' - "
                            f"{spec.get('short_description', role)}",
                    "msg": "Validation of arguments failed:\n" + "\n".join(messages),
                })
        result.update(changed=False, roles=list(roles), input_errors=errors,
                      failed_roles=[e["role"] for e in errors],
                      msg=f"{len(roles) - len(errors)} of {len(roles)} role(s) passed "
                          f"their argument spec '{entry}'")
        return result
