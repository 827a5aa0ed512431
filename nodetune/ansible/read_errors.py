"""What Ansible says went wrong while reading an inventory or a vars file, in one line: the
``file:line:column`` it concerns (Ansible's origin tags) and its reason, without Python
class names, and with the vault secrets' options where a vault could not be opened."""

from __future__ import annotations

import re

VAULT_HINT = ("give the vault secret as for ansible-playbook: --vault-id [LABEL@]FILE, "
              "--vault-password-file FILE, --ask-vault-pass, ANSIBLE_VAULT_PASSWORD_FILE, "
              "or vault_password_file / vault_identity_list in ansible.cfg")


def one_line(exc: BaseException) -> str:
    """The exception's text on one line (its class's name where it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def origin_of(value: object) -> str | None:
    """``file:line:column`` Ansible recorded for a value or an error's object, if any."""
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:  # ansible-core < 2.19 has no origin tags
        return None
    origin = value if isinstance(value, Origin) else Origin.get_tag(value)
    if origin is None or not origin.path:
        return None
    where = str(origin.path)
    if origin.line_num:
        where += f":{origin.line_num}"
        if origin.col_num:
            where += f":{origin.col_num}"
    return where


# One warning block of Ansible's per plugin that failed to parse a source.
_PLUGIN_FAILED = re.compile(r"Failed to parse inventory with '([\w.]+)' plugin: (.*)")
_ORIGIN_LINE = re.compile(r"^Origin: (/\S*)$", re.MULTILINE)
_SOURCE = re.compile(r"^Origin: <inventory plugin '[\w.]+' with source '([^']+)'>$", re.MULTILINE)
_CLASS_REPR = re.compile(r"\"?<class '[\w.]*?(?:_AnsibleTagged)?(\w+)'>\"?")
_YAML_PLUGINS = ("yaml", "auto", "toml", "ini", "script", "host_list")
_OTHER_PLUGINS = ("ini", "script", "yaml", "toml", "auto", "host_list")


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def error_origin(exc: BaseException) -> str | None:
    """``file:line:column`` an Ansible error (or one it was raised from) concerns, if known."""
    return next((w for e in _chain(exc) if (w := origin_of(getattr(e, "obj", None)))), None)


def reason_of(exc: BaseException, captured: str) -> str:
    """Why Ansible could not read the inventory, with the file (and line) it concerns.

    A vars file's error carries its origin in the exception chain; an inventory
    source's errors are only in the warnings Ansible printed, one per plugin
    that tried it: the plugin meant for the file's kind is the one to believe.
    """
    chain = _chain(exc)
    where = error_origin(exc)
    if where:
        if any(isinstance(e, UnicodeError) for e in chain):
            return f"{where.split(':')[0]} is not UTF-8 text (Ansible reads inventories as UTF-8)"
        reason = _clean(_message(chain))
        return f"{where}: {reason}" + (f"; {VAULT_HINT}" if "vault" in reason.lower() else "")
    blocks: dict[str, tuple[str | None, str]] = {}
    for block in captured.split("[WARNING]: ")[1:]:
        match = _PLUGIN_FAILED.match(block)
        if match:
            said = _ORIGIN_LINE.search(block) or _SOURCE.search(block)
            blocks[match.group(1)] = (said.group(1) if said else None, match.group(2))
    if blocks:
        sources = [o for o, _ in blocks.values() if o]
        yamlish = any(o.split(":")[0].endswith((".yml", ".yaml", ".json")) for o in sources)
        order = _YAML_PLUGINS if yamlish else _OTHER_PLUGINS
        plugin = min(blocks, key=lambda p: order.index(p) if p in order else len(order))
        source, reason = blocks[plugin]
        # Another plugin that failed the same way may have said the line.
        source = next((o for o, r in blocks.values() if r == reason and o and ":" in o),
                      source)
        if "codec can't" in reason:
            reason = "not UTF-8 text (Ansible reads inventories as UTF-8)"
        return f"{source}: {_clean(reason)}" if source else _clean(reason)
    return _clean(_message(chain))


def _message(chain: list[BaseException]) -> str:
    """The first non-empty message of an exception chain."""
    for e in chain:
        text = getattr(e, "message", None) or str(e)
        if text.strip():
            return " ".join(text.strip().splitlines()[0].split())
    return type(chain[0]).__name__


def _clean(reason: str) -> str:
    """Ansible's wording, without Python class names and its "YAML parsing failed:" prefix."""
    reason = _CLASS_REPR.sub(lambda m: "a " + m.group(1).lower(), reason)
    reason = reason.replace("YAML parsing failed: ", "")
    return reason.replace("Found duplicate mapping key", "duplicate key")
