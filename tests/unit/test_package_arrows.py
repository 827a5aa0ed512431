"""The packages' one direction: check/ and validate/ both use collective/ (an NCCL
collective run on nodes), container/ and measure/, never back up; check/ imports nothing
from validate/.

A folder-level cycle (validate/ importing check/ while check/ imports validate/) makes
neither readable on its own; this keeps the arrow one way. Nor may two modules import
each other round a loop, even under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nodetune"
# package -> the packages it must not import (directly, lazily or under TYPE_CHECKING)
FORBIDDEN = {
    "validate": ("nodetune.check",),
    "collective": ("nodetune.check", "nodetune.validate"),
    "container": ("nodetune.check", "nodetune.collective", "nodetune.validate"),
    "measure": ("nodetune.check", "nodetune.collective", "nodetune.container",
                "nodetune.validate"),
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
    assert upward("measure", {"d.py": "from nodetune.validate import result\n"}) \
        == ["d.py: nodetune.validate", "d.py: nodetune.validate.result"]
    # a name that only starts the same is another package
    assert upward("validate", {"e.py": "import nodetune.checkpoint\n"}) == []


# What check/ imports from validate/, module by module: nothing. What both use stands
# below both: collective/ (the plan, launcher and worker that run an NCCL collective on
# nodes, check's one-node all_reduce too) and measure/ (sizes, thresholds, sweep, jitter,
# host_env's node_python, the worker's line protocol, NCCL's log and the effective
# configuration read from it). A ratchet: this set may only shrink, and it is empty.
CHECK_USES_VALIDATE: frozenset[str] = frozenset()


def check_to_validate(graph: dict[str, set[str]]) -> set[str]:
    """``check.x -> validate.y`` for each module of check/ that imports one of validate/."""
    return {f"{m.removeprefix('nodetune.')} -> {d.removeprefix('nodetune.')}"
            for m, deps in graph.items() if m.startswith("nodetune.check.")
            for d in deps if d == "nodetune.validate" or d.startswith("nodetune.validate.")}


def test_check_imports_from_validate_only_what_it_did() -> None:
    found = check_to_validate(module_graph(PACKAGE))
    assert found - CHECK_USES_VALIDATE == set(), "a new import of validate/ by check/"
    assert found == CHECK_USES_VALIDATE, "an import went: drop it from CHECK_USES_VALIDATE"


def test_an_import_of_validate_by_check_is_named_by_module() -> None:
    graph = {"nodetune.check.a": {"nodetune.validate.result", "nodetune.measure.sizes"},
             "nodetune.validate.b": {"nodetune.validate.result"},
             "nodetune.check.c": {"nodetune.validate"}}
    assert check_to_validate(graph) == {"check.a -> validate.result", "check.c -> validate"}


def module_graph(root: Path) -> dict[str, set[str]]:
    """``nodetune.a.b`` -> the modules of the package it imports (at any depth of the file:
    lazily and under TYPE_CHECKING too); ``from nodetune.x import y`` counts as
    ``nodetune.x.y`` where that is a module, else as ``nodetune.x``."""
    def dotted(path: Path) -> str:
        return ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(
            ".__init__")

    modules = {dotted(p) for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                          else node.module for a in node.names}
        graph[dotted(path)] = {m for m in found if m in modules and m != dotted(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import loop once, as the modules along it (depth-first, three colours)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_loop() -> None:
    assert cycles(module_graph(PACKAGE)) == []


def test_a_loop_under_type_checking_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The floors of the package, from the ground up: a module imports only from a lower floor
# or from its own folder (docs/development.md's Layout draws the same picture).
FLOORS = (
    ("action",),      # the action ladder: a value every verdict carries
    ("nodetune", "errors", "files", "procs", "verdicts"),
    ("records", "reports"),
    ("ansible",),
    ("remote",),
    ("measure", "slurm"),
    ("apply",),       # asks Slurm which nodes are busy before it restarts anything
    ("container",),   # --image: the training image's runtime and checklist, for both verbs
    ("collective",),  # an NCCL collective run on nodes: plan, launch, watch, clean up
    ("lab", "validate"),
    ("check", "tune"),
    ("fleet",),
    ("cli",),
    ("__main__",),
)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``module -> module`` for each import of a folder (or top module) on a floor that is
    not below the importer's."""
    floor = {name: i for i, names in enumerate(FLOORS) for name in names}

    def part(module: str) -> str:
        return module.split(".")[1] if "." in module else module

    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                  if part(m) != part(d) and floor[part(d)] >= floor[part(m)])


def test_every_import_runs_down_a_floor() -> None:
    graph = module_graph(PACKAGE)
    parts = {m.split(".")[1] if "." in m else m for m in graph}
    assert parts <= {name for names in FLOORS for name in names}, "a folder with no floor"
    assert upward_imports(graph) == []


def test_an_import_up_or_across_a_floor_is_found() -> None:
    graph = {"nodetune.slurm.act": {"nodetune.validate.result", "nodetune.ansible.inventory"},
             "nodetune.check.run": {"nodetune.tune.verb", "nodetune.check.model"}}
    assert upward_imports(graph) == ["nodetune.check.run -> nodetune.tune.verb",
                                     "nodetune.slurm.act -> nodetune.validate.result"]


def relative_imports(root: Path) -> list[str]:
    """``file:line`` of every relative import (``from . import x``), which the graphs above
    do not follow."""
    return [f"{path.relative_to(root.parent)}:{node.lineno}"
            for path in sorted(root.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and node.level > 0]


def test_every_import_is_absolute_so_the_graphs_see_it(tmp_path: Path) -> None:
    assert relative_imports(PACKAGE) == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import os\n\ndef f():\n    from .b import c\n")
    assert relative_imports(tmp_path / "pkg") == ["pkg/a.py:4"]
