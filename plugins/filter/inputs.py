"""Filters for playbooks/inputs.yml: which roles' input checks a run selects."""

from __future__ import annotations

from typing import Any


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
        return {"nodetune_input_roles_selected": nodetune_input_roles_selected}
