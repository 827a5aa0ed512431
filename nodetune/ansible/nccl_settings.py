"""The NCCL values the nccl_config role writes for a host: its own variables, then
``nccl_config_extra`` (combined last, so it wins), each over the role defaults as
Ansible layers them. ``check`` holds the node's file to them; ``validate`` holds NCCL's
own report of what it used to them (:mod:`nodetune.measure.nccl_effective`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodetune.ansible import templating, truth
from nodetune.ansible.inventory import Host
from nodetune.ansible.role_defaults import Value, role_defaults
from nodetune.errors import InputError

# Roles whose defaults a host's variables are layered over (and templated against).
ROLES = ("net_sysctl", "net_mtu", "roce_qos", "nvidia_driver", "nccl_config")
# nccl_config's variables that name the node's interfaces and HCAs, by NCCL key.
NCCL_NIC_VARS = {"NCCL_SOCKET_IFNAME": "nccl_config_socket_ifname",
                 "NCCL_IB_HCA": "nccl_config_ib_hca"}
# Every NCCL key nccl_config writes from a variable of its own (its vars/main.yml
# __nccl_config_named); nccl_config_extra adds any other and wins over these.
NCCL_ROLE_VARS = {**NCCL_NIC_VARS, "NCCL_IB_GID_INDEX": "nccl_config_ib_gid_index",
                  "NCCL_IB_TC": "nccl_config_ib_tc", "NCCL_IB_SL": "nccl_config_ib_sl",
                  "NCCL_NET_GDR_LEVEL": "nccl_config_net_gdr_level"}


def _defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for role in ROLES:
        merged.update(role_defaults(role))
    return merged


class HostVars:
    """A host's variables over the role defaults, templated where they hold Jinja."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.defaults = _defaults()

    def get(self, name: str) -> Value:
        """The variable's effective value, and whether the inventory set it.

        A role default computed from other variables (``nccl_config_ib_tc`` over
        roce_qos's) is only Ansible's to evaluate: where Ansible is not importable (the
        node-local health check on a node) it is ``None``, so nothing holds the node to
        it. A template the inventory wrote is still evaluated, and fails there.
        """
        inventory = name in self.host.vars
        raw = self.host.vars[name] if inventory else self.defaults.get(name)
        if not inventory and templating.is_template(raw) and not templating.available():
            return Value(name, None, False)
        return Value(name, self._template(name, raw), inventory)

    def _template(self, name: str, raw: Any) -> Any:
        return templating.render(name, raw, {**self.defaults, **self.host.vars},
                                 host=self.host.name)


def nccl_settings(v: HostVars) -> dict[str, Value]:
    """Every NCCL key nccl_config writes for the host, where set ({} where the role is
    turned off).

    Raises:
        InputError: nccl_config_enabled is not a boolean, or nccl_config_extra is not a
            mapping of NCCL_* names.
    """
    host = v.host.name
    enabled = v.get("nccl_config_enabled")
    if not truth.boolean(enabled.value, name=enabled.name, host=host):
        return {}
    extra = v.get("nccl_config_extra")
    if not isinstance(extra.value or {}, Mapping) or any(
            not str(k).startswith("NCCL_") for k in (extra.value or {})):
        raise InputError(f"nccl_config_extra {extra.value!r}: expected a mapping of NCCL_* "
                         "variable: value", host=host)
    out = {}
    for key, var in NCCL_ROLE_VARS.items():
        own = v.get(var)
        if own.value not in (None, ""):
            out[key] = own
    for key, value in (extra.value or {}).items():
        if value not in (None, ""):
            out[str(key)] = Value(f"nccl_config_extra.{key}", value, extra.from_inventory)
    return out


def text(value: Any) -> str:
    """A variable's value as it is written into nccl.conf / the environment."""
    return str(int(value)) if isinstance(value, bool) else str(value).strip()
