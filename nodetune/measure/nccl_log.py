"""Read which transport NCCL chose out of its ``NCCL_DEBUG=INFO`` lines.

The lines this understands (NCCL 2.5 to 2.28, see tests/fixtures/nccl/):

  ``NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>``
  ``NET/Socket : Using [0]eth0:10.0.0.1<0>``   ``NET/IB : No device found.``
  ``Using network IB`` / ``Using network Socket`` / ``Using network <plugin>``
  ``Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`` (also ``NET/Socket/0``,
  ``NET/IBext_v8/2``, ``P2P/CUMEM``, ``P2P/IPC/read``, ``SHM/direct/direct``)
  ``NCCL version 2.28.9+cuda13.0``
  ``AllReduce: 1073741824 Bytes -> Algo 1 proto 2 time 25.2`` (TUNING; names or numbers)

and, for the effective configuration (:mod:`~nodetune.measure.nccl_effective`; formats
from NVIDIA/nccl v2.28.9-1, read 2026-11-29):

  ``NCCL_BUFFSIZE set by environment to 8388608.`` (ENV: src/misc/param.cc ncclLoadParam
  ``"%s set by environment to %lld."``; string values without the dot, e.g.
  src/misc/socket.cc ``"NCCL_SOCKET_IFNAME set by environment to %s"``)
  ``Invalid value 8M for NCCL_BUFFSIZE, using default 4194304.`` (param.cc, every subsystem)
  ``Assigned NET plugin Socket to comm`` (src/plugin/net.cc, INIT|NET)
  ``Connected all rings, use ring PXN 0 GDR 1`` (src/transport/generic.cc, INIT)
  ``64 coll channels, 64 collnet channels, 0 nvls channels, ...`` (src/init.cc, INIT; its
  collnet count is printed from nChannels, so only the nvls count is read)
  ``Connected NVLS tree`` (src/transport/nvls.cc), ``rank 0 Connected CollNet``
  (src/transport/coll_net.cc), ``... disabling CollNet`` (src/init.cc)

Each line starts ``host:pid:tid [cudaDev] NCCL INFO`` (src/debug.cc); :func:`by_rank`
splits a node's log on the pid, one process per rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_NET_USING = re.compile(r"NET/(?P<net>IB|Socket)\s*:\s*Using\s+(?P<rest>.*)")
_IB_DEV = re.compile(r"\[\d+\](?P<dev>[\w.-]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_SOCK_DEV = re.compile(r"\[\d+\](?P<dev>[\w.@-]+):")
_USING_NETWORK = re.compile(r"Using network (?P<name>\S.*?)\s*$")
_VIA = re.compile(r"\bvia (?P<path>(?:NET|P2P|SHM|NVLS|COLLNET|CollNet)[\w/.-]*)")
_VERSION = re.compile(r"NCCL version (?P<v>[\w.+-]+)")
_TUNING = re.compile(
    r"(?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)")
_WARN = re.compile(r"NCCL WARN (?P<msg>.*)")
_NO_IB = re.compile(r"NET/IB : No device found")
_PREFIX = re.compile(
    r"^\s*(?P<host>[^\s:]+):(?P<pid>\d+):\d+ \[(?P<dev>[^\]]*)\] NCCL (?:INFO|WARN)")
_SET_BY_ENV = re.compile(r"\b(?P<key>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\s*$")
_INVALID = re.compile(r"Invalid value (?P<given>.*) for (?P<key>NCCL_[A-Z0-9_]+), "
                      r"using default (?P<default>-?\d+)\.")
_ASSIGNED = re.compile(r"Assigned NET plugin (?P<name>\S+) to comm")
_PEER = re.compile(r"Channel \d+(?:/\d+)? : (?P<src>\d+)\[[^\]]*\] -> (?P<dst>\d+)\[[^\]]*\]"
                   r"(?: \[(?:send|receive)\])? via (?P<path>\S+)")
_RING_GDR = re.compile(r"Connected all rings.* GDR (?P<gdr>\d+)")
_NVLS_CHANNELS = re.compile(r"(?P<n>\d+) nvls channels")
_NVLS_USED = re.compile(r"Connected NVLS tree")
_COLLNET_USED = re.compile(r"Connected CollNet|via COLLNET/")
_COLLNET_OFF = re.compile(r"disabling CollNet")

# enum order in NCCL's src/include/device.h (NCCL_ALGO_*, NCCL_PROTO_*)
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True, slots=True)
class NcclTransport:
    """What NCCL's log says about the path between the ranks."""

    network: str | None = None            # "IB", "RoCE", "Socket", a plugin name, or None
    ib_devices: tuple[str, ...] = ()      # "mlx5_0:1/RoCE"
    socket_devices: tuple[str, ...] = ()  # "eth0"
    net_paths: tuple[str, ...] = ()       # distinct "NET/IB/0/GDRDMA"-style channel paths
    local_paths: tuple[str, ...] = ()     # distinct "P2P/CUMEM", "SHM/direct/direct"
    gdrdma: bool = False
    version: str | None = None
    algorithms: dict[int, tuple[str, str]] = field(default_factory=dict)  # bytes -> (algo, proto)
    ib_missing: bool = False
    warnings: tuple[str, ...] = ()
    # The effective configuration (nccl_effective.py):
    env: dict[str, str] = field(default_factory=dict)    # NCCL_X -> the value NCCL logged
    invalid: dict[str, tuple[str, str]] = field(default_factory=dict)  # -> (given, default)
    net_plugin: str | None = None          # "Assigned NET plugin X to comm" (2.2x)
    peers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "0->1" -> paths
    gdr: bool | None = None                # None: NCCL said nothing either way
    nvls_channels: int | None = None
    nvls: bool = False                     # an NVLS tree was connected
    collnet: bool | None = None            # None: not logged (NCCL's default is off)

    @property
    def kind(self) -> str:
        """One word for the inter-node network: IB, RoCE, Socket, the plugin's name, or local.

        ``local`` means NCCL connected every channel inside one host (P2P, SHM)
        and crossed no network, whatever network plugin it loaded.
        """
        if self.local_paths and not self.net_paths:
            return "local"
        if self.net_paths:
            uses_ib = any(p.startswith(("NET/IB", "NET/IBext")) for p in self.net_paths)
            uses_sock = any(p.startswith("NET/Socket") for p in self.net_paths)
            if uses_ib:
                return "RoCE" if self._roce() else "IB"
            if uses_sock:
                return "Socket"
        if self.network in ("IB", "RoCE") or (self.network is None and self.ib_devices):
            # NCCL before 2.1x has no "Using network" line; it uses IB once it lists devices.
            return "RoCE" if self._roce() else "IB"
        if self.network is None and self.socket_devices:
            return "Socket"
        return self.network or "unknown"

    def _roce(self) -> bool:
        return bool(self.ib_devices) and all(d.endswith("/RoCE") for d in self.ib_devices)

    def algorithm_at(self, nbytes: int) -> tuple[str, str] | None:
        """(algorithm, protocol) NCCL chose for the all_reduce of ``nbytes``, if logged."""
        return self.algorithms.get(nbytes)


def _name(value: str, names: tuple[str, ...]) -> str:
    if value.isdigit() and int(value) < len(names):
        return names[int(value)]
    for name in names:
        if name.lower() == value.lower():
            return name
    return value


def parse(lines: Iterable[str]) -> NcclTransport:
    """Parse NCCL INFO/WARN lines (any others are skipped)."""
    network: str | None = None
    ib: dict[str, None] = {}
    sock: dict[str, None] = {}
    net_paths: dict[str, None] = {}
    local_paths: dict[str, None] = {}
    version: str | None = None
    algos: dict[int, tuple[str, str]] = {}
    warnings: dict[str, None] = {}
    ib_missing = False
    config = _Config()
    for line in lines:
        if "NCCL" not in line or config.feed(line):
            continue
        if m := _NET_USING.search(line):
            rest = m["rest"].split(";")[0]
            if m["net"] == "IB":
                for d in _IB_DEV.finditer(rest):
                    ib[f"{d['dev']}:{d['port']}/{d['link']}"] = None
            else:
                for d in _SOCK_DEV.finditer(rest):
                    sock[d["dev"]] = None
        elif m := _USING_NETWORK.search(line):
            network = m["name"]
        elif m := _VIA.search(line):
            path = m["path"]
            (net_paths if path.startswith("NET") else local_paths)[path] = None
        elif m := _TUNING.search(line):
            if m["func"] in (None, "AllReduce"):
                algos[int(m["bytes"])] = (_name(m["algo"], ALGORITHMS),
                                          _name(m["proto"], PROTOCOLS))
        elif m := _WARN.search(line):
            warnings[m["msg"].strip()] = None
        elif _NO_IB.search(line):
            ib_missing = True
        if version is None and (m := _VERSION.search(line)):
            version = m["v"]
    return NcclTransport(
        network=network, ib_devices=tuple(ib), socket_devices=tuple(sock),
        net_paths=tuple(sorted(net_paths)), local_paths=tuple(sorted(local_paths)),
        gdrdma=any(p.endswith("/GDRDMA") for p in net_paths), version=version,
        algorithms=algos, ib_missing=ib_missing, warnings=tuple(warnings)[:20],
        env=config.env, invalid=config.invalid, net_plugin=config.plugin or network,
        peers={k: tuple(v) for k, v in sorted(config.peers.items())},
        gdr=True if any(p.endswith("/GDRDMA") for p in net_paths) else config.gdr,
        nvls_channels=config.nvls_channels, nvls=config.nvls, collnet=config.collnet,
    )


class _Config:
    """The effective-configuration facts of :func:`parse`, gathered line by line."""

    def __init__(self) -> None:
        self.env: dict[str, str] = {}
        self.invalid: dict[str, tuple[str, str]] = {}
        self.plugin: str | None = None
        self.peers: dict[str, dict[str, None]] = {}
        self.gdr: bool | None = None
        self.nvls_channels: int | None = None
        self.nvls = False
        self.collnet: bool | None = None

    def feed(self, line: str) -> bool:
        """Take what ``line`` says; True where nothing else can be read from it."""
        if m := _SET_BY_ENV.search(line):
            self.env[m["key"]] = _logged_value(m["value"])
            return True
        if m := _INVALID.search(line):
            self.invalid[m["key"]] = (m["given"], m["default"])
            return True
        if m := _ASSIGNED.search(line):
            self.plugin = m["name"]
        elif m := _RING_GDR.search(line):
            self.gdr = bool(int(m["gdr"])) or bool(self.gdr)
        elif m := _NVLS_CHANNELS.search(line):
            self.nvls_channels = int(m["n"])
        elif _NVLS_USED.search(line):
            self.nvls = True
        elif _COLLNET_OFF.search(line) and self.collnet is None:
            self.collnet = False
        if _COLLNET_USED.search(line):
            self.collnet = True
        if m := _PEER.search(line):
            self.peers.setdefault(f"{m['src']}->{m['dst']}", {})[m["path"]] = None
        return False


def _logged_value(text: str) -> str:
    """The value of a "set by environment to" line: ncclLoadParam ends an integer with a
    full stop ("%lld."), string settings have none."""
    return text[:-1] if re.fullmatch(r"-?\d+\.", text) else text


def by_rank(lines: Iterable[str]) -> dict[str, list[str]]:
    """A node's NCCL lines by the process that wrote them (``host:pid``), in order; lines
    without NCCL's prefix are left out."""
    out: dict[str, list[str]] = {}
    for line in lines:
        if "NCCL" in line and (m := _PREFIX.search(line)):
            out.setdefault(f"{m['host']}:{m['pid']}", []).append(line)
    return out
