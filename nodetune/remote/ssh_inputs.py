"""The values that reach nodetune's synthetic ssh_config, checked before any node is contacted.

Each connection variable (``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file``, every ssh argument and each ProxyJump hop in them) must
stay one ssh_config line and read back the same under paramiko and OpenSSH; a value
holding Jinja is rendered with the host's variables first, as ansible-playbook would.
:mod:`nodetune.remote.ssh_config` resolves a connection from what this module passes.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodetune.ansible import templating
from nodetune.errors import InputError

# Connection plugins by the short name Host.connection gives them
# (ansible.builtin.ssh is ssh, ansible.legacy.local is local).
SSH_CONNECTIONS = frozenset({"ssh", "paramiko_ssh", "smart"})
# The variables whose values reach the ssh_config (each with its older ansible_ssh_ alias).
CONNECTION_VARS = (
    "ansible_host", "ansible_port", "ansible_ssh_port", "ansible_user", "ansible_ssh_user",
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_ssh_args",
    "ansible_ssh_common_args", "ansible_ssh_extra_args",
)
_ANSIBLE_LOCK = threading.Lock()
# ssh flags without an argument that have no effect here, and those that map to an option.
_NOARG_FLAGS = {"q": None, "v": None, "T": None, "t": None, "n": None, "x": None, "a": None,
                "A": None, "X": None, "Y": None, "k": None, "K": None,
                "C": ("Compression", "yes")}
_ARG_FLAGS = {"-i": "IdentityFile", "-p": "Port", "-l": "User", "-J": "ProxyJump",
              "-F": "__configfile__"}
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# A character that ends or breaks an ssh_config line (C0/C1 controls, DEL, Unicode line and
# paragraph separators): in a value it would start a directive of its own.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A host name as OpenSSH takes it on its command line: misc.c valid_hostname() (added in
# OpenSSH 9.6 for CVE-2023-51385) refuses a leading '-', whitespace, control characters and
# '`"$\;&<>|(){}, (the shell metacharacters a %h token would carry into a ProxyCommand).
_BAD_HOST = re.compile(r"""['`"$\\;&<>|(){},\s]""")
# A user name: misc.c valid_ruser() (same change; its current form, read 2026-11-29)
# refuses a leading '-', control characters, '`";&<>|(){}, whitespace followed by '-', and
# a trailing '\'; it allows '$' and '\' (AD "CORP\user", machine accounts "svc$"). They
# are allowed here too where the double-quoted value nodetune writes keeps them: not '${'
# (ssh_config(5) expands ${VAR} in User), not '\\' or a trailing '\' (OpenSSH's argv_split()
# unescapes them in a quoted value, paramiko does not). Refused besides, as that quoting
# cannot hold them the same way under both: any whitespace, '"' and '%' (expanded
# differently by paramiko and OpenSSH).
_BAD_USER = re.compile(r"""['`";&<>|(){}%\s]|\$\{|\\\\|\\$""")
# IdentityFile tokens that paramiko expands as OpenSSH does (ssh_config(5) TOKENS; paramiko
# SSHConfig.TOKENS_BY_CONFIG_KEY): any other '%' (%%, %C, %i, %k, %n, %p...) would name a
# different file under nodetune than under ssh.
_KEY_TOKENS = frozenset("dhlru")
_JUMP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s]+)"
                   r"(?::(?P<port>\d+))?$")


@dataclass(frozen=True, slots=True)
class Opt:
    """One ssh option, with the variable or file it came from (for messages)."""

    key: str
    value: str
    source: str


def ssh_options(args: str, *, source: str = "ssh arguments", host: str | None = None
                ) -> list[tuple[str, str]]:
    """The options an ssh argument string sets, as ``(Key, value)`` in order.

    ``-o Key=Value``/``-oKey=Value``/``-o 'Key Value'`` and ``-i``/``-p``/``-l``/
    ``-J``/``-F``/``-C``; flags that change nothing here (``-q``, ``-v``, ``-T``...)
    are skipped. ``-F FILE`` comes back as ``("__configfile__", FILE)``.

    Raises:
        InputError: a flag or word ssh would not take, or that nodetune cannot honour.
    """
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise InputError(f"cannot parse {source} {args!r}: {exc}", host=host) from None
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-o" or word in _ARG_FLAGS:
            if i + 1 >= len(words):
                raise InputError(f"{source}: {word} needs a value", host=host)
            value = words[i + 1]
            i += 2
            if word in _ARG_FLAGS:
                out.append((_ARG_FLAGS[word], no_control(value, host=host, source=source)))
                continue
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
            i += 1
        elif word[:2] in _ARG_FLAGS and len(word) > 2:
            out.append((_ARG_FLAGS[word[:2]], no_control(word[2:], host=host, source=source)))
            i += 1
            continue
        elif word.startswith("-") and len(word) > 1 and all(c in _NOARG_FLAGS for c in word[1:]):
            for c in word[1:]:
                mapped = _NOARG_FLAGS[c]
                if mapped is not None:
                    out.append(mapped)
            i += 1
            continue
        else:
            raise InputError(
                f"ssh argument {word!r} in {source} is not supported by nodetune's SSH client "
                "(it takes -o Key=Value, -i, -p, -l, -J, -F, -C and the flags -q -v -T -t -n "
                "-x -X -Y -a -A -k -K)", host=host)
        key, sep, val = value.partition("=")
        if not sep or " " in key.strip():
            key, _, val = value.strip().partition(" ")
        key, val = key.strip(), val.strip()
        if not _KEY.match(key) or not val or _CONTROL.search(val):
            raise InputError(f"{source}: -o {value!r} is not a Key=Value ssh option", host=host)
        if key.lower() in ("host", "match", "include"):
            raise InputError(f"{source}: -o {key} is not an option ssh takes on its command line",
                             host=host)
        out.append((key, val))
    return out


def no_control(value: str, *, host: str | None, source: str) -> str:
    """``value`` if it has no control character (which would end its ssh_config line)."""
    if _CONTROL.search(value):
        raise InputError(f"{source} {value!r} holds a control character: in ssh_config it "
                         "would end the line and start a directive of its own", host=host)
    return value


def checked_opt(opt: Opt, host: str) -> Opt:
    """``opt`` if its value can be written as one ssh_config line and reads back the same
    under paramiko and OpenSSH; User and IdentityFile values are checked as such."""
    no_control(opt.value, host=host, source=f"{opt.source} ({opt.key})")
    kind = opt.key.lower()
    if kind == "user" and (_BAD_USER.search(opt.value) or opt.value.startswith("-")):
        raise InputError(f"{opt.source}: user {opt.value!r} is not a user name (it has a "
                         "space, quote, %, ${, \\\\, a trailing \\, a shell metacharacter or "
                         "a leading -)", host=host)
    if kind == "identityfile":
        tokens = {m[1] for m in re.finditer(r"%(.?)", opt.value)} - _KEY_TOKENS
        if tokens or '"' in opt.value or "~" in opt.value[1:]:
            raise InputError(
                f"{opt.source}: key file {opt.value!r} has a '\"', a '~' past its start or a "
                f"%-token other than %d %h %l %r %u; ssh_config cannot say it unambiguously",
                host=host)
    return opt


def checked_port(raw: object, *, host: str, source: str = "ansible_port") -> str:
    """``ansible_port`` (or a ProxyJump hop's port) as the integer 1-65535 it must be."""
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isascii() or not text.isdigit() \
            or not 0 < int(text) < 65536:
        raise InputError(f"{source} {raw!r} is not a TCP port (an integer 1-65535)",
                         host=host)
    return str(int(text))


def checked_address(address: str, host: str, *, source: str = "ansible_host") -> str:
    """A host name (``ansible_host``: what ssh_config is matched against and %h expands to;
    or a ProxyJump hop), if OpenSSH would take it as a host name on its command line."""
    if _CONTROL.search(address) or _BAD_HOST.search(address) or address.startswith("-"):
        raise InputError(f"{source} {address!r} is not a host name or address (a "
                         "space, control character, shell metacharacter or leading -)",
                         host=host)
    return address


def hop_options(hop: str, host: str) -> tuple[str, list[Opt]]:
    """One ProxyJump hop ``[ssh://][user@]host[:port]``: its host and its User/Port options,
    each checked as the target's are.

    Raises:
        InputError: a hop that is not ``[user@]host[:port]``, a bad host, user or port.
    """
    match = _JUMP.match(hop)
    if not match or _CONTROL.search(hop) or _BAD_HOST.search(match.group("host").strip("[]")):
        raise InputError(f"ProxyJump hop {hop!r} is not [user@]host[:port]", host=host)
    opts = [checked_opt(Opt(k, v, f"ProxyJump {hop}"), host)
            for k, v in (("User", match.group("user")), ("Port", match.group("port"))) if v]
    for opt in opts:
        if opt.key == "Port":
            checked_port(opt.value, host=host, source=f"ProxyJump {hop} port")
    return match.group("host").strip("[]"), opts


def connection_vars(host: Any) -> dict[str, Any]:
    """``host``'s variables with each connection variable that holds Jinja (``{{``/``{%``)
    rendered with the host's own variables, as ansible-playbook would before it runs ssh;
    ``ansible_host`` is always there (the inventory name where it is not set).

    Raises:
        InputError: a template that cannot be rendered from the inventory (naming the
            host and the variable).
    """
    out = dict(host.vars)
    out.setdefault("ansible_host", host.name)
    variables = templating.host_variables(host.name, out)
    for name in CONNECTION_VARS:
        raw = out.get(name)
        if not templating.is_template(raw):
            continue
        try:
            value = templating.render(name, raw, variables, host=host.name)
        except InputError as exc:
            raise InputError(f"{name} {raw!r} could not be rendered from the inventory "
                             f"({exc.message})", host=host.name) from None
        out[name] = "" if value is None else str(value)
    return out


def inventory_options(vars_: Mapping[str, Any], host: str) -> list[Opt]:
    """Every option Ansible's ssh connection would put on the command line, in its order,
    each checked to be one ssh_config line (:func:`checked_opt`). ``vars_`` are rendered
    (:func:`connection_vars`).

    Raises:
        InputError: a value with a control character, a port that is not 1-65535, a user
            or key file ssh_config cannot hold as given (named with its variable).
    """
    args = _ansible_ssh_args(vars_)
    opts = [Opt(k, v, "ssh_args") for k, v in ssh_options(args["ssh_args"],
                                                          source="ssh_args", host=host)]
    port = vars_.get("ansible_port", vars_.get("ansible_ssh_port"))
    if port is not None and str(port) != "":
        opts.append(Opt("Port", checked_port(port, host=host), "ansible_port"))
    key = vars_.get("ansible_ssh_private_key_file", vars_.get("ansible_private_key_file"))
    if key:
        opts.append(Opt("IdentityFile", str(key), "ansible_ssh_private_key_file"))
    user = vars_.get("ansible_user", vars_.get("ansible_ssh_user"))
    if user:
        opts.append(Opt("User", str(user), "ansible_user"))
    for name in ("ssh_common_args", "ssh_extra_args"):
        source = f"ansible_{name}"
        opts += [Opt(k, v, source) for k, v in ssh_options(args[name], source=source, host=host)]
    return [checked_opt(o, host) for o in opts]


def _ansible_ssh_args(vars_: Mapping[str, Any]) -> dict[str, str]:
    """ssh_args, ssh_common_args and ssh_extra_args as Ansible resolves them for this host."""
    from ansible import constants as C
    from ansible.plugins.loader import connection_loader

    # Ansible's plugin loader is not thread-safe, and validate resolves both nodes at once.
    with _ANSIBLE_LOCK:
        connection_loader.get("ssh", class_only=True)  # registers the plugin's options
        out = {}
        for name in ("ssh_args", "ssh_common_args", "ssh_extra_args"):
            value = C.config.get_config_value(name, plugin_type="connection",
                                              plugin_name="ssh", variables=dict(vars_))
            out[name] = str(value or "")
    return out


def check_hosts(hosts: Sequence[Any]) -> None:
    """The connection variables of every host reached over SSH (``ansible_connection`` ssh,
    paramiko_ssh, smart: what :func:`~nodetune.remote.ssh_config.spec_for` resolves),
    checked before any is contacted: each value that goes into the synthetic ssh_config
    (ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file, every ssh
    argument, each ProxyJump hop they give), rendered first where it holds Jinja. No file
    is read and nothing is connected; ``spec_for`` does the rest at connect time.

    Raises:
        InputError: the first bad value, naming its host and variable.
    """
    for host in hosts:
        if host.connection not in SSH_CONNECTIONS:
            continue
        vars_ = connection_vars(host)
        checked_address(str(vars_["ansible_host"]), host.name)
        for opt in inventory_options(vars_, host.name):
            if opt.key.lower() != "proxyjump" or opt.value.lower() == "none":
                continue
            for hop in opt.value.split(","):
                try:
                    hop_options(hop.strip(), host.name)
                except InputError as exc:
                    raise InputError(f"{opt.source}: {exc.message}", host=host.name) from None
