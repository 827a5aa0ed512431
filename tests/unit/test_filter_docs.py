"""Every filter of the collection is documented, so `ansible-doc -t filter` shows each.

A filter's documentation is plugins/filter/<filter>.yml (Ansible's form for a file that
holds several filters): its name, a positional list that matches the function's
parameters, an option for the input and for each of those parameters.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
FILTER_DIR = ROOT / "plugins" / "filter"


def filters() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        found.update(load_plugin(str(path.relative_to(ROOT))).FilterModule().filters())
    return found


def doc_problems(name: str, func: Any, doc_file: Path) -> list[str]:
    """What is wrong with ``doc_file`` as the documentation of filter ``name`` (``func``)."""
    if not doc_file.is_file():
        return [f"{name}: no {doc_file.relative_to(ROOT)}"]
    data = yaml.safe_load(doc_file.read_text(encoding="utf-8"))
    doc, problems = data.get("DOCUMENTATION") or {}, []
    if doc.get("name") != name:
        problems.append(f"{name}: DOCUMENTATION.name is {doc.get('name')!r}")
    for key in ("author", "short_description", "description"):
        if not doc.get(key):
            problems.append(f"{name}: no DOCUMENTATION.{key}")
    params = list(inspect.signature(func).parameters)[1:]
    positional = [p.strip() for p in str(doc.get("positional") or "").split(",") if p.strip()]
    if positional != params:
        problems.append(f"{name}: positional {positional} but the filter takes {params}")
    options = set(doc.get("options") or {})
    if options != {"_input", *params}:
        problems.append(f"{name}: options {sorted(options)} but the filter takes "
                        f"{['_input', *params]}")
    if "_value" not in (data.get("RETURN") or {}) or not data.get("EXAMPLES"):
        problems.append(f"{name}: no RETURN._value or no EXAMPLES")
    return problems


@pytest.mark.parametrize("name", sorted(filters()))
def test_filter_is_documented(name: str) -> None:
    assert doc_problems(name, filters()[name], FILTER_DIR / f"{name}.yml") == []


def test_no_documentation_without_its_filter() -> None:
    assert {p.stem for p in FILTER_DIR.glob("*.yml")} == set(filters())


def test_a_wrong_documentation_is_caught(tmp_path: Path) -> None:
    def sample(value: object, hosts: list[str], extra: int = 0) -> object:
        return value

    good = yaml.safe_load((FILTER_DIR / "net_mtu_fabric_mismatches.yml").read_text())
    bad = tmp_path / "sample.yml"
    bad.write_text(yaml.safe_dump(good))
    problems = doc_problems("sample", sample, bad)
    assert any("DOCUMENTATION.name" in p for p in problems)
    assert any("positional ['hosts'] but the filter takes ['hosts', 'extra']" in p
               for p in problems)
    assert doc_problems("sample", sample, FILTER_DIR / "absent.yml") == [
        "sample: no plugins/filter/absent.yml"]


def test_ansible_doc_lists_and_shows_every_filter() -> None:
    # From the checkout: its ansible.cfg resolves nodetune.cluster to the repository.
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS")}
    exe = shutil.which("ansible-doc")
    assert exe
    listed = subprocess.run([exe, "-t", "filter", "-l", "nodetune.cluster", "--json"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120, check=True)
    names = {k.removeprefix("nodetune.cluster.") for k in yaml.safe_load(listed.stdout)}
    assert names == set(filters())
    shown = subprocess.run([exe, "-t", "filter", "--json",
                            *(f"nodetune.cluster.{n}" for n in sorted(names))],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                           check=True)
    docs = yaml.safe_load(shown.stdout)
    assert {k.removeprefix("nodetune.cluster.") for k, v in docs.items() if v["doc"]} == names
