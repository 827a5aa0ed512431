"""An inventory value read as a yes/no: one rule, :func:`boolean`, for every such reader.

nodetune decides some things before Ansible runs (whether reboot.yml reboots through
Slurm, whether a role is enabled, what ``check`` expects, which health inputs apply) from
the same inventory variables the plays read. Every such reader calls :func:`boolean`, so
none of them can disagree with another or with the play.

The rule is Ansible's own, ``ansible.module_utils.parsing.convert_bool`` (ansible-core
2.19 and 2.21, ``lib/ansible/module_utils/parsing/convert_bool.py``, read 2026-11-30):
``BOOLEANS_TRUE`` is ``'y', 'yes', 'on', '1', 'true', 't', 1, 1.0, True`` and
``BOOLEANS_FALSE`` ``'n', 'no', 'off', '0', 'false', 'f', 0, 0.0, False``; text is
compared lower-cased and stripped. A role's argument spec (``type: bool``) checks its
variables with it, and fails the play on anything else: here that is bad input (exit 2).

The roles' tasks then read the raw value with the ``bool`` filter (``to_bool`` in
``ansible/plugins/filter/core.py``), which takes only ``yes``/``on``/``true``/``1`` as true
and coerces the rest with a deprecation warning, ``'y'`` and ``'t'`` to false. A value the
argument spec takes as true but the filter reads as false would have nodetune expect a role
that did not run: it is bad input too, naming the words both read alike.

An explicit null (``net_mtu_enabled: null``, or ``net_mtu_enabled:`` with nothing after it
in YAML) is not an unset variable: the argument spec fails the play on it ("argument
'net_mtu_enabled' is of type NoneType and we were unable to convert to bool", ansible-core
2.19, the variable from the inventory or ``-e``), the role's default notwithstanding; where
no argument spec checks it (reboot.yml's ``nodetune_reboot_via_slurm``), ``| bool`` reads
it as false with a deprecation warning. So every reader refuses it (:func:`boolean`), and
only a variable that is absent takes the default (:func:`setting`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

from nodetune.errors import InputError

BOOLEANS_TRUE: frozenset[object] = frozenset(("y", "yes", "on", "1", "true", "t", 1, 1.0, True))
BOOLEANS_FALSE: frozenset[object] = frozenset(("n", "no", "off", "0", "false", "f", 0, 0.0, False))
# The `bool` filter's own true words (to_bool's _valid_bool_true), compared lower-cased.
_FILTER_TRUE = frozenset({"yes", "on", "true", "1"})


def boolean(value: object, *, name: str, host: str) -> bool:
    """``value`` as a yes/no, by Ansible's ``convert_bool`` rule.

    Raises:
        InputError: ``value`` is not one of Ansible's booleans (null included), or is one
            the roles' ``| bool`` reads otherwise (``y``, ``t``); names host and variable.
    """
    if isinstance(value, bool):
        return value
    if value is None:
        raise InputError(f"{name} is null (written with no value), which Ansible does not "
                         "read as the default (a role's argument spec fails on it); write true "
                         "or false, or leave the variable out for the default", host=host)
    norm = value.lower().strip() if isinstance(value, str) else value
    if isinstance(norm, Hashable) and norm in BOOLEANS_TRUE:
        if isinstance(value, str) and value.lower() not in _FILTER_TRUE:
            raise InputError(f"{name} {value!r}: Ansible reads it as true in one place (an "
                             "argument spec) and false in another (`| bool`); write true or "
                             "yes", host=host)
        return True
    if isinstance(norm, Hashable) and norm in BOOLEANS_FALSE:
        return False
    raise InputError(f"{name} {value!r} is not a boolean (true/false, yes/no, on/off, 1/0)",
                     host=host)


def setting(variables: Mapping[str, object], name: str, *, default: bool, host: str,
            read: Callable[[str], object] | None = None) -> bool:
    """The variable ``name`` of ``variables`` as a yes/no: ``default`` (the role's) where it
    is absent, else its value by :func:`boolean`, an explicit null refused. ``read``: how a
    present value is read (templates evaluated), ``variables[name]`` where not given.

    Raises:
        InputError: as :func:`boolean`.
    """
    if name not in variables:
        return default
    value = read(name) if read is not None else variables[name]
    return boolean(value, name=name, host=host)
