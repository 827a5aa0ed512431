"""A yes/no that Ansible reads two ways (controller side; the collection's one copy of
the rule that nodetune.ansible.truth applies before Ansible runs).

A role's argument spec (``type: bool``) reads text with ``convert_bool``
(``ansible.module_utils.parsing.convert_bool.BOOLEANS_TRUE``: ``y``, ``yes``, ``on``,
``1``, ``true``, ``t``), lower-cased and stripped; the roles' tasks read the same value
with the ``bool`` filter (``to_bool``, ``ansible/plugins/filter/core.py``), whose true
words are only ``yes``, ``on``, ``true``, ``1``, and which coerces the rest to false with a
deprecation warning (ansible-core 2.19 and 2.21, read 2026-11-30). ``y`` passes the spec
as true and then turns the role off.
"""

from __future__ import annotations

SPEC_TRUE_TEXT = frozenset(("y", "yes", "on", "1", "true", "t"))
FILTER_TRUE = frozenset(("yes", "on", "true", "1"))


def two_faced(value: object) -> bool:
    """Text an argument spec reads as true and the ``bool`` filter as false."""
    return (isinstance(value, str) and value.lower().strip() in SPEC_TRUE_TEXT
            and value.lower() not in FILTER_TRUE)
