#!/usr/bin/python
"""Documentation of the systemd_service action (plugins/action/systemd_service.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: systemd_service
short_description: ansible.builtin.systemd_service, predicting only where the task asks
author:
  - nodetune maintainers (@nodetune)
description:
  - Runs C(ansible.builtin.systemd_service) with the same options.
options:
  name: {type: str, description: The unit.}
extends_documentation_fragment:
  - nodetune.cluster.predict_only
"""

EXAMPLES = r"""
- name: Start DCGM, or only say so on a busy node
  nodetune.cluster.systemd_service:
    name: nvidia-dcgm
    state: started
    predict_only: "{{ node_is_busy }}"
"""

RETURN = r"""
predicted:
  description: With I(predict_only), whether a real run would have changed something.
  type: bool
  returned: when I(predict_only) is true outside check mode
"""
