"""Filters for playbooks/inputs.yml: which roles' input checks a run selects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# The collection's stage playbooks (this file is plugins/filter/inputs.py).
STAGES = Path(__file__).resolve().parents[2] / "playbooks" / "stages"
IMPORT_ROLE = ("ansible.builtin.import_role", "import_role",
               "ansible.builtin.include_role", "include_role")


def nodetune_stage_roles(stages: list[str] | None = None, stages_dir: str | None = None
                         ) -> list[str]:
    """The roles the stage playbooks run, in their order: the one list of nodetune's roles.

    ``stages`` names playbooks/stages/NAME.yml files (all of them, by name, when empty).
    A role a stage's play imports is a role whose inputs the inputs pass checks, so a
    new role is registered by the play that runs it.
    """
    base = Path(stages_dir) if stages_dir else STAGES
    names = list(stages or []) or sorted(p.stem for p in base.glob("*.yml"))
    roles: list[str] = []
    for name in names:
        path = base / f"{name}.yml"
        if not path.is_file():
            raise ValueError(f"nodetune_stage_roles: no stage playbook {path}")
        for play in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            for task in play.get("tasks") or []:
                spec = next((task[key] for key in IMPORT_ROLE if key in task), None)
                if not isinstance(spec, dict):
                    continue
                role = str(spec.get("name", "")).rsplit(".", 1)[-1]
                if role and role not in roles:
                    roles.append(role)
    return roles


def nodetune_input_roles_selected(roles: list[str], role_tags: dict[str, list[str]],
                                  run_tags: list[str], skip_tags: list[str]) -> list[str]:
    """The roles of ``roles`` whose input checks run under these --tags / --skip-tags.

    A role is checked unless it is skipped by name, and when the run selects all
    tags or any tag the role's checks run under (``role_tags[role]``, default the
    role's own name: roce_qos's also run under nccl_config).
    """
    selected = []
    for role in roles:
        if role in skip_tags:
            continue
        tags = set(role_tags.get(role) or [role])
        if "all" in run_tags or tags & set(run_tags):
            selected.append(role)
    return selected


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        """Return the filters this plugin provides."""
        return {"nodetune_input_roles_selected": nodetune_input_roles_selected,
                "nodetune_stage_roles": nodetune_stage_roles}
