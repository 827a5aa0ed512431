"""Jinja test ``nodetune.cluster.control_host``: is this host the machine running Ansible?

The one definition of the reboot guard: the reboot playbook and the roles' reboot
handlers never reboot the control host, whose reboot would end the run itself.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.nodetune.cluster.plugins.module_utils.connection import (
    connection_plugin,
)

DOCUMENTATION = r"""
name: control_host
short_description: Whether a host is the machine running Ansible
description:
  - True when the host is reached through the C(local) connection plugin, however
    it is spelled (C(local), C(ansible.builtin.local), C(ansible.legacy.local)), or is
    named C(localhost), C(127.0.0.1) or C(::1).
positional: connection
options:
  _input: {type: str, required: true, description: The host's inventory_hostname.}
  connection: {type: str, default: ssh, description: The host's ansible_connection.}
"""

EXAMPLES = r"""
- name: Reboot, never the control host
  ansible.builtin.reboot:
  when: inventory_hostname is not nodetune.cluster.control_host(ansible_connection | default('ssh'))
"""

RETURN = r"""
_value: {type: bool, description: True for the control host.}
"""

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def control_host(hostname: str, connection: str = "ssh") -> bool:
    """True for the machine running Ansible: a local connection or a loopback name."""
    return connection_plugin(connection) == "local" or str(hostname) in LOCAL_NAMES


class TestModule:
    """Ansible's entry point for Jinja tests."""

    def tests(self) -> dict[str, Any]:
        return {"control_host": control_host}
