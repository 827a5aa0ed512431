"""Connection plugin names in one spelling, as Ansible resolves them.

Ansible runs the same plugin for ``local``, ``ansible.builtin.local`` and
``ansible.legacy.local`` (and ``paramiko`` is an alias of ``paramiko_ssh``), so
every decision made on ``ansible_connection`` (the reboot guard above all)
compares this short name, never the spelling an inventory happens to use.
nodetune's Python side has the same rule (``nodetune.inventory.connection_plugin``).
"""

from __future__ import annotations

BUILTIN_PREFIXES = ("ansible.builtin.", "ansible.legacy.")
ALIASES = {"paramiko": "paramiko_ssh"}


def connection_plugin(name: object) -> str:
    """The short name of connection plugin ``name`` (``ansible.builtin.local`` → ``local``).

    A plugin of another collection (``community.docker.docker``) keeps its FQCN.
    """
    text = str(name).strip()
    for prefix in BUILTIN_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return ALIASES.get(text, text)
