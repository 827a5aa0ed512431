"""The addresses a validation dials, checked before any node is contacted: an IP address
or a host name, so that a typo fails as an input error (exit 2) rather than as a rendezvous
timeout. The master's address (``--master-addr``, ``nodetune_validate_master_addr``) is
checked here for the pair, the fleet, ``tune`` and ``--rdma-bw`` alike."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError

VAR_MASTER = "nodetune_validate_master_addr"

# A DNS name (RFC 1123 labels); an all-numeric last label would be a mistyped IPv4 address.
# (underscores too: /etc/hosts and many resolvers take them).
_HOSTNAME = re.compile(r"(?=.{1,253}\.?$)(?:[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.)*"
                       r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.?")


def checked_address(value: str, what: str, host: str | None = None) -> str:
    """``value`` if it is an IP address or a host name, so that a typo fails now rather
    than as a rendezvous timeout.

    Raises:
        InputError: anything else, naming ``what`` (the option or variable) and the host.
    """
    text = value.strip()
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    last = text.rstrip(".").rsplit(".", 1)[-1]
    if _HOSTNAME.fullmatch(text) and not last.isdigit():
        return text
    raise InputError(f"{what} {value!r} is not an IP address or host name", host=host)


def check_master_addrs(hosts: Iterable[Host]) -> None:
    """Every host's ``nodetune_validate_master_addr``, checked before any pair is planned.

    Raises:
        InputError: a malformed one, naming the host and the variable.
    """
    for host in hosts:
        value = host.vars.get(VAR_MASTER)
        if value not in (None, ""):
            checked_address(str(value), VAR_MASTER, host.name)
