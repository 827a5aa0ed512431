"""Read which transport NCCL chose out of its ``NCCL_DEBUG=INFO`` lines.

The lines this understands (NCCL 2.5 to 2.28, see tests/fixtures/nccl/):

  ``NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>``
  ``NET/Socket : Using [0]eth0:10.0.0.1<0>``   ``NET/IB : No device found.``
  ``Using network IB`` / ``Using network Socket`` / ``Using network <plugin>``
  ``Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`` (also ``NET/Socket/0``,
  ``NET/IBext_v8/2``, ``P2P/CUMEM``, ``P2P/IPC/read``, ``SHM/direct/direct``)
  ``NCCL version 2.28.9+cuda13.0``
  ``AllReduce: 1073741824 Bytes -> Algo 1 proto 2 time 25.2`` (TUNING; names or numbers)
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
    for line in lines:
        if "NCCL" not in line:
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
    )
