"""Vault secrets for one run, found where ansible-playbook finds them.

ansible-playbook takes vault secrets from ``--vault-id`` / ``--vault-password-file`` /
``--ask-vault-pass``, from ``ANSIBLE_VAULT_PASSWORD_FILE`` and
``ANSIBLE_VAULT_IDENTITY_LIST``, and from ``vault_password_file`` /
``vault_identity_list`` in ansible.cfg. nodetune reads the inventory in-process
and runs ansible-playbook through ansible-runner; both must get the same
secrets. In-process they come from Ansible's own ``setup_vault_secrets``; the
runs get the operator's ``--vault-id`` values made absolute (ansible-playbook
runs in the playbook's directory), and the configuration and environment as
they are. A secret typed at a prompt reaches a run as a file of mode 0600 in
the run's private temporary directory, never in the run record or artifacts.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodetune.errors import InputError

PROMPT_SOURCES = ("prompt", "prompt_ask_vault_pass")
DEFAULT_LABEL = "default"


def split_id(vault_id: str) -> tuple[str | None, str]:
    """``label@source`` → (label, source); a bare ``source`` has no label (as Ansible splits)."""
    if "@" in vault_id:
        label, source = vault_id.split("@", 1)
        return label or None, source
    return None, vault_id


def _absolute(source: str) -> str:
    if source in PROMPT_SOURCES:
        return source
    return str(Path(source).expanduser().absolute())


def _join(label: str | None, source: str) -> str:
    return f"{label}@{source}" if label else source


@dataclass(frozen=True, slots=True)
class Vault:
    """The operator's vault options for one run.

    ``ids`` are ``--vault-id`` values as given (``[label@]source``, where source is a
    password file, a script or ``prompt``); ``--vault-password-file F`` is ``F`` and
    ``--ask-vault-pass`` is ``@prompt``. ``typed`` holds the secrets the command line
    asked for at a prompt, by label; it is never shown or recorded.
    """

    ids: tuple[str, ...] = ()
    typed: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def prompts(self) -> tuple[str, ...]:
        """Labels whose secret must be typed at a prompt, in order."""
        out = []
        for vault_id in self.ids:
            label, source = split_id(vault_id)
            if source in PROMPT_SOURCES:
                out.append(label or DEFAULT_LABEL)
        return tuple(dict.fromkeys(out))

    def files(self) -> tuple[str, ...]:
        """The non-prompt ids with their source made absolute."""
        out = []
        for vault_id in self.ids:
            label, source = split_id(vault_id)
            if source not in PROMPT_SOURCES:
                out.append(_join(label, _absolute(source)))
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        """What the run record keeps: the ids, never a secret."""
        return {"vault_ids": list(self.ids)}


NO_VAULT = Vault()


def load_secrets(vault: Vault, loader: Any) -> list[tuple[str, Any]]:
    """Give ``loader`` every secret ansible-playbook would have, and return them.

    Ansible's own ``setup_vault_secrets`` reads the ids, ``vault_password_file`` /
    ``vault_identity_list`` (ansible.cfg or the environment) and runs password
    scripts; typed secrets are added as they are.

    Raises:
        InputError: a password file or script named by the operator cannot be read.
    """
    from ansible import constants
    from ansible.parsing.vault import VaultSecret

    typed = [(label, VaultSecret(vault.typed[label].encode()))
             for label in vault.prompts() if label in vault.typed]
    if not (vault.files() or constants.DEFAULT_VAULT_PASSWORD_FILE
            or constants.DEFAULT_VAULT_IDENTITY_LIST):
        loader.set_vault_secrets(typed)
        return typed
    # Imported only when there is something to read: ansible.cli checks the locale
    # and the standard streams on import, as ansible-playbook does.
    from ansible.cli import CLI
    from ansible.errors import AnsibleError

    kwargs: dict[str, Any] = {"vault_password_files": [], "ask_vault_pass": False,
                              "auto_prompt": False}
    if "initialize_context" in inspect.signature(CLI.setup_vault_secrets).parameters:
        kwargs["initialize_context"] = False  # 2.19+: the context is set per read, below
    # As ansible-playbook's CLI.run: the configured identities first, then the options.
    ids = [*(constants.DEFAULT_VAULT_IDENTITY_LIST or []), *vault.files()]
    try:
        secrets: list[tuple[str, Any]] = list(CLI.setup_vault_secrets(
            loader, vault_ids=ids, **kwargs))
    except AnsibleError as exc:
        raise InputError(f"vault secret: {' '.join(str(exc).split())}") from None
    secrets += typed
    loader.set_vault_secrets(secrets)
    return secrets


@contextlib.contextmanager
def secrets_context(secrets: list[tuple[str, Any]]) -> Iterator[None]:
    """Ansible's process-wide vault context (2.19+), which decrypts inline ``!vault``
    values on use, holding ``secrets`` for the duration; the previous one after."""
    try:
        from ansible.parsing.vault import VaultSecretsContext
    except ImportError:  # ansible-core < 2.19 decrypts through the loader's secrets
        yield
        return
    previous = VaultSecretsContext._current
    # initialize() may only be called once per process; a process may read several
    # inventories with different secrets, so the context is swapped in and out.
    VaultSecretsContext._current = VaultSecretsContext(secrets)
    try:
        yield
    finally:
        VaultSecretsContext._current = previous


@contextlib.contextmanager
def playbook_args(vault: Vault, private: Path) -> Iterator[list[str]]:
    """ansible-playbook arguments carrying ``vault``'s secrets; typed ones as 0600 files
    under ``private`` (the run's own temporary directory), removed at the end."""
    args: list[str] = []
    written: list[Path] = []
    try:
        for vault_id in vault.files():
            args += ["--vault-id", vault_id]
        for n, label in enumerate(vault.prompts()):
            if label not in vault.typed:
                continue
            path = private / f"vault-secret-{n}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(vault.typed[label] + "\n")
            written.append(path)
            args += ["--vault-id", f"{label}@{path}"]
        yield args
    finally:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()


def env_paths(environ: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> dict[str, str]:
    """``ANSIBLE_VAULT_PASSWORD_FILE`` / ``ANSIBLE_VAULT_IDENTITY_LIST`` with relative
    paths made absolute: ansible-playbook would resolve them in the playbook's
    directory, the operator meant their own."""
    env = os.environ if environ is None else environ
    here = Path.cwd() if cwd is None else cwd

    def absolute(source: str) -> str:
        if not source or source in PROMPT_SOURCES:
            return source
        path = Path(source).expanduser()
        return str(path if path.is_absolute() else here / path)

    out: dict[str, str] = {}
    if env.get("ANSIBLE_VAULT_PASSWORD_FILE"):
        out["ANSIBLE_VAULT_PASSWORD_FILE"] = absolute(env["ANSIBLE_VAULT_PASSWORD_FILE"])
    if env.get("ANSIBLE_VAULT_IDENTITY_LIST"):
        out["ANSIBLE_VAULT_IDENTITY_LIST"] = ",".join(
            _join(label, absolute(source)) for label, source in
            (split_id(item.strip()) for item in env["ANSIBLE_VAULT_IDENTITY_LIST"].split(",")))
    return out
