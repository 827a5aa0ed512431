"""Resolve how to reach a host the way ``ssh`` under Ansible would: inventory, ssh args, ssh_config.

Sources, first obtained value wins (OpenSSH's rule, and the order in which
Ansible's ssh connection writes its command line):

1. ``ssh_args`` (ansible.cfg ``[ssh_connection]``, ``ANSIBLE_SSH_ARGS``, ``ansible_ssh_args``);
2. ``ansible_port``, ``ansible_ssh_private_key_file``, ``ansible_user``;
3. ``ssh_common_args`` then ``ssh_extra_args`` (same three places each);
4. the ssh_config file: ``-F FILE`` from those args, else ``~/.ssh/config`` then
   ``/etc/ssh/ssh_config`` (``Include`` expanded).

paramiko's :class:`~paramiko.config.SSHConfig` does the matching and the
``%h``/``%p``/``%r`` expansion. An option nodetune's SSH client cannot honour
is refused (exit 2, naming the host, the option and where it came from),
never dropped: silently ignoring a ProxyJump or an IdentityFile is how a
cluster behind a bastion turned into "cannot reach".

The connection variables are rendered (where they hold Jinja) and checked by
:mod:`nodetune.remote.ssh_inputs`, whose ``check_hosts`` the verbs call before any
node is contacted; :func:`spec_for` resolves from the same rendered values.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodetune.errors import InputError
from nodetune.remote.ssh_inputs import (
    SSH_CONNECTIONS,
    Opt,
    check_hosts,
    checked_address,
    connection_vars,
    hop_options,
    inventory_options,
    ssh_options,
)

# check_hosts and ssh_options are nodetune.remote.ssh_inputs's; callers take them from here.
__all__ = ["LOCAL_CONNECTIONS", "SSH_CONNECTIONS", "ConnectSpec", "check_hosts", "config_files",
           "spec_for", "ssh_options"]

DEFAULT_KNOWN_HOSTS = (Path("~/.ssh/known_hosts"), Path("/etc/ssh/ssh_known_hosts"))
USER_CONFIG = Path("~/.ssh/config")
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
# Connection plugins by the short name Host.connection gives them
# (ansible.builtin.ssh is ssh, ansible.legacy.local is local).
LOCAL_CONNECTIONS = frozenset({"local"})
MAX_JUMPS = 8

# Options nodetune's client acts on (see _spec_from).
USED = frozenset({
    "hostname", "port", "user", "identityfile", "identitiesonly", "identityagent",
    "userknownhostsfile", "globalknownhostsfile", "stricthostkeychecking", "proxyjump",
    "proxycommand", "connecttimeout", "serveraliveinterval", "compression", "addressfamily",
    "canonicalizehostname", "canonicaldomains", "canonicalizemaxdots",
    "canonicalizefallbacklocal", "canonicalizepermittedcnames",
})
# Options that change nothing for non-interactive commands over one connection per node:
# multiplexing, logging, prompts, forwarding to the node, and authentication methods
# other than keys (nodetune never prompts, so they are never tried).
NO_EFFECT = frozenset({
    "controlmaster", "controlpersist", "controlpath", "loglevel", "batchmode",
    "serveralivecountmax", "tcpkeepalive", "hashknownhosts", "checkhostip", "updatehostkeys",
    "visualhostkey", "forwardagent", "forwardx11", "forwardx11trusted", "requesttty",
    "sendenv", "addkeystoagent", "usekeychain", "preferredauthentications",
    "passwordauthentication", "kbdinteractiveauthentication",
    "challengeresponseauthentication", "pubkeyauthentication", "gssapiauthentication",
    "gssapidelegatecredentials", "numberofpasswordprompts", "escapechar",
    "exitonforwardfailure", "clearallforwardings", "permitlocalcommand", "localcommand",
    "verifyhostkeydns",
})
# Values an option is honoured with; any other value is refused.
ONLY = {"addressfamily": {"any"}, "verifyhostkeydns": {"no"}, "permitlocalcommand": {"no"}}
@dataclass(frozen=True, slots=True)
class ConnectSpec:
    """How to reach one host, resolved from its Ansible variables and ssh_config."""

    host: str
    address: str
    port: int = 22
    user: str | None = None
    key_files: tuple[Path, ...] = ()
    known_hosts: tuple[Path, ...] = DEFAULT_KNOWN_HOSTS
    strict: str = "yes"
    local: bool = False
    jumps: tuple[ConnectSpec, ...] = ()
    proxy_command: str | None = None
    connect_timeout: float | None = None
    keepalive: int = 0
    compress: bool = False
    allow_agent: bool = True
    role: str = ""

    def describe(self) -> str:
        """``user@address:port with key K [via J]`` for messages."""
        who = f"{self.user}@" if self.user else ""
        key = (f" with key {', '.join(str(k) for k in self.key_files)}" if self.key_files
               else " with the SSH agent/default keys")
        role = f"{self.role} " if self.role else ""
        via = ""
        if self.jumps:
            via = " via " + " -> ".join(f"{j.user + '@' if j.user else ''}{j.address}:{j.port}"
                                        for j in self.jumps)
        elif self.proxy_command:
            via = f" via ProxyCommand {self.proxy_command!r}"
        return f"{role}{who}{self.address}:{self.port}{key}{via}"


def _line(opt: Opt) -> str:
    """One synthetic ssh_config line. A User or IdentityFile value is written in double
    quotes (checked to hold none), as Ansible passes them to ssh, so that spaces, '#' or a
    leading '=' stay part of it; any other value goes as ssh would read it from ``-o``."""
    if opt.key.lower() in ("user", "identityfile"):
        return f'{opt.key} "{opt.value}"\n'
    return f"{opt.key} {opt.value}\n"


def _config_text(path: Path, *, base: Path, host: str, depth: int = 0) -> str:
    """The text of ssh_config ``path`` with its ``Include`` lines replaced by what they name."""
    if depth > 16:
        raise InputError(f"ssh config {path}: Include nested more than 16 deep", host=host)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read ssh config {path}: {exc.strerror or exc}",
                         host=host) from None
    out: list[str] = []
    for line in lines:
        match = re.match(r"^\s*include(?:\s*=\s*|\s+)(.+)$", line, re.IGNORECASE)
        if not match:
            out.append(line)
            continue
        for pattern in shlex.split(match.group(1)):
            full = Path(pattern).expanduser()
            if not full.is_absolute():
                full = base / full
            for name in sorted(glob.glob(str(full))):
                out.append(_config_text(Path(name), base=base, host=host, depth=depth + 1))
    return "\n".join(out) + "\n"


def config_files(opts: Sequence[Opt]) -> tuple[Path, ...]:
    """The ssh_config files in force: ``-F`` if given (``none``: none), else user then system."""
    for opt in opts:
        if opt.key == "__configfile__":
            return () if opt.value == "none" else (Path(opt.value).expanduser(),)
    return tuple(p for p in (USER_CONFIG.expanduser(), SYSTEM_CONFIG) if p.is_file())


def _files_text(files: Sequence[Path], *, required: bool, host: str) -> str:
    text = ""
    for path in files:
        if required and not path.is_file():
            raise InputError(f"ssh config {path} (-F) does not exist", host=host)
        # OpenSSH: a relative Include is under ~/.ssh in a user config (-F too), /etc/ssh
        # in the system one.
        base = USER_CONFIG.expanduser().parent if path != SYSTEM_CONFIG else Path("/etc/ssh")
        text += _config_text(path, base=base, host=host)
    return text


def _lookup(text: str, target: str, *, host: str, files: Sequence[Path]) -> dict[str, Any]:
    where = ", ".join(str(p) for p in files) or "ssh options"
    try:
        import paramiko  # here, not at import: the node-local check never needs it

        conf = paramiko.SSHConfig.from_text(text).lookup(target)
    except (paramiko.ssh_exception.ConfigParseError, ImportError, ValueError) as exc:
        raise InputError(f"cannot use ssh config {where}: {exc}", host=host) from None
    return dict(conf)


def _refuse_unhandled(conf: Mapping[str, Any], opts: Sequence[Opt], *, host: str,
                      files: Sequence[Path]) -> None:
    sources = {o.key.lower(): o.source for o in opts}
    for key, value in conf.items():
        if key in USED or key in NO_EFFECT:
            allowed = ONLY.get(key)
            if allowed is None or str(value).lower() in allowed:
                continue
        where = sources.get(key) or "ssh config " + ", ".join(str(p) for p in files)
        shown = value if not isinstance(value, list) else " ".join(value)
        raise InputError(
            f"SSH option {key} {shown!s} (from {where}) is not supported by nodetune's SSH "
            "client, and ignoring it could reach the wrong node or the right one the wrong "
            "way; remove it for this host, or use ansible_connection: local where it is the "
            "controller", host=host)


def spec_for(host: Any, *, accept_new_host_keys: bool = False) -> ConnectSpec:
    """Resolve ``host``'s connection the way ``ssh`` started by Ansible would.

    Args:
        host: an inventory :class:`~nodetune.ansible.inventory.Host`.
        accept_new_host_keys: trust and record keys not yet known (changed keys still fail).

    Raises:
        InputError: an option nodetune cannot honour, a value that would not stay one
            ssh_config line (a control character: it would add a directive of its own), a
            bad port, user, key file or ansible_host, a missing key file or ssh_config, a
            ProxyJump loop.
    """
    if host.connection in LOCAL_CONNECTIONS:
        return ConnectSpec(host=host.name, address=host.address, local=True)
    vars_ = connection_vars(host)  # Jinja rendered, as check_hosts checked them
    address = checked_address(str(vars_["ansible_host"]), host.name)
    opts = inventory_options(vars_, host.name)
    explicit_f = any(o.key == "__configfile__" for o in opts)
    files = config_files(opts)
    files_text = _files_text(files, required=explicit_f, host=host.name)
    synthetic = "".join(_line(o) for o in opts if o.key != "__configfile__")
    full_text = f"Host *\n{synthetic}" + files_text if synthetic else files_text
    return _resolve(host.name, address, full_text, files_text, opts=opts, files=files,
                    accept_new=accept_new_host_keys, chain=())


def _resolve(name: str, target: str, text: str, files_text: str, *, opts: Sequence[Opt],
             files: Sequence[Path], accept_new: bool, chain: tuple[str, ...],
             role: str = "") -> ConnectSpec:
    if len(chain) > MAX_JUMPS:
        raise InputError(f"ProxyJump chain {' -> '.join(chain)} is longer than {MAX_JUMPS} "
                         "hops (a loop in ssh_config?)", host=name)
    conf = _lookup(text, target, host=name, files=files)
    _refuse_unhandled(conf, opts, host=name, files=files)
    sources = {o.key.lower(): o.source for o in opts}
    port_raw = conf.get("port", "22")
    try:
        port = int(port_raw)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise InputError(f"port {port_raw!r} (from {sources.get('port', 'ssh config')}) is not a"
                         " TCP port (1-65535)", host=name)
    keys = []
    given = {str(Path(o.value).expanduser()) for o in opts if o.key.lower() == "identityfile"}
    for raw in conf.get("identityfile") or []:
        path = Path(raw).expanduser()
        if path.is_file():
            keys.append(path)
        elif str(path) in given:
            raise InputError(f"SSH key {path} (from {sources.get('identityfile')}) does not "
                             "exist", host=name)
    known = tuple(Path(p).expanduser() for p in
                  str(conf.get("userknownhostsfile", "~/.ssh/known_hosts")).split())
    known += tuple(Path(p) for p in
                   str(conf.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts")).split())
    strict = str(conf.get("stricthostkeychecking", "yes")).lower()
    if strict == "ask":
        strict = "yes"  # nodetune never prompts
    if accept_new and strict in ("yes", "true"):
        strict = "accept-new"
    agent = str(conf.get("identityagent", "SSH_AUTH_SOCK"))
    if agent not in ("none", "SSH_AUTH_SOCK", os.environ.get("SSH_AUTH_SOCK", "SSH_AUTH_SOCK")):
        raise InputError(f"IdentityAgent {agent} is not supported; set SSH_AUTH_SOCK instead",
                         host=name)
    only_ids = str(conf.get("identitiesonly", "no")).lower() == "yes"
    proxy_command = conf.get("proxycommand")
    jump_raw = str(conf.get("proxyjump") or "none")
    if proxy_command and jump_raw != "none":
        raise InputError(f"both ProxyJump {jump_raw} and ProxyCommand {proxy_command!r} apply to "
                         f"{target}; keep one", host=name)
    jumps: list[ConnectSpec] = []
    if jump_raw != "none":
        for hop in jump_raw.split(","):
            jumps += _jump(name, hop.strip(), files_text, files=files, accept_new=accept_new,
                           chain=(*chain, target))
    timeout = conf.get("connecttimeout")
    try:
        connect_timeout = float(timeout) if timeout is not None else None
        keepalive = int(conf.get("serveraliveinterval", 0))
    except ValueError:
        alive = conf.get("serveraliveinterval")
        raise InputError(f"ConnectTimeout {timeout!r} / ServerAliveInterval {alive!r} is not "
                         "a number", host=name) from None
    return ConnectSpec(
        host=name, address=str(conf.get("hostname", target)), port=port,
        user=str(conf["user"]) if conf.get("user") else None, key_files=tuple(keys),
        known_hosts=known, strict=strict, jumps=tuple(jumps),
        proxy_command=str(proxy_command) if proxy_command else None,
        connect_timeout=connect_timeout, keepalive=keepalive,
        compress=str(conf.get("compression", "no")).lower() == "yes",
        allow_agent=agent != "none" and not only_ids, role=role)


def _jump(name: str, hop: str, files_text: str, *, files: Sequence[Path], accept_new: bool,
          chain: tuple[str, ...]) -> list[ConnectSpec]:
    """The specs to reach one ProxyJump hop: its own jumps (from ssh_config) first, then it."""
    target, opts = hop_options(hop, name)
    # Like OpenSSH, a jump host gets only its ssh_config, not the target's -o options.
    head = "".join(_line(o) for o in opts)
    text = (f"Host *\n{head}" if head else "") + files_text
    spec = _resolve(name, target, text, files_text, opts=opts, files=files,
                    accept_new=accept_new, chain=chain, role=f"jump host {target}")
    if spec.proxy_command:
        raise InputError(f"jump host {target} has a ProxyCommand of its own; nodetune supports "
                         "ProxyJump chains or one ProxyCommand, not both", host=name)
    inner = list(spec.jumps)
    from dataclasses import replace

    return [*inner, replace(spec, jumps=())]
