"""An inventory value read as a yes/no the way the roles' ``| bool`` reads it.

nodetune decides some things before Ansible runs (whether reboot.yml reboots through
Slurm, whether a role is enabled, what ``check`` expects) from the same inventory
variables the plays read with ``| bool``. Every such reader is here, so none of them
can disagree with the play. ansible-core's ``bool`` filter (2.19 and 2.21,
``ansible/plugins/filter/core.py``: ``to_bool``) takes ``yes``/``on``/``true``/``1`` and
``no``/``off``/``false``/``0`` in any case, and integers and booleans by their text;
anything else it coerces with a deprecation warning, to true only where it equals 1.
"""

from __future__ import annotations

TRUE = frozenset({"yes", "on", "true", "1"})
FALSE = frozenset({"no", "off", "false", "0"})


def known(value: object) -> bool | None:
    """``value | bool`` where Ansible recognises ``value``; None where it only coerces it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | str):
        text = str(value).lower()
        return True if text in TRUE else False if text in FALSE else None
    return None


def as_bool(value: object) -> bool:
    """``value | bool`` as the play computes it, a value it only coerces included."""
    found = known(value)
    if found is not None:
        return found
    try:
        return bool(value == 1)
    except TypeError:  # as Ansible's own fallback: a value that cannot compare
        return False
