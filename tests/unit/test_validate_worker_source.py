"""The worker as shipped: the modules of nodetune/collective/worker/ joined into the one file
uploaded as nodetune_worker.py, which runs on a node with no nodetune package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from nodetune.collective import worker, worker_cmd
from nodetune.collective.launch import worker_files
from nodetune.collective.worker_source import PACKAGE, PARTS, part_body, part_header, worker_source

HERE = Path(worker.__file__).parent
VERBS = ("serve", "launch", "reap", "ras", "measure")


def top_names(tree: ast.Module) -> set[str]:
    """The names a module's top level defines (functions, classes, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def part_imports(name: str) -> set[str]:
    """The other parts part ``name`` imports."""
    tree = ast.parse((HERE / f"{name}.py").read_text(encoding="utf-8"))
    return {n.module.removeprefix(PACKAGE + ".") for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith(PACKAGE + ".")}


def test_what_is_uploaded_is_the_joined_text_and_it_compiles() -> None:
    text = worker_source()
    assert worker_files()[worker_cmd.WORKER_NAME] == text.encode("utf-8")
    compile(text, worker_cmd.WORKER_NAME, "exec")
    # The node's Python may be 3.8: no newer syntax in what it runs.
    ast.parse(text, feature_version=(3, 8))
    head = ast.get_docstring(ast.parse((HERE / "__init__.py").read_text(encoding="utf-8")))
    assert head and ast.get_docstring(ast.parse(text)) == head  # it says how it is shipped
    assert "from __future__ import annotations\n" in text.split(part_header(PARTS[0]))[0]


def test_the_shipped_text_holds_every_module_of_the_package_in_order() -> None:
    text = worker_source()
    modules = {p.stem for p in HERE.glob("*.py")} - {"__init__"}
    assert set(PARTS) == modules, "a module of the worker left out of PARTS (or gone)"
    at = [text.index(part_header(name)) for name in PARTS]
    assert at == sorted(at)
    shipped = top_names(ast.parse(text))
    for name in PARTS:
        source = (HERE / f"{name}.py").read_text(encoding="utf-8")
        assert part_header(name) + "\n\n" + part_body(source, name) in text
        assert top_names(ast.parse(source)) <= shipped, name


def test_the_parts_share_one_namespace_without_clashes_or_forward_imports() -> None:
    """In one file a name defined by two parts would be the later one's everywhere, and a
    part's module-level code may only use what a part above it defined."""
    seen: dict[str, str] = {}
    for i, name in enumerate(PARTS):
        defined = top_names(ast.parse((HERE / f"{name}.py").read_text(encoding="utf-8")))
        clashes = {n: seen[n] for n in defined if n in seen}
        assert not clashes, f"{name} redefines {clashes}"
        seen.update(dict.fromkeys(defined, name))
        assert part_imports(name) <= set(PARTS[:i]), name


def test_a_part_that_names_the_package_elsewhere_refuses_to_build() -> None:
    lazy = ('"""Doc."""\n\nfrom __future__ import annotations\n\n\ndef f() -> None:\n'
            "    from nodetune.collective.worker.common import emit\n")
    with pytest.raises(RuntimeError, match="names the package"):
        part_body(lazy, "lazy")
    top = ('"""Doc."""\n\nfrom __future__ import annotations\n\nimport os\n\n'
           "from nodetune.collective.worker.common import (\n    emit,\n)\n\n\nX = os.sep\n")
    assert part_body(top, "top") == "import os\n\n\nX = os.sep\n"


def test_the_shipped_file_runs_alone_without_nodetune(tmp_path: Path) -> None:
    # As on a node: the uploaded files in a directory, a bare interpreter (-S -E: no
    # site-packages, no PYTHONPATH), so nothing of the nodetune package can be imported.
    for name, data in worker_files().items():
        (tmp_path / name).write_bytes(data)
    bare = [sys.executable, "-S", "-E"]
    alone = subprocess.run([*bare, "-c", "import nodetune"], cwd=tmp_path, capture_output=True,
                           text=True, check=False, timeout=60)
    assert alone.returncode != 0 and "No module named 'nodetune'" in alone.stderr
    ran = subprocess.run([*bare, worker_cmd.WORKER_NAME, "--help"], cwd=tmp_path,
                         capture_output=True, text=True, check=False, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("usage: nodetune-worker")
    assert all(verb in ran.stdout for verb in VERBS)
    ran = subprocess.run([*bare, worker_cmd.WORKER_NAME, "measure", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, check=False, timeout=60)
    assert ran.returncode == 0 and "all_reduce,all_gather,reduce_scatter,alltoall" in ran.stdout
