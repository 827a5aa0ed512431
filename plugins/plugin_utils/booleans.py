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
FILTER_FALSE = frozenset(("no", "off", "false", "0"))


def two_faced(value: object) -> bool:
    """Text an argument spec reads as true and the ``bool`` filter as false."""
    return (isinstance(value, str) and value.lower().strip() in SPEC_TRUE_TEXT
            and not filter_bool(value))


def filter_bool(value: object) -> bool:
    """``value`` as the ``bool`` filter reads it (``to_bool``, ansible-core 2.19 and 2.21).

    Text lower-cased, an integer or bool as its text, true where that is one of
    ``FILTER_TRUE``; anything else only where it equals 1 (``1.0``); what cannot be
    compared is false. The filter also warns (deprecated) on a value outside its words;
    this reading does not.
    """
    word: object = value
    if isinstance(value, str):
        word = value.lower()
    elif isinstance(value, int):
        word = str(value).lower()
    try:
        if word in FILTER_TRUE:
            return True
        return word not in FILTER_FALSE and word == 1
    except TypeError:
        return False
