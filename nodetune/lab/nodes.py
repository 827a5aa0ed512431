"""A local lab of podman containers that behave like cluster nodes (systemd, sshd, own netns)."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from nodetune.errors import InputError, LabError
from nodetune.lab import slurm as lab_slurm
from nodetune.lab.podman import LabNode
from nodetune.lab.podman import run as _podman

log = logging.getLogger(__name__)

# Lab nodes run Debian 12; molecule scenarios test the roles on every suite in SUITES.
SUITE = "bookworm"
SUITES = ("bookworm", "trixie")
IMAGE = f"localhost/nodetune-node:{SUITE}"
# The lab's name prefixes everything it creates; NODETUNE_LAB picks another so
# that several labs (one per checkout) can run side by side on one machine.
LAB_ENV = "NODETUNE_LAB"
NAME = os.environ.get(LAB_ENV) or "nodetune-lab"
NETWORK = NAME
# A second, jumbo-capable network that stands for the RDMA/RoCE fabric: nodes
# reach it as eth1, which starts at MTU 1500 like a fresh NIC (net_mtu raises it).
FABRIC = f"{NAME}-fabric"
FABRIC_MTU = 9000
PREFIX = f"{NAME}-"
LABEL = f"io.nodetune.lab={NAME}"
VOLUME = f"{NAME}-shared"
# Node i gets host address HOST_BASE + i on both networks, fixed in the
# container's configuration, so a restarted or rebooted node keeps its address
# and the lab inventory stays true.
HOST_BASE = 10
# Everything a node needs for Ansible, sshd, systemd services, kernel modules,
# apt repositories with keys and a Python venv for the validation worker.
NODE_PACKAGES = (
    "python3,python3-apt,python3-venv,openssh-server,iproute2,procps,sudo,systemd,"
    "systemd-sysv,dbus,kmod,ca-certificates,gnupg,ethtool"
)

Say = Callable[[str], None]  # one line of what the lab is doing


@dataclass(frozen=True, slots=True)
class LabStatus:
    """What the lab looks like now."""

    nodes: tuple[LabNode, ...]
    image_present: bool
    inventory: Path | None


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab runs rootful podman so that nodes get routable addresses and their own "
            "privileged network namespace: run it as root (sudo -E nodetune lab up)"
        )


def image_present(image: str = IMAGE) -> bool:
    """Whether the node image is in podman's image store."""
    return _podman("image", "exists", image, check=False).returncode == 0


def image_for(suite: str) -> str:
    """The node image's name for a Debian suite (``localhost/nodetune-node:trixie``)."""
    if suite not in SUITES:
        raise InputError(f"no node image for Debian suite {suite!r}; one of {', '.join(SUITES)}")
    return f"localhost/nodetune-node:{suite}"


def build_image(*, base_image: str | None = None, progress: Say = lambda _m: None,
                rebuild: bool = False, suite: str = SUITE) -> str:
    """Build the node image for a Debian suite unless it exists.

    With ``base_image`` (a registry image such as ``debian:12``) the packages are
    added with apt in a ``podman build``; without one the root filesystem is
    made by ``debootstrap`` from Debian's package mirror, so no container
    registry is needed.

    Raises:
        InputError: ``suite`` is not one of SUITES.
        LabError: debootstrap or podman failed.
    """
    image = image_for(suite)
    _require_root()
    if image_present(image) and not rebuild:
        return image
    with tempfile.TemporaryDirectory(prefix="nodetune-image-") as tmp:
        context = Path(tmp)
        if base_image:
            progress(f"building {image} from {base_image}")
            pkgs = NODE_PACKAGES.replace(",", " ")
            (context / "Containerfile").write_text(
                f"FROM {base_image}\n"
                "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                f"--no-install-recommends {pkgs} && rm -rf /var/lib/apt/lists/*\n"
                + _FINISH_RUN + "CMD [\"/sbin/init\"]\n"
            )
        else:
            debootstrap = shutil.which("debootstrap")
            if debootstrap is None:
                raise LabError(
                    "no base image given and debootstrap is missing: `apt-get install "
                    "debootstrap`, or pass --base-image debian:12 if a registry is reachable"
                )
            rootfs = context / "rootfs"
            progress(f"debootstrap {suite} (about a minute, once; the image is reused)")
            proc = subprocess.run(
                [debootstrap, "--variant=minbase", f"--include={NODE_PACKAGES}", suite,
                 str(rootfs)], capture_output=True, text=True, check=False, timeout=1200,
            )
            if proc.returncode != 0:
                raise LabError(f"debootstrap failed: {proc.stdout[-400:]}{proc.stderr[-400:]}")
            progress("importing the root filesystem into podman")
            base = f"{image}-rootfs"
            tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True,
                                 check=True)
            _podman("import", "-q", "-", base, input_=tar.stdout)
            shutil.rmtree(rootfs, ignore_errors=True)
            (context / "Containerfile").write_text(
                f"FROM {base}\n" + _FINISH_RUN + "CMD [\"/sbin/init\"]\n"
            )
        progress(f"finishing {image}")
        _podman("build", "-q", "-t", image, str(context), timeout=1200)
    return image


# Per-container SSH host keys (generated at first boot, never baked into the
# image), no password logins, and no services a lab node does not need.
_FINISH_RUN = (
    "RUN rm -f /etc/ssh/ssh_host_* && mkdir -p /etc/systemd/system/ssh.service.d /root/.ssh "
    "&& printf '[Service]\\nExecStartPre=\\nExecStartPre=/usr/bin/ssh-keygen -A\\n"
    "ExecStartPre=/usr/sbin/sshd -t\\n' "
    "> /etc/systemd/system/ssh.service.d/hostkeys.conf "
    "&& printf 'PasswordAuthentication no\\nPermitRootLogin prohibit-password\\n' "
    "> /etc/ssh/sshd_config.d/nodetune-lab.conf "
    "&& chmod 700 /root/.ssh && systemctl enable ssh "
    "&& systemctl mask getty.target console-getty.service\n"
)


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


# --- torch on lab nodes, for `nodetune validate` -------------------------------

TORCH_REQUIREMENT = "torch==2.13.0"
SHARED_VENV = "/opt/nodetune-shared/venv"
LAB_PYTHON_VAR = "nodetune_python"


def install_torch(*, requirement: str = TORCH_REQUIREMENT, node: str = f"{PREFIX}1",
                  venv: str | None = None, progress: Say = lambda _m: None) -> str:
    """Install a CPU torch once into ``venv`` (SHARED_VENV), on the volume every lab node mounts.

    The wheels (torch and its dependencies, plus numpy) are fetched on this
    machine with this machine's pip and its configuration, which resolve
    ``torch==2.13.0`` to a local CPU wheel; a node installs them with
    ``--no-index``. pip inside a node has neither that configuration nor,
    behind a TLS-intercepting proxy, the CA that PyPI's certificate chains to.
    Idempotent: a venv that already imports torch is kept.

    The venv is built beside its place (``VENV.partial-<random>``) and renamed
    into place once torch imports from it, so an interrupted install never
    leaves a half-built venv where nodes look for one. The next install stops
    what an interrupted one left running in the node (``podman exec`` does not
    end its command when the client is killed), removes its leftovers and a
    venv that does not import torch, and builds afresh (:data:`_VENV_SCRIPT`).

    Returns:
        The venv's python, for the ``nodetune_python`` inventory variable.

    Raises:
        LabError: the wheels cannot be fetched or installed.
    """
    import sys

    venv = venv or SHARED_VENV
    python = f"{venv}/bin/python"
    if _podman("exec", node, python, "-c", "import torch", check=False).returncode == 0:
        return python
    progress(f"installing {requirement} into {venv} (once, shared by every lab node)")
    with tempfile.TemporaryDirectory(prefix="nodetune-wheels-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
             "--python-version", "3.11", "--implementation", "cp",
             "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux2014_x86_64", "-d", tmp, requirement, "numpy"],
            capture_output=True, text=True, check=False, timeout=1200,
        )
        if proc.returncode != 0:
            raise LabError(f"cannot download {requirement} wheels for the lab nodes: "
                           f"{proc.stderr.strip()[-400:]}")
        staging = f"/tmp/nodetune-wheels-{os.getpid()}"  # noqa: S108 - inside the node
        _podman("exec", node, "rm", "-rf", staging)
        _podman("cp", tmp, f"{node}:{staging}")
        try:
            _podman("exec", "-i", node, "python3", "-", venv, staging, requirement, "numpy",
                    input_=_VENV_SCRIPT.encode(), timeout=1200)
        finally:
            _podman("exec", node, "rm", "-rf", staging, check=False)
    return python


# Run by the node's python3 as `python3 - VENV WHEELS REQUIREMENT...`: stop and remove
# what an interrupted install left (its processes name VENV or VENV.partial-* in their
# argv), build VENV.partial-<random>, point its scripts at VENV, check that torch
# imports, and rename it to VENV.
_VENV_SCRIPT = r"""
import os, secrets, shutil, signal, subprocess, sys, time
venv, wheels, reqs = sys.argv[1], sys.argv[2], sys.argv[3:]
parent, base = os.path.split(venv)
me = os.getpid()

def lingering():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (me, os.getppid()):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == venv or a.startswith((venv + "/", venv + ".")) for a in argv):
            yield int(pid)

for _ in range(50):
    pids = list(lingering())
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.1)
else:
    sys.exit(f"processes of an earlier install of {venv} do not stop: {pids}")
if os.path.lexists(venv):  # a venv without torch: set aside first (a rename cannot race)
    os.rename(venv, f"{venv}.partial-old-{secrets.token_hex(4)}")
for name in os.listdir(parent):
    if name.startswith(base + ".partial-"):
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
tmp = f"{venv}.partial-{secrets.token_hex(4)}"
subprocess.run([sys.executable, "-m", "venv", tmp], check=True)
subprocess.run([f"{tmp}/bin/python", "-m", "pip", "install", "-q", "--no-index",
                "--disable-pip-version-check", "--find-links", wheels, *reqs], check=True)
for name in os.listdir(f"{tmp}/bin"):  # scripts and activate name the venv's path
    path = f"{tmp}/bin/{name}"
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as fh:
            data = fh.read()
        if tmp.encode() in data:
            with open(path, "wb") as fh:
                fh.write(data.replace(tmp.encode(), venv.encode()))
subprocess.run([f"{tmp}/bin/python", "-c", "import torch"], check=True)
os.rename(tmp, venv)
"""
