"""The collection's metadata agrees with the package, and every FQCN the roles use exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
FQCN = re.compile(r"\bnodetune\.cluster\.([a-z_][a-z0-9_]*)\b")


def test_runtime_range_is_pyprojects_ansible_core_range() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    core = next(Requirement(d) for d in deps if Requirement(d).name == "ansible-core")
    runtime = SpecifierSet(
        yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"])
    probes = ["2.16.14", "2.17.0", "2.18.3", "2.19.14", "2.20.0", "2.21.1"]
    assert [v for v in probes if v in core.specifier] == [v for v in probes if v in runtime]


def test_build_ignore_keeps_local_state_out_of_the_tarball() -> None:
    ignored = set(yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"])
    # tests/sanity/ (ansible-test's ignore files) is the one part of tests/ that ships.
    assert {".venv", ".nodetune", ".ansible", ".pytest_cache", ".mypy_cache", ".ruff_cache",
            "tests/unit", "tests/integration", "tests/molecule", "tests/fixtures", "tests/*.py",
            "molecule", "nodetune", "inventory", "build", "dist", "collections"} <= ignored


def _filters() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        names |= set(load_plugin(str(path.relative_to(ROOT))).FilterModule().filters())
    return names


def _tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "plugins" / "test").glob("*.py"):
        names |= set(load_plugin(str(path.relative_to(ROOT))).TestModule().tests())
    return names


def test_every_fqcn_the_roles_and_playbooks_use_is_a_collection_plugin() -> None:
    modules = {p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")}
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    playbooks = {p.stem for p in (ROOT / "playbooks").glob("*.yml")}
    known = modules | _filters() | _tests() | roles | playbooks
    used: dict[str, set[str]] = {}
    for path in [*(ROOT / "roles").rglob("*.yml"), *(ROOT / "roles").rglob("*.j2"),
                 *(ROOT / "playbooks").glob("*.yml")]:
        for name in FQCN.findall(path.read_text()):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert used, "the roles call the collection's plugins by FQCN"
    unknown = {name: sorted(files) for name, files in used.items() if name not in known}
    assert not unknown, unknown


def test_no_role_embeds_plugins() -> None:
    # Ansible ignores a role's library/ and filter_plugins/ when the role runs from a collection.
    embedded = [str(p.relative_to(ROOT)) for p in (ROOT / "roles").glob("*/*")
                if p.name in {"library", "filter_plugins", "module_utils", "lookup_plugins"}
                and any(p.iterdir())]
    assert not embedded, embedded
