"""The unit tests that exercise Ansible itself, marked ``ansible``.

They run ansible-playbook, ansible-runner, ansible-inventory or the collection's
modules, filters and actions, so the suite runs them on both ansible-core lines it
supports (scripts/test.sh: .venv's, then 2.21 through scripts/ansible-next.sh,
``pytest -m ansible``). The rest of the unit tests run no Ansible: ``-m "not
ansible"``, the inner loop's quick pass (``./scripts/test.sh quick``: README,
"Development").
"""

from __future__ import annotations

import pytest

ANSIBLE_MODULES = frozenset(f"test_{name}.py" for name in (
    "ansible_env", "apt_action", "cli_apply", "collection_meta", "collection_modules",
    "deb822_action", "defer_disruptive", "driver_inputs", "driver_packages", "escaping", "inputs",
    "inputs_filter", "inventory", "local_fact", "molecule_state", "net_mtu", "net_role_inputs",
    "nic_inputs", "nics", "node_facts", "nodetune_mtu", "nodetune_roce_qos", "nodetune_sysctl",
    "playbooks", "reboot_report", "roce_qos", "runner", "slurm_healthcheck_inputs",
    "stack_inputs", "targets", "truth"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in ANSIBLE_MODULES and item.path.parent.name == "unit":
            item.add_marker(pytest.mark.ansible)
