#!/usr/bin/python
"""Documentation of the dnf action (plugins/action/dnf.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dnf
short_description: ansible.builtin.dnf, predicting only where the task asks
author:
  - nodetune maintainers (@nodetune)
description:
  - Runs C(ansible.builtin.dnf) with the same options.
options:
  name: {type: list, elements: str, description: The builtin module's package names.}
extends_documentation_fragment:
  - nodetune.cluster.predict_only
"""

EXAMPLES = r"""
- name: Install the pinned toolkit packages, or only predict it on a busy node
  nodetune.cluster.dnf:
    name: ["nvidia-container-toolkit-1.20.1-1"]
    state: present
    predict_only: "{{ node_is_busy }}"
"""

RETURN = r"""
predicted:
  description: With I(predict_only), whether a real run would have changed something.
  type: bool
  returned: when I(predict_only) is true outside check mode
"""
