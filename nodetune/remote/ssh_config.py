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
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodetune.errors import InputError

DEFAULT_KNOWN_HOSTS = (Path("~/.ssh/known_hosts"), Path("/etc/ssh/ssh_known_hosts"))
USER_CONFIG = Path("~/.ssh/config")
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
# Connection plugins by the short name Host.connection gives them
# (ansible.builtin.ssh is ssh, ansible.legacy.local is local).
LOCAL_CONNECTIONS = frozenset({"local"})
SSH_CONNECTIONS = frozenset({"ssh", "paramiko_ssh", "smart"})
MAX_JUMPS = 8
_ANSIBLE_LOCK = threading.Lock()

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
# What OpenSSH refuses in a user or host name given on its command line (misc.c
# valid_ruser()/valid_hostname(), OpenSSH 9.6, CVE-2023-51385; read 2026-11-29): shell
# metacharacters that a %u/%r/%h token would carry into a ProxyCommand. Also refused in a
# user here: whitespace, '"' and '%' (no user name has them; ssh_config cannot escape a
# quote, and paramiko and OpenSSH expand '%' in a User differently).
_BAD_HOST = re.compile(r"""['`"$\\;&<>|(){},\s]""")
_BAD_USER = re.compile(r"""['`"$\\;&<>|(){}%\s]""")
# IdentityFile tokens that paramiko expands as OpenSSH does (ssh_config(5) TOKENS; paramiko
# SSHConfig.TOKENS_BY_CONFIG_KEY): any other '%' (%%, %C, %i, %k, %n, %p...) would name a
# different file under nodetune than under ssh.
_KEY_TOKENS = frozenset("dhlru")
_JUMP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s]+)"
                   r"(?::(?P<port>\d+))?$")


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


@dataclass(frozen=True, slots=True)
class _Opt:
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
                out.append((_ARG_FLAGS[word], _no_control(value, host=host, source=source)))
                continue
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
            i += 1
        elif word[:2] in _ARG_FLAGS and len(word) > 2:
            out.append((_ARG_FLAGS[word[:2]], _no_control(word[2:], host=host, source=source)))
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


def _no_control(value: str, *, host: str | None, source: str) -> str:
    """``value`` if it has no control character (which would end its ssh_config line)."""
    if _CONTROL.search(value):
        raise InputError(f"{source} {value!r} holds a control character: in ssh_config it "
                         "would end the line and start a directive of its own", host=host)
    return value


def _checked_opt(opt: _Opt, host: str) -> _Opt:
    """``opt`` if its value can be written as one ssh_config line and reads back the same
    under paramiko and OpenSSH; User and IdentityFile values are checked as such."""
    _no_control(opt.value, host=host, source=f"{opt.source} ({opt.key})")
    kind = opt.key.lower()
    if kind == "user" and (_BAD_USER.search(opt.value) or opt.value.startswith("-")):
        raise InputError(f"{opt.source}: user {opt.value!r} is not a user name (it has a "
                         "space, quote, %, shell metacharacter or a leading -)", host=host)
    if kind == "identityfile":
        tokens = {m[1] for m in re.finditer(r"%(.?)", opt.value)} - _KEY_TOKENS
        if tokens or '"' in opt.value or "~" in opt.value[1:]:
            raise InputError(
                f"{opt.source}: key file {opt.value!r} has a '\"', a '~' past its start or a "
                f"%-token other than %d %h %l %r %u; ssh_config cannot say it unambiguously",
                host=host)
    return opt


def _checked_port(raw: object, *, host: str) -> str:
    """``ansible_port`` as the integer 1-65535 it must be."""
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isascii() or not text.isdigit() \
            or not 0 < int(text) < 65536:
        raise InputError(f"ansible_port {raw!r} is not a TCP port (an integer 1-65535)",
                         host=host)
    return str(int(text))


def _line(opt: _Opt) -> str:
    """One synthetic ssh_config line. A User or IdentityFile value is written in double
    quotes (checked to hold none), as Ansible passes them to ssh, so that spaces, '#' or a
    leading '=' stay part of it; any other value goes as ssh would read it from ``-o``."""
    if opt.key.lower() in ("user", "identityfile"):
        return f'{opt.key} "{opt.value}"\n'
    return f"{opt.key} {opt.value}\n"


def _inventory_options(vars_: Mapping[str, Any], host: str) -> list[_Opt]:
    """Every option Ansible's ssh connection would put on the command line, in its order,
    each checked to be one ssh_config line (:func:`_checked_opt`).

    Raises:
        InputError: a value with a control character, a port that is not 1-65535, a user
            or key file ssh_config cannot hold as given (named with its variable).
    """
    args = _ansible_ssh_args(vars_)
    opts = [_Opt(k, v, "ssh_args") for k, v in ssh_options(args["ssh_args"],
                                                           source="ssh_args", host=host)]
    port = vars_.get("ansible_port", vars_.get("ansible_ssh_port"))
    if port is not None and str(port) != "":
        opts.append(_Opt("Port", _checked_port(port, host=host), "ansible_port"))
    key = vars_.get("ansible_ssh_private_key_file", vars_.get("ansible_private_key_file"))
    if key:
        opts.append(_Opt("IdentityFile", str(key), "ansible_ssh_private_key_file"))
    user = vars_.get("ansible_user", vars_.get("ansible_ssh_user"))
    if user:
        opts.append(_Opt("User", str(user), "ansible_user"))
    for name in ("ssh_common_args", "ssh_extra_args"):
        source = f"ansible_{name}"
        opts += [_Opt(k, v, source) for k, v in ssh_options(args[name], source=source, host=host)]
    return [_checked_opt(o, host) for o in opts]


def _checked_address(address: str, host: str) -> str:
    """``ansible_host`` (what ssh_config is matched against and %h expands to), if OpenSSH
    would take it as a host name on its command line."""
    if _CONTROL.search(address) or _BAD_HOST.search(address) or address.startswith("-"):
        raise InputError(f"ansible_host {address!r} is not a host name or address (a "
                         "space, control character, shell metacharacter or leading -)",
                         host=host)
    return address


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


def config_files(opts: Sequence[_Opt]) -> tuple[Path, ...]:
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


def _refuse_unhandled(conf: Mapping[str, Any], opts: Sequence[_Opt], *, host: str,
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


def check_hosts(hosts: Sequence[Any]) -> None:
    """The connection variables of every host reached over SSH (``ansible_connection`` ssh,
    paramiko_ssh, smart: what :func:`spec_for` resolves), checked before any
    is contacted: each value that goes into the synthetic ssh_config (ansible_host,
    ansible_port, ansible_user, ansible_ssh_private_key_file, every ssh argument). No file
    is read and nothing is connected; :func:`spec_for` does the rest at connect time.

    Raises:
        InputError: the first bad value, naming its host and variable.
    """
    for host in hosts:
        if host.connection not in SSH_CONNECTIONS:
            continue
        _checked_address(host.address, host.name)
        _inventory_options(host.vars, host.name)


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
    address = _checked_address(host.address, host.name)
    opts = _inventory_options(host.vars, host.name)
    explicit_f = any(o.key == "__configfile__" for o in opts)
    files = config_files(opts)
    files_text = _files_text(files, required=explicit_f, host=host.name)
    synthetic = "".join(_line(o) for o in opts if o.key != "__configfile__")
    full_text = f"Host *\n{synthetic}" + files_text if synthetic else files_text
    return _resolve(host.name, address, full_text, files_text, opts=opts, files=files,
                    accept_new=accept_new_host_keys, chain=())


def _resolve(name: str, target: str, text: str, files_text: str, *, opts: Sequence[_Opt],
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
    match = _JUMP.match(hop)
    if not match or _CONTROL.search(hop) or _BAD_HOST.search(match.group("host").strip("[]")):
        raise InputError(f"ProxyJump hop {hop!r} is not [user@]host[:port]", host=name)
    target = match.group("host").strip("[]")
    # Like OpenSSH, a jump host gets only its ssh_config, not the target's -o options.
    opts = [_checked_opt(_Opt(k, v, f"ProxyJump {hop}"), name)
            for k, v in (("User", match.group("user")), ("Port", match.group("port"))) if v]
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
