"""The Ansible collection nodetune ships (galaxy.yml): its name and version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from nodetune.errors import PlaybookError
from nodetune.files import read_yaml


@dataclass(frozen=True, slots=True)
class Collection:
    """An Ansible collection's identity."""

    namespace: str
    name: str
    version: str

    @property
    def fqcn(self) -> str:
        """``namespace.name``, as playbooks spell it."""
        return f"{self.namespace}.{self.name}"


def read_collection(content: Path) -> Collection:
    """Read ``galaxy.yml`` under ``content`` (the source tree or the installed package's copy).

    Raises:
        PlaybookError: galaxy.yml is missing or lacks namespace, name or version.
    """
    path = content / "galaxy.yml"
    try:
        data = read_yaml(path)
    except (OSError, yaml.YAMLError) as exc:
        raise PlaybookError(f"cannot read the roles' collection metadata {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) and data[k] for k in ("namespace", "name", "version")):
        raise PlaybookError(f"{path}: namespace, name and version must be set")
    return Collection(namespace=data["namespace"], name=data["name"], version=data["version"])
