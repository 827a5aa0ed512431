"""``serve``'s probe: what the node has (Python, torch, GPUs, its interfaces), torch
imported once and CUDA left untouched for the ranks forked afterwards."""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import time

_SIOCGIFADDR = 0x8915


def _ipv4_addresses() -> dict[str, str]:
    """Each interface that holds an IPv4 address (and is up), in ifindex order."""
    import fcntl

    out: dict[str, str] = {}
    for _index, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
        try:
            with open(f"/sys/class/net/{name}/operstate") as fh:
                if fh.read().strip() == "down":
                    continue
        except OSError:
            pass
        out[name] = socket.inet_ntoa(packed[20:24])
    return out


def _route_dev(address: str) -> str | None:
    try:
        out = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True,
                             text=True, timeout=5, check=False).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[out.index("dev") + 1] if "dev" in out[:-1] else None


def interface_for(address: str) -> tuple[str | None, str | None]:
    """(interface, local address) this node would use to reach ``address``."""
    try:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            local = sock.getsockname()[0]
    except OSError:
        return None, None
    if family == socket.AF_INET:
        for name, held in _ipv4_addresses().items():
            if held == local:
                return name, local
    return _route_dev(address), local


def interfaces_info() -> dict[str, object]:
    """The interfaces a data path may take, the RDMA netdevs among them, and the one SSH
    came in on (SSH_CONNECTION's server address; none under a local connection)."""
    held = _ipv4_addresses()
    rdma = [n for n in held if os.path.isdir(f"/sys/class/net/{n}/device/infiniband")]
    server = (os.environ.get("SSH_CONNECTION") or "").split()[2:3]
    ssh = None
    if server:
        ssh = next((n for n, a in held.items() if a == server[0]), None) or (
            _route_dev(server[0]) if ":" in server[0] else None)
    return {"interfaces": list(held), "rdma_interfaces": rdma,
            "ssh_iface": ssh, "addresses": sorted(set(held.values()))}


def probe_info(args: argparse.Namespace) -> dict[str, object]:
    """What the node has, with torch imported once (None in ``torch_error`` when it can't be).

    CUDA is not initialised here: GPUs are counted through NVML
    (PYTORCH_NVML_BASED_CUDA_CHECK), so the ranks forked afterwards can use it.
    """
    info: dict[str, object] = {
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
    }
    if args.master:
        info["iface"], info["local_address"] = interface_for(args.master)
    info.update(interfaces_info())
    if args.free_port:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            info["free_port"] = sock.getsockname()[1]
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    t0 = time.perf_counter()
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # report any import failure, not only ImportError
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["import_s"] = round(time.perf_counter() - t0, 3)
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["gloo"] = bool(dist.is_gloo_available())
    info["nccl_available"] = bool(dist.is_nccl_available())
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info["cuda_devices"] = count
    try:
        by_nvml = int(torch.cuda._device_count_nvml())  # -1: NVML could not count
    except Exception:
        by_nvml = -1
    # Without NVML the count came from the CUDA runtime, which initialised CUDA in
    # this process: a forked rank could not use it then, so the ranks are started
    # as new processes instead (a second torch import, but a correct one).
    info["fork"] = count == 0 or by_nvml >= 0
    if count and dist.is_nccl_available():
        info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    return info
