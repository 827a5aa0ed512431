"""The packages' one direction: check/ uses validate/, both use measure/, never back up.

A folder-level cycle (validate/ importing check/ while check/ imports validate/) makes
neither readable on its own; this keeps the arrow one way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nodetune"
# package -> the packages it must not import (directly, lazily or under TYPE_CHECKING)
FORBIDDEN = {
    "validate": ("nodetune.check",),
    "measure": ("nodetune.check", "nodetune.validate"),
}


def imports(source: str) -> set[str]:
    """Every absolute module a source imports, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def upward(package: str, sources: dict[str, str]) -> list[str]:
    """``file: module`` for each import of ``package``'s files that FORBIDDEN refuses."""
    return [f"{name}: {mod}" for name, text in sorted(sources.items())
            for mod in sorted(imports(text))
            if any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN[package])]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_runs_back_up(package: str) -> None:
    files = {p.name: p.read_text(encoding="utf-8")
             for p in (PACKAGE / package).rglob("*.py")}
    assert files, package
    assert upward(package, files) == []


def test_an_import_back_up_is_found_wherever_it_stands() -> None:
    lazy = "def f():\n    from nodetune.check.model import CheckResult\n"
    typed = "if TYPE_CHECKING:\n    from nodetune.check import model\n"
    assert upward("validate", {"a.py": lazy, "b.py": typed, "c.py": "import nodetune.check"}) \
        == ["a.py: nodetune.check.model", "a.py: nodetune.check.model.CheckResult",
            "b.py: nodetune.check", "b.py: nodetune.check.model", "c.py: nodetune.check"]
    assert upward("measure", {"d.py": "from nodetune.validate import plan\n"}) \
        == ["d.py: nodetune.validate", "d.py: nodetune.validate.plan"]
    # a name that only starts the same is another package
    assert upward("validate", {"e.py": "import nodetune.checkpoint\n"}) == []
