"""Load a role's Ansible plugin (filter or module) by path, for unit tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_plugin(relative: str) -> ModuleType:
    """Import ``ROOT/relative`` as a standalone module (roles are not packages)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
