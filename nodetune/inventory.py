"""Load an Ansible inventory with Ansible's own parser into frozen value types."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune.errors import InventoryError

log = logging.getLogger(__name__)

# Fail loudly on a source no plugin can parse instead of Ansible's default of
# warning and carrying on with an empty inventory.
os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "true")


@dataclass(frozen=True, slots=True)
class Host:
    """One inventory host with its fully merged variables (group_vars, host_vars, inline)."""

    name: str
    groups: tuple[str, ...]
    vars: Mapping[str, Any] = field(hash=False, compare=False)

    @property
    def address(self) -> str:
        """Address to reach the host at: ``ansible_host`` or the inventory name."""
        return str(self.vars.get("ansible_host", self.name))

    @property
    def connection(self) -> str:
        """Ansible connection plugin for the host (``ssh`` unless set)."""
        return str(self.vars.get("ansible_connection", "ssh"))


@dataclass(frozen=True, slots=True)
class Inventory:
    """A parsed inventory source and the hosts selected from it."""

    source: Path
    hosts: tuple[Host, ...]
    groups: tuple[str, ...]
    limit: str | None = None

    def host(self, name: str) -> Host:
        """Return the host called ``name``.

        Raises:
            InventoryError: no such host in the selection.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise InventoryError(f"host {name!r} is not in inventory {self.source}")

    def in_group(self, group: str) -> tuple[Host, ...]:
        """Hosts of the selection that belong to ``group``."""
        return tuple(h for h in self.hosts if group in h.groups)


_WARNING_NOISE = re.compile(r"\[WARNING\]:\s*")


def load(source: str | os.PathLike[str], *, limit: str | None = None,
         pattern: str = "all") -> Inventory:
    """Parse ``source`` (file or directory, any format Ansible accepts).

    Args:
        source: inventory file or directory.
        limit: an Ansible host pattern, as given to ``--limit``.
        pattern: the hosts a play targets (a group such as ``gpu_nodes``, or any
            Ansible pattern); the selection is this pattern under ``limit``.

    Raises:
        InventoryError: path missing, unparsable, no hosts, ``pattern`` matches
            nothing (naming the group and the inventory), or ``limit`` matches nothing.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise InventoryError(
            f"inventory {path} does not exist; pass a file or directory "
            "(for example inventory/example, or inventory/lab after `nodetune lab up`)"
        )
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            loader = DataLoader()
            manager = InventoryManager(loader=loader, sources=[str(path)])
            variables = VariableManager(loader=loader, inventory=manager)
            all_hosts = manager.get_hosts("all")
            targeted = manager.get_hosts(pattern)
            if limit:
                manager.subset(limit)
            selected = manager.get_hosts(pattern)
            hosts = tuple(
                Host(
                    name=h.name,
                    groups=tuple(sorted(g.name for g in h.get_groups() if g.name != "all")),
                    vars=_plain(variables.get_vars(host=h)),
                )
                for h in selected
            )
    except AnsibleError as exc:
        detail = _first_reason(captured.getvalue()) or str(exc).splitlines()[0]
        raise InventoryError(f"cannot parse inventory {path}: {detail}") from None
    # ansible-core 2.21 only warns (its configuration may be read before the settings
    # above), so a parser's complaint is a failure here whatever Ansible made of it.
    unparsed = [line for line in captured.getvalue().splitlines() if "Failed to parse " in line]
    if unparsed:
        detail = _first_reason(captured.getvalue()) or unparsed[0].strip()
        raise InventoryError(f"cannot parse inventory {path}: {detail}")
    for line in captured.getvalue().splitlines():
        if "WARNING" in line and "Could not match supplied host pattern" not in line:
            log.warning("%s: %s", path, _WARNING_NOISE.sub("", line))
    if not all_hosts:
        raise InventoryError(f"inventory {path} defines no hosts; add hosts under `all:`")
    if not targeted:
        raise InventoryError(_no_target(pattern, path, manager.groups))
    if not hosts:
        where = f"group {pattern!r} of {path}" if pattern != "all" else str(path)
        raise InventoryError(
            f"--limit {limit!r} matches no host in {where}; hosts there: "
            + ", ".join(h.name for h in targeted[:10])
        )
    return Inventory(
        source=path,
        hosts=hosts,
        groups=tuple(sorted(manager.groups)),
        limit=limit,
    )


def _no_target(pattern: str, path: Path, groups: Mapping[str, Any]) -> str:
    """Why the pattern plays target selects nothing, and how to name the right group."""
    fix = ("put the GPU nodes in that group, or name their group with "
           "-e nodetune_hosts=GROUP")
    others = ", ".join(sorted(g for g in groups if g not in ("all", "ungrouped"))) or "none"
    if pattern in groups:
        return f"group {pattern!r} in inventory {path} has no hosts; {fix}"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", pattern):
        return (f"group {pattern!r} is not in inventory {path} (groups there: {others}); "
                f"{fix}")
    return (f"pattern {pattern!r} matches no host in inventory {path} (groups there: "
            f"{others}); {fix}")


def _plain(value: Any) -> Any:
    """Strip Ansible's tagged/unsafe string types so values are plain Python."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()
                if not str(k).startswith("ansible_facts")}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    return str(value)


def _first_reason(stderr: str) -> str:
    """Pick the most specific parser complaint out of Ansible's warning text."""
    reasons = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip().startswith(("YAML parsing failed", "Failed to parse inventory:", "Origin:"))
    ]
    return "; ".join(dict.fromkeys(reasons[:2]))
