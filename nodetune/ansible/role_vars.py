"""Variables named like a role's inputs that the role does not have: typos, found early.

Ansible takes any variable and a role reads only those it knows, so
``net_sysctl_congestion_control=bbr`` (for ``net_sysctl_tcp_congestion_control``)
changes nothing and says nothing. A variable that starts with a role's prefix
and is not in that role's ``meta/argument_specs.yml`` is reported with the
closest name the role has; under ``--strict-vars`` it is bad input (exit 2).
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.files import read_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UnknownVar:
    """A variable with a role's prefix that the role does not take."""

    name: str
    role: str
    where: str  # "-e", or file:line, or the inventory
    suggestion: str | None
    hosts: tuple[str, ...] = ()

    def message(self) -> str:
        """One line naming the variable, where it was set, and the likely name."""
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        on = f" (hosts: {', '.join(self.hosts[:5])}{', ...' if len(self.hosts) > 5 else ''})" \
            if self.hosts else ""
        return (f"{self.where}: {self.name} is not a variable of role {self.role} "
                f"(roles/{self.role}/meta/argument_specs.yml){on}{hint}")


@functools.cache
def known(roles: Path) -> Mapping[str, frozenset[str]]:
    """Every role's inputs: the options of every entry point of its argument spec."""
    out: dict[str, frozenset[str]] = {}
    for spec in sorted(roles.glob("*/meta/argument_specs.yml")):
        data = read_yaml(spec) or {}
        entries = (data.get("argument_specs") or {}).values()
        out[spec.parent.parent.name] = frozenset(
            str(o) for e in entries if isinstance(e, Mapping) for o in (e.get("options") or {}))
    return out


def _role_of(name: str, roles: Mapping[str, frozenset[str]]) -> str | None:
    if name.startswith("_"):
        return None  # a role's private variable
    prefixed = [r for r in roles if name.startswith(r + "_")]
    return max(prefixed, key=len) if prefixed else None


@dataclass(frozen=True, slots=True)
class Source:
    """Variables from one place: ``-e`` or one host's merged inventory variables."""

    where: str  # said when a variable has no origin of its own ("-e", "inventory PATH")
    variables: Mapping[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)  # name -> file:line
    host: str = ""


def find_unknown(sources: Iterable[Source], *, roles: Path) -> tuple[UnknownVar, ...]:
    """The role-prefixed variables of ``sources`` that their role does not take, one per
    variable and place, with the hosts that have it."""
    specs = known(roles)
    found: dict[tuple[str, str], UnknownVar] = {}
    for source in sources:
        for name in source.variables:
            role = _role_of(str(name), specs)
            if role is None or name in specs[role]:
                continue
            at = source.origins.get(name, source.where)
            host = source.host
            match = difflib.get_close_matches(str(name), sorted(specs[role]), n=1, cutoff=0.6)
            key = (str(name), str(at))
            prior = found.get(key)
            hosts = (*prior.hosts, host) if prior and host else ((host,) if host else ())
            found[key] = UnknownVar(name=str(name), role=role, where=str(at),
                                    suggestion=match[0] if match else None, hosts=hosts)
    return tuple(found.values())


def check(hosts: Iterable[Host], *, extra_vars: Iterable[Mapping[str, Any] | None] = (),
          inventory: Path | str, roles: Path, strict: bool) -> tuple[UnknownVar, ...]:
    """Warn about (``strict``: refuse) role-prefixed variables no role takes, from ``-e``,
    group_vars, host_vars and the inventory file itself.

    Raises:
        InputError: ``strict`` and at least one such variable (all are named).
    """
    sources = [Source("-e", data) for data in extra_vars if data]
    sources += [Source(f"inventory {inventory}", h.vars, h.origins, h.name) for h in hosts]
    unknown = find_unknown(sources, roles=roles)
    if unknown and strict:
        raise InputError("--strict-vars: " + "; ".join(u.message() for u in unknown))
    for u in unknown:
        log.warning("%s", u.message())
    return unknown
