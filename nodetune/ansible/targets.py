"""Which hosts a verb acts on: one rule for apply, facts, check and validate.

Every bundled play targets ``{{ nodetune_hosts | default('gpu_nodes') }}``, and
every verb selects the same hosts: the GPU node group ``gpu_nodes``, or the
group or pattern ``-e nodetune_hosts=GROUP`` names, narrowed by ``--limit``.
A group that is missing or has no hosts is refused (exit 2) before anything
runs; no verb falls back to every host of the inventory. validate's
``--partners`` must be hosts of that group too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from nodetune.ansible import extra_vars as extra_vars_mod
from nodetune.ansible import inventory as inventory_mod
from nodetune.ansible.inventory import Inventory
from nodetune.ansible.vault import NO_VAULT, Vault
from nodetune.errors import InputError, InventoryError

log = logging.getLogger(__name__)

GROUP = "gpu_nodes"
VAR = "nodetune_hosts"


def pattern_of(extra_vars: Sequence[str], *, vault: Vault = NO_VAULT) -> str | None:
    """The host pattern the bundled plays target under these ``-e`` values.

    Read as ansible-playbook reads ``-e`` (the last value wins). None when only
    Ansible can tell: a file it alone can read, or a templated value.

    Raises:
        InputError: an ``-e`` value is not a mapping of variables (:func:`extra_vars.read`).
    """
    pattern: object = GROUP
    for data in extra_vars_mod.read(extra_vars, vault=vault):
        if data is None:
            return None
        if VAR in data:
            pattern = data[VAR]
    if isinstance(pattern, str) and "{" in pattern:
        return None
    return str(pattern if pattern is not None else "").strip()


def own_pattern(extra_vars: Sequence[str], *, verb: str, vault: Vault = NO_VAULT) -> str:
    """The target pattern for a verb that runs no playbook (check, validate): its ``-e``
    may only name ``nodetune_hosts``.

    Raises:
        InputError: a ``-e`` value this verb cannot read or that sets anything else.
    """
    for value, data in zip(extra_vars, extra_vars_mod.read(extra_vars, vault=vault),
                           strict=True):
        if data is None:
            raise InputError(f"-e {value}: {verb} cannot read it (vaulted?); "
                             f"pass -e {VAR}=GROUP in plain text")
        other = sorted(str(k) for k in data if k != VAR)
        if other:
            raise InputError(f"-e {value}: {verb} reads only {VAR} from -e, not "
                             f"{', '.join(other)} (the roles' variables are apply's)")
    pattern = pattern_of(extra_vars, vault=vault)
    if pattern is None:
        raise InputError(f"-e {VAR}: {verb} cannot resolve a templated value; name the group")
    return pattern


def select(source: str | os.PathLike[str], *, limit: str | None,
           pattern: str | None = GROUP, vault: Vault = NO_VAULT) -> Inventory:
    """The hosts a verb acts on: ``pattern`` (the GPU group by default; None: whatever the
    plays say, only Ansible can tell, so every host) narrowed by ``limit``.

    Raises:
        InventoryError: the inventory is unusable, the group is missing or empty, the
            pattern is empty, or ``limit`` leaves none of its hosts (exit 2).
    """
    if pattern == "":
        raise InventoryError(f"-e {VAR} is empty; name the GPU node group of inventory "
                             f"{source} (for example {GROUP})")
    return inventory_mod.load(source, limit=limit, pattern=pattern or "all", vault=vault)


def partners(inv: Inventory, spec: str, *, pattern: str = GROUP) -> Inventory:
    """validate's ``--partners`` hosts, selected from the read ``inv`` came from: they must
    belong to the verb's target (``pattern``), whatever ``--limit`` says, like every host a
    verb acts on.

    Raises:
        InventoryError: ``spec`` matches no host (exit 2).
        InputError: some of its hosts are outside the target group, named (exit 2).
    """
    try:
        matched = inv.select(limit=spec)
    except InventoryError as exc:
        raise InventoryError(f"--partners {spec!r}: {exc.message}") from None
    try:
        inside = inv.select(limit=spec, pattern=pattern)
    except InventoryError:
        inside = None
    names = {h.name for h in inside.hosts} if inside else set()
    outside = [h.name for h in matched.hosts if h.name not in names]
    if outside or inside is None:
        raise InputError(
            f"--partners {spec!r}: {', '.join(outside)} "
            f"{'is' if len(outside) == 1 else 'are'} not in {pattern!r}, the hosts validate "
            f"acts on in {inv.source}; partners must be nodes of that group (or name their "
            f"group with -e {VAR}=GROUP)")
    return inside
