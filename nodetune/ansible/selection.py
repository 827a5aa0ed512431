"""The hosts a verb that contacts nodes itself (check, validate, tune) acts on, read once
before any node is contacted: its group (:mod:`nodetune.ansible.targets`), narrowed by
``--limit``, and their role-prefixed variables that no role takes (:mod:`role_vars`:
warned, or refused under ``--strict-vars``).

``apply`` selects through :func:`nodetune.apply.run.selection`: an operator's own playbook
targets what it says, and the role variables are checked with the ``-e`` values too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodetune.ansible import role_vars, targets
from nodetune.ansible.content import content_dir
from nodetune.ansible.inventory import Inventory
from nodetune.ansible.vault import NO_VAULT, Vault


@dataclass(frozen=True, slots=True)
class Selection:
    """The selected hosts, the group they came from, and the unknown role variables."""

    inventory: Inventory
    pattern: str                                 # gpu_nodes, or -e nodetune_hosts=...
    unknown: tuple[role_vars.UnknownVar, ...]

    def warnings(self) -> list[str]:
        """The unknown role variables as the run record lists them."""
        return [u.message() for u in self.unknown]


def select(inventory: Path, *, verb: str, limit: str | None = None,
           extra_vars: Sequence[str] = (), vault: Vault = NO_VAULT,
           strict: bool = False) -> Selection:
    """The hosts ``verb`` acts on in ``inventory``.

    Raises:
        InventoryError: the inventory is unusable, the group is missing or empty, or
            ``limit`` leaves none of its hosts (exit 2).
        InputError: an ``-e`` value is bad, or under ``strict`` a role-prefixed variable
            no role takes (exit 2, naming the host and the variable).
    """
    pattern = targets.own_pattern(extra_vars, verb=verb, vault=vault)
    inv = targets.select(inventory, limit=limit, pattern=pattern, vault=vault)
    unknown = role_vars.check(inv.hosts, inventory=inventory, roles=content_dir() / "roles",
                              strict=strict)
    return Selection(inventory=inv, pattern=pattern, unknown=unknown)
