"""What a node should look like: the roles' defaults under the inventory's variables.

Ansible's precedence puts role defaults below inventory group_vars and
host_vars; :func:`expectations` layers them the same way, from the same
``roles/*/defaults/main.yml`` files ``apply`` runs, and computes what the
roles would set with the roles' own helpers (``nodetune_mtu.select``,
``roce_qos``'s filters, ``nodetune_sysctl.normalize``). Nothing is re-typed
here, so a changed default changes the check too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host
from nodetune.ansible.nccl_settings import NCCL_NIC_VARS, NCCL_ROLE_VARS, HostVars, nccl_settings
from nodetune.ansible.role_defaults import Value, role_plugin
from nodetune.check import nccl
from nodetune.check.model import HelpLines
from nodetune.errors import InputError
from nodetune.measure.shm import VAR_MIN_SHM, min_shm
from nodetune.measure.sizes import parse_sizes

# Inventory variables only `check` reads.
VAR_EXPECTED_GPUS = "nodetune_expected_gpus"
VAR_RDMA_RATE = "nodetune_expected_rdma_rate_gbps"
VAR_PYTHON = "nodetune_python"
VAR_ALLREDUCE_MIN = "nodetune_check_min_busbw_gbps"
VAR_ALLREDUCE_PROFILE = "nodetune_check_profile"
VAR_ALLREDUCE_SIZES = "nodetune_check_sizes"
VAR_MAX_OFFSET = "nodetune_max_clock_offset_ms"  # node.time_sync's limit
# Its inventory variables' lines in check's --help (nodetune.check.listing).
VARS_HELP: HelpLines = (
    (VAR_EXPECTED_GPUS, "GPUs each node must have"),
    (VAR_MIN_SHM, "smallest /dev/shm, e.g. 1G (default 1G)"),
    (VAR_RDMA_RATE, "rate every RDMA port must reach, e.g. 400"),
    (VAR_PYTHON, "the node's python with torch"),
    (VAR_ALLREDUCE_MIN, "one-node all_reduce pass mark (GB/s at the largest size)"),
    (VAR_ALLREDUCE_PROFILE, "one-node profile by name (default: by GPU model and count)"),
    (VAR_ALLREDUCE_SIZES, "one-node all_reduce sizes, e.g. 64M:16G"),
    (VAR_MAX_OFFSET, "node.time_sync's limit in ms (default 100)"),
)
DEFAULT_MAX_OFFSET_MS = 100.0
MAX_OFFSET_DEFAULT_SOURCE = (f"{VAR_MAX_OFFSET} unset: nodetune's default "
                             f"{DEFAULT_MAX_OFFSET_MS:g} ms (chronyc(1) tracking, "
                             "timedatectl(1) timesync-status)")


@dataclass(frozen=True, slots=True)
class Expectations:
    """Everything one node is held to."""

    host: str
    expected_gpus: int | None
    min_shm: int
    min_shm_source: str
    driver_version: Value | None
    persistenced: bool
    rdma_rate_gbps: float | None
    torch_python: str | None
    sysctl_enabled: bool
    sysctls: Mapping[str, str] = field(default_factory=dict)   # key -> normalised value
    sysctl_source: Mapping[str, str] = field(default_factory=dict)
    sysctl_required: frozenset[str] = frozenset()
    mtu_enabled: bool = True
    mtu_requests: tuple[Mapping[str, Any], ...] = ()
    mtu_source: str = ""
    mtu_allow_connection: bool = False
    mtu_allow_absent: bool = False
    nccl_path: str = "/etc/nccl.conf"
    nccl_nics: Mapping[str, Value] = field(default_factory=dict)  # what apply writes, by key
    nccl_settings: Mapping[str, Value] = field(default_factory=dict)  # every key apply writes
    nccl_allow_absent: bool = False
    roce_enabled: bool = True
    roce_interfaces: tuple[str, ...] = ()
    roce_trust: str = "dscp"
    kernel_modules: Value | None = None
    roce_pfc: tuple[int, ...] = ()
    roce_ecn: tuple[int, ...] = ()
    roce_tos: str = ""
    allreduce_min: float | None = None
    allreduce_profile: str | None = None
    allreduce_sizes: str | None = None
    max_offset_ms: float = DEFAULT_MAX_OFFSET_MS  # node.time_sync's limit
    max_offset_source: str = MAX_OFFSET_DEFAULT_SOURCE

    @property
    def sysctl_keys(self) -> list[str]:
        """The keys the probe reads."""
        return list(self.sysctls)


_Vars = HostVars
__all__ = ["NCCL_NIC_VARS", "NCCL_ROLE_VARS", "Expectations", "expectations"]


def _bool(value: Value, host: str) -> bool:
    return truth.boolean(value.value, name=value.name, host=host)


def _int_list(value: Value, host: str) -> tuple[int, ...]:
    raw = value.value if isinstance(value.value, list | tuple) else [value.value]
    try:
        out = tuple(int(str(v)) for v in raw)
    except ValueError:
        raise InputError(f"{value.name} {value.value!r}: expected a list of priorities 0-7",
                         host=host) from None
    if any(not 0 <= p <= 7 for p in out):
        raise InputError(f"{value.name} {list(out)}: priorities are 0-7", host=host)
    return out


def _sysctls(v: _Vars, host: str) -> tuple[dict[str, str], dict[str, str], frozenset[str]]:
    sysctl_mod = role_plugin("plugins/modules/nodetune_sysctl.py")
    settings, overrides = v.get("net_sysctl_settings"), v.get("net_sysctl_settings_overrides")
    cc = v.get("net_sysctl_tcp_congestion_control")
    for val in (settings, overrides):
        if not isinstance(val.value or {}, Mapping):
            raise InputError(f"{val.name} must be a mapping of sysctl key: value", host=host)
    wanted: dict[str, str] = {}
    source: dict[str, str] = {}
    for val in (settings, overrides):
        for key, value in (val.value or {}).items():
            wanted[str(key)] = sysctl_mod.normalize(value)
            source[str(key)] = val.source
    wanted["net.ipv4.tcp_congestion_control"] = sysctl_mod.normalize(cc.value)
    source["net.ipv4.tcp_congestion_control"] = cc.source
    bad = [k for k in wanted if not sysctl_mod.KEY_RE.match(k)]
    if bad:
        raise InputError(f"net_sysctl_settings: invalid sysctl key {bad[0]!r}", host=host)
    required = v.get("net_sysctl_required").value or []
    return wanted, source, frozenset(str(k) for k in required)


def expectations(host: Host) -> Expectations:
    """What ``host`` is held to, from its variables over the role defaults.

    Raises:
        InputError: a variable of the wrong type or shape (names the host and variable).
    """
    v = _Vars(host)
    name = host.name
    gpus_raw = host.vars.get(VAR_EXPECTED_GPUS)
    expected_gpus = None
    if gpus_raw not in (None, ""):
        try:
            expected_gpus = int(str(gpus_raw))
        except ValueError:
            raise InputError(f"{VAR_EXPECTED_GPUS} {gpus_raw!r} is not a whole number",
                             host=name) from None
        if expected_gpus < 0:
            raise InputError(f"{VAR_EXPECTED_GPUS} {expected_gpus} must be >= 0", host=name)
    shm, shm_source = min_shm(host)
    rate_raw = host.vars.get(VAR_RDMA_RATE)
    rate = None
    if rate_raw not in (None, ""):
        try:
            rate = float(str(rate_raw))
        except ValueError:
            raise InputError(f"{VAR_RDMA_RATE} {rate_raw!r} is not a number of Gb/s",
                             host=name) from None
    driver = v.get("nvidia_driver_version")
    python = host.vars.get(VAR_PYTHON)
    wanted, source, required = _sysctls(v, name)
    mtu = v.get("net_mtu_interfaces")
    requests = mtu.value or []
    if not isinstance(requests, list) or not all(
            isinstance(r, Mapping) and "mtu" in r for r in requests):
        raise InputError("net_mtu_interfaces must be a list of {name|name_regex|rdma, mtu}",
                         host=name)
    for r in requests:
        try:
            int(str(r["mtu"]))
        except ValueError:
            raise InputError(f"net_mtu_interfaces: mtu {r['mtu']!r} is not a number",
                             host=name) from None
    tos = v.get("roce_qos_rdma_cm_tos")
    nccl_enabled = _bool(v.get("nccl_config_enabled"), name)
    settings = nccl_settings(v) if nccl_enabled else {}
    max_offset, max_offset_source = _max_offset(host)
    allreduce_min, allreduce_profile, allreduce_sizes = _allreduce(host)
    return Expectations(
        host=name, expected_gpus=expected_gpus, min_shm=shm,
        min_shm_source=shm_source,
        driver_version=driver if driver.value not in (None, "") else None,
        persistenced=_bool(v.get("nvidia_driver_persistenced"), name),
        kernel_modules=v.get("nvidia_driver_kernel_modules"),
        rdma_rate_gbps=rate,
        torch_python=str(python) if python not in (None, "") else None,
        sysctl_enabled=_bool(v.get("net_sysctl_enabled"), name),
        sysctls=wanted, sysctl_source=source, sysctl_required=required,
        mtu_enabled=_bool(v.get("net_mtu_enabled"), name),
        mtu_requests=tuple(dict(r) for r in requests), mtu_source=mtu.source,
        mtu_allow_connection=_bool(v.get("net_mtu_allow_connection_interface"), name),
        mtu_allow_absent=_bool(v.get("net_mtu_allow_absent_nics"), name),
        nccl_path=str(v.get("nccl_config_path").value),
        nccl_nics={k: settings[k] for k in NCCL_NIC_VARS if k in settings},
        nccl_settings=settings,
        nccl_allow_absent=_bool(v.get("nccl_config_allow_absent_nics"), name),
        roce_enabled=_bool(v.get("roce_qos_enabled"), name),
        roce_interfaces=tuple(str(i) for i in (v.get("roce_qos_interfaces").value or [])),
        roce_trust=str(v.get("roce_qos_trust").value),
        roce_pfc=_int_list(v.get("roce_qos_pfc_priorities"), name),
        roce_ecn=_int_list(v.get("roce_qos_ecn_priorities"), name),
        roce_tos=str(tos.value),
        allreduce_min=allreduce_min, allreduce_profile=allreduce_profile,
        allreduce_sizes=allreduce_sizes,
        max_offset_ms=max_offset, max_offset_source=max_offset_source,
    )


def _max_offset(host: Host) -> tuple[float, str]:
    """The host's offset limit in ms and where it comes from.

    Raises:
        InputError: not a number of milliseconds > 0 (names host and variable).
    """
    raw = host.vars.get(VAR_MAX_OFFSET)
    if raw in (None, ""):
        return DEFAULT_MAX_OFFSET_MS, MAX_OFFSET_DEFAULT_SOURCE
    try:
        value = float(str(raw))
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf") or isinstance(raw, bool):
        raise InputError(f"{VAR_MAX_OFFSET} {raw!r}: expected a number of milliseconds > 0, "
                         "e.g. 100", host=host.name)
    return value, f"{VAR_MAX_OFFSET} (inventory)"


def _allreduce(host: Host) -> tuple[float | None, str | None, str | None]:
    """The one-node all_reduce's pass mark, profile and sizes from the inventory, checked."""
    raw_min = host.vars.get(VAR_ALLREDUCE_MIN)
    low: float | None = None
    if raw_min not in (None, ""):
        try:
            low = float(str(raw_min))
        except ValueError:
            raise InputError(f"{VAR_ALLREDUCE_MIN} {raw_min!r} is not a number of GB/s",
                             host=host.name) from None
        if low < 0:
            raise InputError(f"{VAR_ALLREDUCE_MIN} {low:g} must be >= 0", host=host.name)
    profile = host.vars.get(VAR_ALLREDUCE_PROFILE)
    if profile not in (None, "") and str(profile) not in nccl.PROFILES:
        raise InputError(f"{VAR_ALLREDUCE_PROFILE} {profile!r}: known profiles are "
                         + ", ".join(nccl.PROFILES), host=host.name)
    sizes = host.vars.get(VAR_ALLREDUCE_SIZES)
    if sizes not in (None, ""):
        try:
            parse_sizes(str(sizes))
        except InputError as exc:
            raise InputError(f"{VAR_ALLREDUCE_SIZES}: {exc.message}", host=host.name) from None
    return (low, str(profile) if profile not in (None, "") else None,
            str(sizes) if sizes not in (None, "") else None)
