"""The worker as it is shipped: the modules of :mod:`nodetune.collective.worker` joined into
one file, uploaded as ``nodetune_worker.py`` (:data:`~nodetune.collective.worker_cmd.WORKER_NAME`)
and run there by the node's own Python, without the nodetune package.

The package's docstring heads the text, then ``from __future__ import annotations`` (the
node's Python may be 3.8), then each part in :data:`PARTS`' order, less its docstring, its
``from __future__`` line and its imports of the other parts: in one file those names are
already defined, by a part above. A part imports another only at its top level, so that
dropping those lines is all it takes; any other mention of the package in a part refuses
to build (:class:`RuntimeError`), as does a package ``__init__`` with more than a docstring.
"""

from __future__ import annotations

import ast
import functools
from importlib import resources

PACKAGE = "nodetune.collective.worker"
# The shipped file's order: a part comes after every part it imports from, so each
# module-level statement finds the names it uses defined (the unit tests hold this).
PARTS = ("common", "probe", "reaper", "guard", "collectives", "measure", "cli")
FUTURE = "from __future__ import annotations\n"


def part_header(name: str) -> str:
    """The comment line that opens part ``name`` in the shipped file."""
    return f"# --- {PACKAGE.replace('.', '/')}/{name}.py ".ljust(88, "-")


def _dropped(node: ast.stmt, first: bool) -> bool:
    """Whether a part's top-level statement stays out of the shipped file."""
    if first and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str):
        return True  # the part's docstring
    return isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None \
        and (node.module == "__future__" or node.module.startswith(PACKAGE + "."))


def part_body(source: str, name: str) -> str:
    """Part ``name``'s ``source`` as the shipped file holds it: without its docstring, its
    ``from __future__`` line and its imports of the other parts (each with the blank lines
    before it)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    for i, node in enumerate(tree.body):
        if not _dropped(node, i == 0):
            continue
        start = node.lineno - 1
        while start > 0 and not lines[start - 1].strip():
            start -= 1
        drop.update(range(start, node.end_lineno or node.lineno))
    body = "".join(line for i, line in enumerate(lines) if i not in drop).strip("\n")
    if PACKAGE in body:
        raise RuntimeError(f"{PACKAGE}.{name} names the package other than in its top-level "
                           "imports: the shipped file would not run without it")
    return body + "\n"


def _read(name: str) -> str:
    return resources.files(PACKAGE).joinpath(f"{name}.py").read_text(encoding="utf-8")


@functools.cache
def worker_source() -> str:
    """The shipped worker's text: the package's docstring, then every part in order."""
    head = _read("__init__")
    tree = ast.parse(head)
    if len(tree.body) != 1 or ast.get_docstring(tree) is None:
        raise RuntimeError(f"{PACKAGE}'s __init__ holds more than its docstring")
    chunks = [head.strip("\n") + "\n\n" + FUTURE]
    chunks += [f"\n\n{part_header(name)}\n\n{part_body(_read(name), name)}" for name in PARTS]
    return "".join(chunks)
