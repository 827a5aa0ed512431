"""Which interface a validation's traffic takes on each node: decided here, and only here.

The inventory usually says already where the fabric is: ``nccl_config``'s
``NCCL_SOCKET_IFNAME`` and the interfaces ``net_mtu`` gives jumbo frames. A
validation that ignored them measured the management network that carries SSH
(a copied inventory passed a node whose fabric link was throttled). So the
data interface is, in this order:

1. ``nodetune_socket_ifname`` (validate's own override);
2. ``GLOO_SOCKET_IFNAME``, then ``NCCL_SOCKET_IFNAME`` in ``nodetune_env``;
3. ``NCCL_SOCKET_IFNAME`` in ``nccl_config_extra``, then ``nccl_config_socket_ifname``
   (NCCL's syntax: ``=eth1`` exact, ``eth`` a prefix; ``^...`` excludes and names none),
   unless ``nccl_config_enabled`` is false;
4. the entries of ``net_mtu_interfaces`` (name, name_regex, rdma), never the interface
   that carries SSH (net_mtu leaves it alone too), unless ``net_mtu_enabled`` is false;
5. else the interface the node's route to the master takes.

:func:`request_for` reads the inventory before any node is contacted (bad values
exit 2 there); :func:`resolve` settles it against what the node reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible import templating, truth
from nodetune.errors import InputError

VAR_IFNAME = "nodetune_socket_ifname"
VAR_ENV = "nodetune_env"
VAR_NCCL_IFNAME = "nccl_config_socket_ifname"
VAR_NCCL_EXTRA = "nccl_config_extra"
VAR_MTU = "net_mtu_interfaces"
VAR_NCCL_ENABLED = "nccl_config_enabled"
VAR_MTU_ENABLED = "net_mtu_enabled"
ROUTE = "route to the master"
SOCKET_KINDS = ("Socket", "gloo/TCP")  # transports whose data crosses a TCP interface
# A Linux interface name: at most 15 bytes, no '/', ':' or white space (dev_valid_name).
IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}")


@dataclass(frozen=True, slots=True)
class Request:
    """What the inventory asks for one node, before connecting.

    ``exact``/``prefixes``/``regexes``/``rdma`` select among the node's interfaces;
    none of them set means: the interface that reaches the master.
    """

    source: str
    exact: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    regexes: tuple[str, ...] = ()
    rdma: bool = False
    strict: bool = True   # an absent interface is bad input (False: fall back to the route)

    @property
    def detect(self) -> bool:
        """Whether nothing was named: the route to the master decides."""
        return not (self.exact or self.prefixes or self.regexes or self.rdma)


@dataclass(frozen=True, slots=True)
class Interfaces:
    """What a node reported about its interfaces (empty when it could not tell)."""

    usable: tuple[str, ...] = ()      # up, with an IPv4 address, in ifindex order
    rdma: tuple[str, ...] = ()        # netdevs of RDMA devices (RoCE, IPoIB)
    route: str | None = None          # the interface its route to the master takes
    ssh: str | None = None            # the interface holding SSH_CONNECTION's server address


@dataclass(frozen=True, slots=True)
class DataPath:
    """The interface one node's ranks were given, where that came from, and SSH's."""

    host: str
    interface: str | None
    source: str
    ssh_interface: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def over_ssh(self) -> bool:
        """Whether the data interface is the one SSH (the management network) comes in on."""
        return self.interface is not None and self.interface == self.ssh_interface

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as report.json's ``result.paths[]`` / ``pairs[].paths[]``."""
        return {"host": self.host, "interface": self.interface, "source": self.source,
                "ssh_interface": self.ssh_interface, "over_ssh": self.over_ssh}


def request_for(host_name: str, variables: Mapping[str, Any]) -> Request:
    """The data interface the inventory asks for on one host.

    Values holding Jinja are evaluated over the host's variables first.

    Raises:
        InputError: a value that names no interface in a usable way, or a template that
            cannot be evaluated without the node (exit 2).
    """
    def get(name: str, key: str | None = None) -> Any:
        # A templated value ("={{ fabric_if }}") as Ansible would write it, before any check;
        # of a mapping (nodetune_env, nccl_config_extra), only the entry that is read.
        raw = variables.get(name)
        if key is not None:
            if not isinstance(raw, Mapping):
                return None
            raw, name = raw.get(key), f"{name}.{key}"
        return templating.render(name, raw, variables, host=host_name)

    own = get(VAR_IFNAME)
    if own not in (None, ""):
        return Request(VAR_IFNAME, exact=(_name(own, VAR_IFNAME, host_name),))
    gloo = get(VAR_ENV, "GLOO_SOCKET_IFNAME")
    if gloo not in (None, ""):
        where = f"{VAR_ENV}.GLOO_SOCKET_IFNAME"
        return Request(where, exact=(_name(gloo, where, host_name),))
    if (req := _nccl(get(VAR_ENV, "NCCL_SOCKET_IFNAME"), f"{VAR_ENV}.NCCL_SOCKET_IFNAME",
                     host_name)) is not None:
        return req
    # A role that is off writes nothing on the node: its variables say nothing of the fabric.
    if _enabled(variables, VAR_NCCL_ENABLED, host_name, get):
        if (req := _nccl(get(VAR_NCCL_EXTRA, "NCCL_SOCKET_IFNAME"),
                         f"{VAR_NCCL_EXTRA}.NCCL_SOCKET_IFNAME", host_name)) is not None:
            return req
        if (req := _nccl(get(VAR_NCCL_IFNAME), VAR_NCCL_IFNAME, host_name)) is not None:
            return req
    if _enabled(variables, VAR_MTU_ENABLED, host_name, get):
        return _mtu(get(VAR_MTU), host_name) or Request(ROUTE)
    return Request(ROUTE)


def _enabled(variables: Mapping[str, Any], var: str, host: str,
             read: Callable[[str], object]) -> bool:
    """A role's ``*_enabled`` by nodetune.ansible.truth's rule (absent: on, the roles'
    default; ``read`` evaluates a template).

    Raises:
        InputError: not a boolean, an explicit null included (names host and variable).
    """
    return truth.setting(variables, var, default=True, host=host, read=read)


def _name(value: object, var: str, host: str) -> str:
    text = str(value).strip().removeprefix("=")
    if not IFNAME.fullmatch(text):
        raise InputError(f"{var} {value!r}: expected one interface name such as eth1 or "
                         "ens1f0np0", host=host)
    return text


def _nccl(value: object, var: str, host: str) -> Request | None:
    """NCCL_SOCKET_IFNAME's syntax: ``=a,b`` exact names, ``a,b`` prefixes, ``^..`` excludes."""
    if value in (None, ""):
        return None
    text = ",".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
    text = text.strip()
    if text.startswith("^"):
        return None  # says what is not the fabric, not what is
    exact = text.startswith("=")
    names = tuple(n.strip() for n in text.removeprefix("=").split(",") if n.strip())
    for n in names:
        if not IFNAME.fullmatch(n):
            raise InputError(f"{var} {value!r}: {n!r} is not an interface name", host=host)
    if not names:
        return None
    return Request(var, exact=names) if exact else Request(var, prefixes=names)


def _mtu(value: object, host: str) -> Request | None:
    if not isinstance(value, list):
        return None
    exact: list[str] = []
    regexes: list[str] = []
    rdma = False
    for entry in value:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("name"):
            exact.append(_name(entry["name"], VAR_MTU, host))
        elif entry.get("name_regex"):
            try:
                re.compile(str(entry["name_regex"]))
            except re.error as exc:
                raise InputError(f"{VAR_MTU}: name_regex {entry['name_regex']!r}: {exc}",
                                 host=host) from None
            regexes.append(str(entry["name_regex"]))
        elif entry.get("rdma"):
            rdma = True
    if not (exact or regexes or rdma):
        return None
    return Request(VAR_MTU, exact=tuple(exact), regexes=tuple(regexes), rdma=rdma, strict=False)


def resolve(host: str, request: Request, found: Interfaces) -> DataPath:
    """The interface ``host``'s ranks get.

    A node that reported no interface list (an older worker, no ``/sys``) is
    taken at the inventory's word.

    Raises:
        InputError: an interface the inventory names (not net_mtu's hints) is absent or has
            no IPv4 address on the node; the message lists those it has.
    """
    if request.detect:
        return DataPath(host, found.route, ROUTE, found.ssh)
    if not found.usable:
        named = request.exact[0] if request.exact else None
        return DataPath(host, named or found.route, request.source if named else ROUTE,
                        found.ssh)
    # net_mtu never touches the connection's interface: neither is it the fabric.
    usable = [n for n in found.usable if request.strict or n != found.ssh]
    for name in request.exact:
        if name in usable:
            return DataPath(host, name, request.source, found.ssh)
    for name in usable:
        if (any(name.startswith(p) for p in request.prefixes)
                or any(re.search(r, name) for r in request.regexes)
                or (request.rdma and name in found.rdma)):
            return DataPath(host, name, request.source, found.ssh)
    wanted = ", ".join([*request.exact, *(f"{p}*" for p in request.prefixes),
                        *(f"/{r}/" for r in request.regexes),
                        *(["an RDMA netdev"] if request.rdma else [])])
    has = ", ".join(found.usable)
    if request.strict:
        raise InputError(f"{request.source} names {wanted}, but this node has no such interface "
                         f"up with an IPv4 address (it has {has}); set {VAR_IFNAME} for it",
                         host=host)
    return DataPath(host, found.route, ROUTE, found.ssh,
                    notes=(f"{request.source} selects no fabric interface here ({wanted}; "
                           f"it has {has}): the route to the master decides",))


def over_ssh_warning(kind: str, interfaces: Sequence[str],
                     paths: Sequence[DataPath]) -> str | None:
    """The warning for a socket transport that crossed the interface SSH comes in on."""
    if kind not in SOCKET_KINDS:
        return None
    hosts = [p for p in paths if p.over_ssh
             or (kind == "Socket" and p.ssh_interface and p.ssh_interface in interfaces)]
    if not hosts:
        return None
    where = ", ".join(f"{p.host} ({p.ssh_interface})" for p in hosts)
    return (f"the data path is the interface SSH uses on {where}: this measured the "
            f"management network, not the fabric; set {VAR_NCCL_IFNAME} (as nccl_config "
            f"writes it) or {VAR_IFNAME} to the fabric interface")


def label(kind: str | None, interfaces: Sequence[str]) -> str:
    """``gloo/TCP eth1``: what a pair row shows."""
    return " ".join(x for x in (kind or "-", ",".join(interfaces)) if x)
