"""The roles as shipped with nodetune: their defaults and plugins, and where a variable's
effective value came from (the inventory, else the role's default)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from nodetune.ansible.content import content_dir
from nodetune.errors import InputError
from nodetune.files import read_yaml


@dataclass(frozen=True, slots=True)
class Value:
    """A variable's effective value and where it came from."""

    name: str
    value: Any
    from_inventory: bool

    @property
    def source(self) -> str:
        """``name (inventory)`` or ``name (role default)``."""
        return f"{self.name} ({'inventory' if self.from_inventory else 'role default'})"


@functools.cache
def role_defaults(role: str) -> Mapping[str, Any]:
    """``roles/<role>/defaults/main.yml`` as shipped with nodetune."""
    path = content_dir() / "roles" / role / "defaults" / "main.yml"
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a mapping")
    return data


@functools.cache
def role_plugin(relative: str) -> ModuleType:
    """One of the collection's plugins (``plugins/...py``), imported by path."""
    path: Path = content_dir() / relative
    spec = importlib.util.spec_from_file_location(f"nodetune_role_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
