"""Load an Ansible inventory with Ansible's own parser into frozen value types.

The read is stricter than Ansible's defaults where those would apply something
other than what the operator wrote: a key given twice in one YAML mapping, and
text that is not UTF-8, are errors naming the file and line. Vaulted files and
inline ``!vault`` values are decrypted with the secrets ansible-playbook would
have (:mod:`nodetune.ansible.vault`). What Ansible could not read is told in one line,
with its file and line (:mod:`nodetune.ansible.read_errors`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune.ansible import templating
from nodetune.ansible import vault as vault_mod
from nodetune.ansible.env import DUPLICATE_KEY_ENV
from nodetune.ansible.read_errors import VAULT_HINT, one_line, origin_of, reason_of
from nodetune.ansible.vault import Vault
from nodetune.errors import InventoryError

log = logging.getLogger(__name__)

# Fail loudly on a source no plugin can parse instead of Ansible's default of
# warning and carrying on with an empty inventory.
os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "true")


# Ansible runs the same plugin for ``local``, ``ansible.builtin.local`` and
# ``ansible.legacy.local``; ``paramiko`` is an alias of ``paramiko_ssh``. The
# collection's reboot guard uses the same rule
# (plugins/module_utils/connection.py, which nodetune cannot import).
_BUILTIN_PREFIXES = ("ansible.builtin.", "ansible.legacy.")
_CONNECTION_ALIASES = {"paramiko": "paramiko_ssh"}


def connection_plugin(name: object) -> str:
    """The short name of connection plugin ``name`` (``ansible.builtin.local`` → ``local``)."""
    text = str(name).strip()
    for prefix in _BUILTIN_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return _CONNECTION_ALIASES.get(text, text)


@dataclass(frozen=True, slots=True)
class Host:
    """One inventory host with its fully merged variables (group_vars, host_vars, inline)."""

    name: str
    groups: tuple[str, ...]
    vars: Mapping[str, Any] = field(hash=False, compare=False)
    # Where each variable was set (``file:line``), where Ansible recorded it.
    origins: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def address(self) -> str:
        """Address to reach the host at: ``ansible_host``, its Jinja rendered with the host's
        variables as Ansible would (InputError if it cannot be), or the inventory name."""
        raw = self.vars.get("ansible_host", self.name)
        if templating.is_template(raw):
            variables = templating.host_variables(self.name, self.vars)
            raw = templating.render("ansible_host", raw, variables, host=self.name)
        return str(raw)

    @property
    def connection(self) -> str:
        """Ansible connection plugin for the host (``ssh`` unless set), in one spelling."""
        return connection_plugin(self.vars.get("ansible_connection", "ssh"))


@dataclass(frozen=True, slots=True)
class Inventory:
    """A parsed inventory source and the hosts selected from it.

    Another selection from the same source (:meth:`select`, :meth:`anywhere`) asks
    the parse this one came from: the files are read, and vault-decrypted, once a run.
    """

    source: Path
    hosts: tuple[Host, ...]
    groups: tuple[str, ...]
    limit: str | None = None
    # The vault options it was read with: a later read of the same source needs them too.
    vault: Vault = field(default=vault_mod.NO_VAULT, hash=False, compare=False)
    parsed: _Parsed | None = field(default=None, hash=False, compare=False, repr=False)

    def host(self, name: str) -> Host:
        """Return the host called ``name``.

        Raises:
            InventoryError: no such host in the selection.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise InventoryError(f"host {name!r} is not in inventory {self.source}")

    def select(self, *, limit: str | None = None, pattern: str = "all") -> Inventory:
        """Another selection (``pattern`` under ``limit``) from the same parse.

        Raises:
            InventoryError: as :func:`load`.
        """
        if self.parsed is None:
            return load(self.source, limit=limit, pattern=pattern, vault=self.vault)
        return self.parsed.select(limit=limit, pattern=pattern)

    def anywhere(self, name: str) -> Host:
        """The host called ``name`` wherever it is in the inventory, selected or not.

        Raises:
            InventoryError: no such host in the inventory.
        """
        return self.select().host(name)

    def in_group(self, group: str) -> tuple[Host, ...]:
        """Hosts of the selection that belong to ``group``."""
        return tuple(h for h in self.hosts if group in h.groups)


_WARNING_NOISE = re.compile(r"\[WARNING\]:\s*")


def load(source: str | os.PathLike[str], *, limit: str | None = None,
         pattern: str = "all", vault: Vault | None = None) -> Inventory:
    """Parse ``source`` (file or directory, any format Ansible accepts) and select from it.

    Args:
        source: inventory file or directory.
        limit: an Ansible host pattern, as given to ``--limit``.
        pattern: the hosts a play targets (a group such as ``gpu_nodes``, or any
            Ansible pattern); the selection is this pattern under ``limit``.

    Raises:
        InventoryError: path missing, unparsable, no hosts, ``pattern`` matches
            nothing (naming the group and the inventory), or ``limit`` matches nothing.
    """
    return parse(source, vault=vault).select(limit=limit, pattern=pattern)


def parse(source: str | os.PathLike[str], *, vault: Vault | None = None) -> _Parsed:
    """Read ``source`` once with Ansible's parser (vault secrets loaded); select later.

    Raises:
        InventoryError: path missing, unparsable, or defines no hosts.
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

    vault = vault or vault_mod.NO_VAULT
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured), \
                duplicate_keys_fail():
            loader = DataLoader()
            # With no play, Ansible reads host_vars/ and group_vars/ beside the loader's base
            # directory too, '.' by default: the operator's current directory would add its
            # own host variables, which `apply` (its playbooks elsewhere) never sees, and
            # Ansible caches that directory's files under the name '.' for the process.
            # The inventory's own directory, whose variables the inventory reads anyway.
            loader.set_basedir(str((path if path.is_dir() else path.parent).resolve()))
            secrets = vault_mod.load_secrets(vault, loader)
            with vault_mod.secrets_context(secrets):
                manager = InventoryManager(loader=loader, sources=[str(path)])
                variables = VariableManager(loader=loader, inventory=manager)
                all_hosts = manager.get_hosts("all")
    except AnsibleError as exc:
        raise InventoryError(f"cannot parse inventory {path}: "
                             f"{reason_of(exc, captured.getvalue())}") from None
    # ansible-core 2.21 only warns (its configuration may be read before the settings
    # above), so a parser's complaint is a failure here whatever Ansible made of it.
    unparsed = [line for line in captured.getvalue().splitlines() if "Failed to parse " in line]
    if unparsed:
        raise InventoryError(f"cannot parse inventory {path}: "
                             f"{reason_of(AnsibleError(unparsed[0].strip()), captured.getvalue())}")
    _log_warnings(path, captured.getvalue())
    if not all_hosts:
        raise InventoryError(f"inventory {path} defines no hosts; add hosts under `all:`")
    return _Parsed(path, vault, secrets, manager, variables)


def _log_warnings(path: Path, captured: str) -> None:
    for line in captured.splitlines():
        if "WARNING" in line and "Could not match supplied host pattern" not in line:
            log.warning("%s: %s", path, _WARNING_NOISE.sub("", line))


class _Parsed:
    """One read of an inventory source: selections and host variables come from it."""

    def __init__(self, path: Path, vault: Vault, secrets: Any, manager: Any,
                 variables: Any) -> None:
        self.path, self.vault, self.secrets = path, vault, secrets
        self.manager, self.variables = manager, variables
        self._hosts: dict[str, Host] = {}

    def select(self, *, limit: str | None, pattern: str) -> Inventory:
        """``pattern`` under ``limit``, as ``ansible-playbook --limit`` selects.

        Raises:
            InventoryError: ``pattern`` or ``limit`` matches nothing.
        """
        from ansible.errors import AnsibleError

        manager, path = self.manager, self.path
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured), \
                    duplicate_keys_fail(), vault_mod.secrets_context(self.secrets):
                manager.subset(None)
                targeted = manager.get_hosts(pattern)
                if limit:
                    manager.subset(limit)
                selected = manager.get_hosts(pattern)
                manager.subset(None)
                hosts = tuple(self._host(h) for h in selected)
        except AnsibleError as exc:
            raise InventoryError(f"cannot parse inventory {path}: "
                                 f"{reason_of(exc, captured.getvalue())}") from None
        _log_warnings(path, captured.getvalue())
        if not targeted:
            raise InventoryError(_no_target(pattern, path, manager.groups))
        if not hosts:
            where = f"group {pattern!r} of {path}" if pattern != "all" else str(path)
            raise InventoryError(
                f"--limit {limit!r} matches no host in {where}; hosts there: "
                + ", ".join(h.name for h in targeted[:10])
            )
        return Inventory(source=path, hosts=hosts, groups=tuple(sorted(manager.groups)),
                         limit=limit, vault=self.vault, parsed=self)

    def _host(self, host: Any) -> Host:
        if host.name not in self._hosts:
            self._hosts[host.name] = _host(host, self.variables.get_vars(host=host))
        return self._hosts[host.name]


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


def _host(host: Any, raw: Mapping[str, Any]) -> Host:
    """A host of Ansible's inventory as a value, with where each of its variables was set."""
    origins = {str(k): where for k, v in raw.items() if (where := origin_of(v))}
    return Host(name=host.name,
                groups=tuple(sorted(g.name for g in host.get_groups() if g.name != "all")),
                vars=_plain(raw), origins=origins)


@contextlib.contextmanager
def duplicate_keys_fail() -> Iterator[None]:
    """A key given twice in one YAML mapping is an error while reading, not Ansible's
    default warning that keeps the last value (``duplicate_dict_key = error``)."""
    previous = os.environ.get(DUPLICATE_KEY_ENV)
    os.environ[DUPLICATE_KEY_ENV] = "error"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DUPLICATE_KEY_ENV, None)
        else:
            os.environ[DUPLICATE_KEY_ENV] = previous


def _plain(value: Any, key: str = "") -> Any:
    """Strip Ansible's tagged/unsafe string types so values are plain Python; decrypt
    inline ``!vault`` values.

    Raises:
        InventoryError: a ``!vault`` value cannot be decrypted (naming file and variable).
    """
    if isinstance(value, Mapping):
        return {str(k): _plain(v, str(k)) for k, v in value.items()
                if not str(k).startswith("ansible_facts")}
    if isinstance(value, list | tuple):
        return [_plain(v, key) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    try:
        text = str(value)
    except Exception as exc:  # an inline !vault value: AnsibleError, ReferenceError
        where = origin_of(value) or "the inventory"
        raise InventoryError(f"{where}: cannot decrypt the !vault value of {key or 'a variable'}: "
                             f"{one_line(exc)}; {VAULT_HINT}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes Ansible could not decode, kept as surrogates
        where = origin_of(value) or "the inventory"
        raise InventoryError(f"{where}: the value of {key or 'a variable'} is not UTF-8 text "
                             "(Ansible reads inventories as UTF-8)") from None
    return text
