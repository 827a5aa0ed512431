#!/usr/bin/python
"""Documentation of the package action (plugins/action/package.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: package
short_description: The package manager's module, predicting only where the task asks
author:
  - nodetune maintainers (@nodetune)
description:
  - Runs the package manager's builtin module, C(ansible.builtin.apt) or
    C(ansible.builtin.dnf) as C(ansible_facts.pkg_mgr) names it, with the same options.
options:
  name: {type: list, elements: str, description: The builtin module's package names.}
extends_documentation_fragment:
  - nodetune.cluster.predict_only
"""

EXAMPLES = r"""
- name: Install DCGM, or only predict it on a busy node
  nodetune.cluster.package:
    name: ["datacenter-gpu-manager-4-cuda12"]
    state: present
    predict_only: "{{ node_is_busy }}"
"""

RETURN = r"""
predicted:
  description: With I(predict_only), whether a real run would have changed something.
  type: bool
  returned: when I(predict_only) is true outside check mode
"""
