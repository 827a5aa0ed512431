"""What is published: the wheel and the collection tarball carry LICENSE, complete
metadata and a long description that makes sense on a package index; the runtime
dependencies are the ones the package imports."""

from __future__ import annotations

import ast
import email
import hashlib
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The Apache License 2.0 as the Apache Software Foundation publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt; also Debian's
# /usr/share/common-licenses/Apache-2.0).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
# Distribution name -> the module it is imported as.
IMPORT_NAMES = {"ansible-core": "ansible", "ansible-runner": "ansible_runner", "pyyaml": "yaml",
                "prometheus-client": "prometheus_client"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    with zipfile.ZipFile(next(out.glob("nodetune-*.whl"))) as whl:
        yield whl


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tarfile.TarFile]:
    out = tmp_path_factory.mktemp("collection")
    ansible_galaxy = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run([str(ansible_galaxy), "collection", "build", "--output-path", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    with tarfile.open(next(out.glob("nodetune-cluster-*.tar.gz"))) as tar:
        yield tar


def test_license_is_the_apache_2_text() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256


def test_wheel_ships_the_license(wheel: zipfile.ZipFile) -> None:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE"))
    assert wheel.read(name) == (ROOT / "LICENSE").read_bytes()


def test_collection_ships_the_license_and_its_sanity_ignores(tarball: tarfile.TarFile) -> None:
    names = set(tarball.getnames())
    member = tarball.extractfile("LICENSE")
    assert member is not None and member.read() == (ROOT / "LICENSE").read_bytes()
    assert {f"tests/sanity/ignore-2.{minor}.txt" for minor in (19, 20, 21)} <= names
    leaked = [n for n in names if n.startswith(("tests/unit", "tests/integration",
                                                "tests/molecule", "tests/fixtures",
                                                "collections", "tests/conftest"))]
    assert leaked == []


def test_wheel_metadata_is_complete(wheel: zipfile.ZipFile) -> None:
    meta = email.message_from_bytes(
        wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))))
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Author"] and meta["Keywords"]
    classifiers = meta.get_all("Classifier") or []
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert {c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")} == {
        "Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13"}
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Source", "Issues", "Documentation", "Changelog"} <= set(urls)


def test_long_description_needs_no_checkout(wheel: zipfile.ZipFile) -> None:
    meta = email.message_from_bytes(
        wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))))
    body = meta.get_payload()
    assert isinstance(body, str)
    first_command = body.split("```bash", 1)[1].split("```", 1)[0]
    assert "pip install nodetune" in first_command
    # Nothing a package index reader cannot follow: no script of the checkout, no
    # relative link (a package index has no repository tree to resolve it against).
    assert "./scripts/" not in body and "](docs/" not in body and "](./" not in body


def _imported_top_modules() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "nodetune").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported() -> None:
    declared = {Requirement(d).name.lower() for d in PYPROJECT["project"]["dependencies"]}
    imported = _imported_top_modules()
    unused = {d for d in declared if IMPORT_NAMES.get(d, d) not in imported}
    assert unused == set()
