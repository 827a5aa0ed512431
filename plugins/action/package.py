"""The package manager's module (apt or dnf, as ansible.builtin.package picks it from
``ansible_facts.pkg_mgr``), with ``predict_only`` (plugins/plugin_utils/predict.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodetune.cluster.plugins.action.apt import ActionModule as AptAction

# ansible.builtin.package's own choice for the managers nodetune's roles support.
MODULES = {"apt": "ansible.builtin.apt", "dnf": "ansible.builtin.dnf",
           "dnf5": "ansible.builtin.dnf5"}


class ActionModule(AptAction):
    """nodetune.cluster.package: apt or dnf; ``predict_only``: in check mode. apt's check
    mode without python3-apt is pending, as in nodetune.cluster.apt (dnf never fails so)."""

    def module_for(self, task_vars: dict[str, Any]) -> str:
        return MODULES.get(str(task_vars.get("ansible_facts", {}).get("pkg_mgr")), "")
