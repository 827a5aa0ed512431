"""``-e`` values read as ansible-playbook reads them, before it runs.

Every verb reads them through :func:`read`: a bare word, YAML/JSON that is not
a mapping or has a key twice, or an unreadable ``@file`` is bad input (exit 2)
here, where ansible-playbook would ignore it or fail later.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodetune.ansible import inventory as inventory_mod
from nodetune.ansible import read_errors
from nodetune.ansible import vault as vault_mod
from nodetune.ansible.vault import NO_VAULT, Vault
from nodetune.errors import InputError

log = logging.getLogger(__name__)


def read(extra_vars: Sequence[str], *,
         vault: Vault = NO_VAULT) -> list[Mapping[str, Any] | None]:
    """Each ``-e`` value as ansible-playbook reads it (K=V, YAML/JSON, ``@file``, a
    vaulted ``@file`` with the run's secrets); None for a vaulted file whose secret
    only ansible-playbook can get.

    Raises:
        InputError: a value ansible-playbook would take without a variable in it
            (a bare word such as ``-e garbage``), YAML/JSON that is not a mapping
            or has a key twice, or a file that cannot be read.
    """
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv

    loader = DataLoader()
    if any(v.startswith("@") for v in extra_vars):
        try:
            vault_mod.load_secrets(vault, loader)
        except InputError as exc:
            log.debug("no vault secrets for -e @file here (%s)", exc)
    out: list[Mapping[str, Any] | None] = []
    for value in extra_vars:
        try:
            with inventory_mod.duplicate_keys_fail():
                data = _value(value, loader, parse_kv)
        except AnsibleError as exc:
            reason = " ".join(str(exc).split())
            if value.startswith("@") and "vault" in reason.lower():
                # A secret only ansible-playbook has (a vault password prompt of its own).
                log.debug("cannot read -e %s here (%s)", value, reason)
                out.append(None)
                continue
            where = read_errors.error_origin(exc)
            raise InputError(f"-e {value!r}: {where + ': ' if where else ''}"
                             f"{reason.replace('YAML parsing failed: ', '')}") from None
        if data is None:  # an empty file
            data = {}
        if not isinstance(data, Mapping):
            raise InputError(f"-e {value!r}: extra vars must be a mapping of variables, "
                             f"not a {type(data).__name__}")
        out.append(data)
    return out


def _value(value: str, loader: Any, parse_kv: Any) -> Any:
    """One ``-e`` value parsed the way ansible-playbook's ``load_extra_vars`` parses it."""
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        if not os.access(path, os.R_OK) or not path.is_file():
            raise InputError(f"-e {value}: cannot read {value[1:]}")
        return loader.load_from_file(str(path))
    if value[:1] in ("[", "{"):
        return loader.load(value)
    data = parse_kv(value)
    if "_raw_params" in data:
        raise InputError(
            f"-e {value!r}: {str(data['_raw_params'])!r} is not KEY=VALUE "
            "(ansible-playbook would ignore it); give KEY=VALUE, YAML/JSON or @FILE")
    return data
