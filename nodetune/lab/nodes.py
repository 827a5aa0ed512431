"""A local lab of podman containers that behave like cluster nodes (systemd, sshd, own netns)."""

from __future__ import annotations

import ipaddress
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodetune.errors import InputError, LabError
from nodetune.lab import slurm as lab_slurm
from nodetune.lab import standin_paths
from nodetune.lab.config import (
    FABRIC,
    FABRIC_MTU,
    HOST_BASE,
    IMAGE,
    LABEL,
    NAME,
    NETWORK,
    PREFIX,
    VOLUME,
    Say,
)
from nodetune.lab.image import build_image, image_present
from nodetune.lab.podman import LabNode
from nodetune.lab.podman import require_root as _require_root
from nodetune.lab.podman import run as _podman
from nodetune.lab.venv import LAB_PYTHON_VAR, SHARED_VENV, install_torch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LabStatus:
    """What the lab looks like now."""

    nodes: tuple[LabNode, ...]
    image_present: bool
    inventory: Path | None


DEFAULT_NODES = 2


def up(root: Path, *, nodes: int | None = None, shrink: bool = False,
       base_image: str | None = None, with_torch: bool = False, with_slurm: bool = False,
       progress: Say = lambda _m: None) -> LabStatus:
    """Start the lab's nodes (idempotent) and write ``inventory/lab/hosts.yml``.

    ``nodes`` None keeps the lab's size (every node it has is kept; a new lab
    gets DEFAULT_NODES). Fewer ``nodes`` than the lab has is refused unless
    ``shrink`` asks to remove the nodes beyond them. A lab that runs Slurm gets
    its slurm.conf rewritten whenever its nodes change, so Slurm never lists a
    node that is gone. With ``with_torch`` a CPU torch is installed once into a
    venv on the volume every node shares, and the inventory points
    ``nodetune_python`` at it, so ``nodetune validate inventory/lab`` runs gloo
    between the nodes. With ``with_slurm`` the nodes run a real Slurm
    (:mod:`nodetune.lab.slurm`).

    Raises:
        InputError: ``nodes`` out of range, or fewer than the lab has without ``shrink``.
        LabError: podman, sshd, torch or Slurm failed.
    """
    if nodes is not None and not 1 <= nodes <= 16:
        raise InputError(f"--nodes {nodes}: the lab runs 1 to 16 nodes")
    _require_root()
    root = root.resolve()
    existing = {n.name: n for n in _list_nodes()}
    count = nodes if nodes is not None else max(
        (_index(name) for name in existing), default=0) or DEFAULT_NODES
    wanted = [f"{PREFIX}{i}" for i in range(1, count + 1)]
    beyond = [name for name in existing if name not in wanted]
    if beyond and not shrink:
        raise InputError(
            f"--nodes {count}: lab {NAME} has {len(existing)} nodes; this would remove "
            f"{', '.join(beyond)}. Pass --shrink to remove them (Slurm's node list follows), "
            "or leave out --nodes to keep every node")
    build_image(base_image=base_image, progress=progress)
    keydir = root / ".nodetune" / "lab"
    key = _ensure_key(keydir)
    if _podman("network", "exists", NETWORK, check=False).returncode != 0:
        progress(f"creating network {NETWORK}")
        _podman("network", "create", "--label", LABEL, NETWORK)
    if _podman("network", "exists", FABRIC, check=False).returncode != 0:
        progress(f"creating fabric network {FABRIC} (MTU {FABRIC_MTU}, internal)")
        _podman("network", "create", "--label", LABEL, "--internal", "--opt",
                f"mtu={FABRIC_MTU}", FABRIC)
    subnets = {net: _subnet(net) for net in (NETWORK, FABRIC)}
    if _podman("volume", "exists", VOLUME, check=False).returncode != 0:
        _podman("volume", "create", "--label", LABEL, VOLUME)
    started: list[str] = []
    for index, name in enumerate(wanted, start=1):
        node = existing.get(name)
        if node and node.state == "running":
            continue
        if node:
            _podman("rm", "-f", name)
        progress(f"starting {name}")
        started.append(name)
        eth0, eth1 = (_host_address(subnets[net], index) for net in (NETWORK, FABRIC))
        _podman(
            "run", "-d", "--name", name, "--hostname", name, "--label", LABEL,
            # Named explicitly: podman orders several networks' interfaces arbitrarily.
            # Fixed addresses: a node keeps them across restarts and reboots.
            "--network", f"{NETWORK}:interface_name=eth0,ip={eth0}",
            "--network", f"{FABRIC}:interface_name=eth1,ip={eth1}",
            "--privileged", "--systemd=always",
            # A node that reboots itself (ansible.builtin.reboot) comes back.
            "--restart=always",
            "--shm-size", "1g",
            "-v", f"{key}.pub:/root/.ssh/authorized_keys:ro,Z",
            "-v", f"{VOLUME}:/opt/nodetune-shared",
            IMAGE, "/sbin/init",
        )
    for name in beyond:
        progress(f"removing {name} (beyond --nodes {count}, --shrink)")
        _podman("rm", "-f", name)
    for name in started:
        # A fresh node's NIC is at the Ethernet default, whatever the fabric allows.
        _podman("exec", name, "ip", "link", "set", "dev", "eth1", "mtu", "1500")
    status = _wait_ssh(wanted, progress=progress)
    extra: dict[str, object] = {}
    python = f"{SHARED_VENV}/bin/python"
    if with_torch:
        extra[LAB_PYTHON_VAR] = install_torch(node=wanted[0], progress=progress)
    elif _podman("exec", wanted[0], "test", "-x", python, check=False).returncode == 0:
        extra[LAB_PYTHON_VAR] = python

    slurm = lab_slurm.inventory_vars(status.nodes)
    if with_slurm or (slurm and (started or beyond)):
        # A lab that runs Slurm keeps slurm.conf's node list true as nodes come and go.
        slurm = lab_slurm.up(status.nodes, keydir, progress=progress)
    extra.update(slurm)
    inventory = _write_inventory(root, status.nodes, key, extra)
    return LabStatus(nodes=status.nodes, image_present=True, inventory=inventory)


def _index(name: str) -> int:
    """Node ``PREFIX<i>``'s number i (0 for a name the lab did not give)."""
    tail = name.removeprefix(PREFIX)
    return int(tail) if tail != name and tail.isdigit() else 0


def down(root: Path, *, progress: Say = lambda _m: None) -> list[str]:
    """Remove every container, network, volume and key the lab made; return what went."""
    root = root.resolve()
    removed: list[str] = []
    if shutil.which("podman") is not None:
        for node in _list_nodes():
            progress(f"removing {node.name}")
            _podman("rm", "-f", "-t", "2", node.name)
            removed.append(node.name)
        for net in (NETWORK, FABRIC):
            if _podman("network", "exists", net, check=False).returncode == 0:
                _podman("network", "rm", "-f", net)
                removed.append(f"network {net}")
        if _podman("volume", "exists", VOLUME, check=False).returncode == 0:
            _podman("volume", "rm", "-f", VOLUME)
            removed.append(f"volume {VOLUME}")
    for path in (root / ".nodetune" / "lab", root / "inventory" / "lab"):
        if path.exists():
            shutil.rmtree(path)
            removed.append(str(path.relative_to(root)))
    return removed


def _subnet(network: str) -> ipaddress.IPv4Network:
    """The IPv4 subnet podman gave ``network``."""
    info = json.loads(_podman("network", "inspect", network).stdout)[0]
    for sub in info.get("subnets") or []:
        net = ipaddress.ip_network(sub["subnet"], strict=False)
        if isinstance(net, ipaddress.IPv4Network):
            return net
    raise LabError(f"podman network {network} has no IPv4 subnet")


def _host_address(subnet: ipaddress.IPv4Network, index: int) -> str:
    """Node ``index``'s fixed address in ``subnet``."""
    address = subnet.network_address + HOST_BASE + index
    if address not in subnet or address == subnet.broadcast_address:
        raise LabError(f"subnet {subnet} has no room for lab node {index}")
    return str(address)


def status(root: Path) -> LabStatus:
    """Report the lab's nodes, image and inventory."""
    inv = root / "inventory" / "lab" / "hosts.yml"
    return LabStatus(
        nodes=tuple(_list_nodes()),
        image_present=image_present(),
        inventory=inv if inv.exists() else None,
    )


def _list_nodes() -> list[LabNode]:
    out = _podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "json").stdout
    nodes = []
    for item in json.loads(out or "[]"):
        name = item["Names"][0]
        address = fabric = ""
        if item.get("State") == "running":
            inspect = json.loads(_podman("inspect", name).stdout)[0]
            nets = inspect["NetworkSettings"].get("Networks") or {}
            address = (nets.get(NETWORK) or {}).get("IPAddress", "")
            fabric = (nets.get(FABRIC) or {}).get("IPAddress", "")
        nodes.append(LabNode(name=name, address=address, state=item.get("State", "?"),
                             fabric_address=fabric))
    return sorted(nodes, key=lambda n: (len(n.name), n.name))


def _ensure_key(keydir: Path) -> Path:
    key = keydir / "id_ed25519"
    if not key.exists():
        keydir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodetune-lab",
                        "-f", str(key)], check=True)
    return key


def _wait_ssh(names: Sequence[str], *, progress: Say, timeout: float = 180) -> LabStatus:
    """Wait until sshd answers on every node; return their addresses."""
    import socket

    deadline = time.monotonic() + timeout
    progress("waiting for sshd on every node")
    while True:
        nodes = [n for n in _list_nodes() if n.name in names]
        ready = []
        for node in nodes:
            if not node.address:
                continue
            try:
                with socket.create_connection((node.address, 22), timeout=1) as sock:
                    if sock.recv(4).startswith(b"SSH"):
                        ready.append(node)
            except OSError:
                pass
        if len(ready) == len(names):
            return LabStatus(nodes=tuple(ready), image_present=True, inventory=None)
        if time.monotonic() > deadline:
            missing = sorted(set(names) - {n.name for n in ready})
            raise LabError(f"sshd did not come up within {timeout:.0f} s on: {', '.join(missing)}"
                           " (see `podman logs NAME`)")
        time.sleep(0.5)


def _write_known_hosts(nodes: Sequence[LabNode], path: Path) -> None:
    """Record each node's freshly generated host key, so SSH can check it strictly."""
    proc = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", *[n.address for n in nodes]],
                          capture_output=True, text=True, check=False, timeout=30)
    lines = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("#")]
    if len(lines) < len(nodes):
        raise LabError(f"could not read the SSH host key of every lab node: {proc.stderr[-300:]}")
    path.write_text("\n".join(lines) + "\n")


def _write_inventory(root: Path, nodes: Sequence[LabNode], key: Path,
                     extra: dict[str, object]) -> Path:
    known_hosts = key.parent / "known_hosts"
    _write_known_hosts(nodes, known_hosts)
    inv_dir = root / "inventory" / "lab"
    inv_dir.mkdir(parents=True, exist_ok=True)
    hosts: dict[str, dict[str, object]] = {}
    for n in nodes:
        hosts[n.name] = {"ansible_host": n.address}
        if n.fabric_address:
            # validate's ranks meet over the fabric, like a cluster's RDMA network.
            hosts[n.name]["nodetune_validate_master_addr"] = n.fabric_address
    data = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                # Lab nodes get fresh host keys each time they are created; `lab up`
                # records them in the lab's own known_hosts, never the user's.
                "ansible_ssh_common_args": (
                    f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts}"
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
                "nodetune_lab": True,
                # A container shares the host kernel's boot_id: a reboot shows as
                # a new start time of PID 1 (systemd) instead.
                "nodetune_boot_time_command": "cut -d' ' -f22 /proc/1/stat",
                # eth0 carries SSH (management); eth1 is the jumbo-capable fabric.
                "net_mtu_interfaces": [{"name": "eth1", "mtu": FABRIC_MTU}],
                "net_mtu_fabric": "lab-fabric",
                "nccl_config_socket_ifname": "=eth1",
                # No kernel log, RDMA NIC or GPU of its own: check reads the stand-ins the
                # run-time faults plant (`nodetune lab fault NODE xid|rdma-flap|pcie-aer`).
                "nodetune_kernel_log": standin_paths.KMSG,
                "nodetune_rdma_sysfs": standin_paths.RDMA_SYSFS,
                "nodetune_pci_sysfs": standin_paths.PCI_SYSFS,
                **extra,
            },
            "children": {"gpu_nodes": {"hosts": hosts}},
        }
    }
    path = inv_dir / "hosts.yml"
    path.write_text(
        "# Written by `nodetune lab up`; removed by `nodetune lab down`. Do not edit.\n"
        + yaml.safe_dump(data, sort_keys=False)
    )
    group_vars = root / "inventory" / "lab" / "group_vars"
    group_vars.mkdir(exist_ok=True)
    return path


