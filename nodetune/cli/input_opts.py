"""Options every verb that reads an inventory shares: vault secrets and --strict-vars."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from nodetune.ansible.vault import Vault

# apply and facts: -v after the verb is ansible-playbook's.
VERBOSE_HELP = ("Pass -v..-vvvv on to ansible-playbook and show its own output "
                "(adds to nodetune's global -v).")

F = TypeVar("F", bound=Callable[..., Any])

HELP = """\b
Vaulted inventories: vault secrets come from where ansible-playbook takes
them: --vault-id [LABEL@]FILE|prompt, --vault-password-file FILE,
--ask-vault-pass, ANSIBLE_VAULT_PASSWORD_FILE / ANSIBLE_VAULT_IDENTITY_LIST, or
vault_password_file / vault_identity_list in ansible.cfg. A vaulted value
without its secret is bad input (exit 2), naming the file.
--strict-vars: a variable named like a role's (net_sysctl_..., nccl_config_...)
that the role does not take is bad input (exit 2) instead of a warning.
"""


def input_options(fn: F) -> F:
    """Add --vault-id, --vault-password-file, --ask-vault-pass and --strict-vars."""
    for decorator in reversed([
        click.option("--vault-id", "vault_ids", metavar="[LABEL@]SOURCE", multiple=True,
                     help="Vault identity, as ansible-playbook --vault-id (a password file, "
                          "a script, or 'prompt'). Repeatable."),
        click.option("--vault-password-file", "vault_password_files", metavar="FILE",
                     multiple=True, help="Vault password file (or script). Repeatable."),
        click.option("--ask-vault-pass", is_flag=True, help="Ask for the vault password."),
        click.option("--strict-vars", is_flag=True,
                     help="Refuse (exit 2) a role-prefixed variable the role does not take, "
                          "instead of warning with the closest name."),
    ]):
        fn = decorator(fn)
    return fn


def options_from(kwargs: dict[str, Any]) -> tuple[Vault, bool]:
    """Pop the options out of a command's keyword arguments: (vault, strict_vars).

    Secrets asked for (``--ask-vault-pass``, ``--vault-id LABEL@prompt``) are read
    here, on the terminal, once; nothing echoes or records them.
    """
    ids = (*kwargs.pop("vault_ids", ()), *kwargs.pop("vault_password_files", ()))
    if kwargs.pop("ask_vault_pass", False):
        ids = (*ids, "prompt_ask_vault_pass")
    strict = bool(kwargs.pop("strict_vars", False))
    vault = Vault(ids=tuple(ids))
    typed = {label: click.prompt(f"Vault password ({label})", hide_input=True, err=True)
             for label in vault.prompts()}
    return (Vault(ids=vault.ids, typed=typed) if typed else vault), strict
