#!/usr/bin/python
"""Documentation of the role_argument_specs action (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: role_argument_specs
short_description: Validate several roles' variables against their argument specs in one task
author:
  - nodetune maintainers (@nodetune)
description:
  - Validates the host's variables against the I(entry_point) argument spec of each role in
    I(roles), the way C(ansible.builtin.validate_argument_spec) does for one role.
  - Never fails for invalid input; each role's errors are returned in I(input_errors), so a
    play can report every role's errors on every host together.
  - Runs on the controller only.
options:
  roles: {type: list, elements: str, required: true, description: Roles of this collection.}
  entry_point: {type: str, default: validate, description: The argument spec entry point.}
"""

EXAMPLES = r"""
- name: Check every selected role's variables against its argument spec
  nodetune.cluster.role_argument_specs:
    roles: [net_sysctl, net_mtu]
  register: __specs
"""

RETURN = r"""
input_errors:
  description: One entry per role whose variables failed its spec, with role, task and msg.
  type: list
  returned: always
roles: {description: The roles validated (I(roles))., type: list, returned: always}
failed_roles: {description: The roles in input_errors., type: list, returned: always}
"""
