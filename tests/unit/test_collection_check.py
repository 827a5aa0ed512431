"""The rules scripts/collection-check.sh applies to the built collection.

The sanity ignore files accept only the two expected findings, each with its reason;
galaxy-importer's result fails on any plugin Galaxy would show without documentation.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORES = sorted((ROOT / "tests" / "sanity").glob("ignore-*.txt"))
# The only findings the collection accepts: Apache-2.0 modules have no GPLv3 header; the
# facts.d script is an executable with its shebang.
ACCEPTED = re.compile(r"^(plugins/modules/[a-z0-9_]+\.py validate-modules:missing-gplv3-license"
                      r"|roles/node_facts/files/nodetune\.fact shebang) # \S.*$")


def importer_result() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "importer_result", ROOT / "scripts" / "collection" / "importer_result.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_supported_ansible_core_has_the_same_ignore_file() -> None:
    assert [p.name for p in IGNORES] == ["ignore-2.19.txt", "ignore-2.20.txt", "ignore-2.21.txt"]
    assert len({p.read_text() for p in IGNORES}) == 1


@pytest.mark.parametrize("path", IGNORES, ids=lambda p: p.name)
def test_ignore_files_hold_only_the_expected_findings_with_a_reason(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert [line for line in lines if not ACCEPTED.match(line)] == []
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "plugins" / "modules").glob("*.py")}
    listed = {line.split()[0] for line in lines if "missing-gplv3-license" in line}
    assert listed == modules, "one line per module, and none for a module that is gone"


def test_an_unexpected_or_unexplained_ignore_is_refused() -> None:
    for line in ("plugins/modules/apt.py validate-modules:missing-gplv3-license",
                 "plugins/modules/apt.py validate-modules:invalid-documentation # no",
                 "plugins/modules/apt.py pylint:disallowed-name # style"):
        assert not ACCEPTED.match(line), line


def test_importer_result_names_undocumented_plugins(tmp_path: Path) -> None:
    (tmp_path / "plugins" / "filter").mkdir(parents=True)
    (tmp_path / "plugins" / "filter" / "several.py").write_text("")
    doc = {"doc": {"short_description": "x"}}
    result = {"docs_blob": {"contents": [
        {"content_type": "module", "content_name": "documented", "doc_strings": doc},
        {"content_type": "module", "content_name": "bare", "doc_strings": None},
        {"content_type": "filter", "content_name": "several", "doc_strings": None},
        {"content_type": "filter", "content_name": "one_filter", "doc_strings": {}},
        {"content_type": "test", "content_name": "control_host", "doc_strings": doc},
        {"content_type": "role", "content_name": "net_mtu", "doc_strings": None},
    ]}}
    assert importer_result().undocumented(result, tmp_path) == ["module bare", "filter one_filter"]
