"""Inventory values that hold Jinja, evaluated as Ansible would, before any node is contacted.

Only the inventory's own variables (and, where the caller gives them, the roles'
defaults) are known here, not a node's facts: a value that needs more is bad
input naming its variable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nodetune.errors import InputError


def render(name: str, raw: Any, variables: Mapping[str, Any], *, host: str) -> Any:
    """``raw`` with its templates evaluated against ``variables``; unchanged without any.

    Raises:
        InputError: the template cannot be evaluated (naming ``name`` and ``host``).
    """
    if "{{" not in repr(raw) and "{%" not in repr(raw):
        return raw
    try:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
        try:
            from ansible.template import trust_as_template
        except ImportError:  # ansible-core < 2.19 templates every string
            def trust_as_template(v: Any) -> Any:
                return v
        trusted = map_strings(dict(variables), trust_as_template)
        return Templar(loader=DataLoader(), variables=trusted).template(
            map_strings(raw, trust_as_template))
    except Exception as exc:
        raise InputError(f"{name}: cannot evaluate {raw!r} ({exc})", host=host) from None


def host_variables(name: str, variables: Mapping[str, Any]) -> dict[str, Any]:
    """A host's variables as its templates see them: its own, with ``inventory_hostname``
    and ``inventory_hostname_short`` where the inventory does not set them."""
    return {"inventory_hostname": name, "inventory_hostname_short": name.partition(".")[0],
            **variables}


def available() -> bool:
    """Whether Ansible's templating can run here (not on a node whose node-local health
    check has the package alone)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ansible.template") is not None
    except ImportError:
        return False


def is_template(value: Any) -> bool:
    """Whether ``value`` is a string Ansible would template (``{{`` or ``{%`` in it)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def map_strings(value: Any, fn: Callable[[str], Any]) -> Any:
    """``value`` with ``fn`` applied to every string inside it (mappings and lists walked)."""
    if isinstance(value, Mapping):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(v, fn) for v in value]
    return fn(value) if isinstance(value, str) else value
