#!/usr/bin/python
"""Documentation of the apt action (ansible.builtin's module; check mode without python3-apt)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt
short_description: ansible.builtin.apt, with check mode on a node without python3-apt
author:
  - nodetune maintainers (@nodetune)
description:
  - Runs C(ansible.builtin.apt) with the same options.
  - In a real run the builtin module installs its library, python3-apt, itself before anything
    else. In check mode it fails where python3-apt is missing; this action reports such a task
    as C(changed) with C(pending) and a message instead, so C(--check --diff) goes on.
options:
  name: {type: list, elements: str, description: The builtin module's package names.}
extends_documentation_fragment:
  - nodetune.cluster.predict_only
"""

EXAMPLES = r"""
- name: Install the pinned toolkit packages
  nodetune.cluster.apt:
    name: ["nvidia-container-toolkit=1.20.1-1"]
    state: present
"""

RETURN = r"""
pending:
  description: Check mode only, where python3-apt is missing; the task counts as changed.
  type: bool
  returned: when python3-apt is missing in check mode
predicted:
  description: With I(predict_only), whether a real run would have changed something.
  type: bool
  returned: when I(predict_only) is true outside check mode
"""
