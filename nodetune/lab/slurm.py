"""A real Slurm in the lab: Debian's slurmctld, slurmd and munge inside the lab nodes.

Node 1 runs slurmctld; every node runs slurmd and munged with one munge key
that the lab generates. Everything lives inside the containers, so ``lab
down`` removes it with them. Packages are installed once per node (a node that
has them is not touched again), on all nodes at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nodetune.errors import LabError
from nodetune.lab.podman import LabNode
from nodetune.lab.podman import run as _podman
from nodetune.slurm.state import SINFO, SlurmNode, parse_nodes

log = logging.getLogger(__name__)

Say = Callable[[str], None]  # one line of what the lab is doing

CONTROLLER_VAR = "nodetune_slurm_controller"
CLUSTER = "nodetune-lab"
PARTITION = "lab"
CONF = "/etc/slurm/slurm.conf"
MUNGE_KEY = "/etc/munge/munge.key"
CONTROLLER_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
NODE_PACKAGES = ("slurmd", "slurm-client", "munge")
# Conservative resources: slurmd drains a node that reports less than slurm.conf
# declares ("Low RealMemory"), and a container sees the whole host, which other
# labs share. One CPU and 1 GiB are always there.
NODE_CPUS = 1
NODE_MEMORY_MB = 1024
# slurmd reports the node's boot time as now minus the kernel's uptime. A lab node is a
# container: its "reboot" (RebootProgram) restarts the container, not the host's kernel,
# so the boot time slurmd reports never moves past the time `scontrol reboot` was asked.
# slurmctld then keeps waiting for the boot and sets the node DOWN ("reboot timed out")
# after ResumeTimeout. slurmd -b ("Report node reboot now", Slurm's option for testing)
# reports its start as the boot; Debian's slurmd.service reads SLURMD_OPTIONS from here.
# Every slurmd restart then reads as a reboot, which ReturnToService=2 accepts.
SLURMD_DEFAULTS = "/etc/default/slurmd"
SLURMD_OPTIONS = b'SLURMD_OPTIONS="-b"\n'
# States in which a node has not (yet) registered with slurmctld.
_NOT_READY = frozenset({"unknown", "not_responding", "down", "future"})


def slurm_conf(nodes: Sequence[LabNode], *, cluster: str = CLUSTER) -> str:
    """The lab's slurm.conf: node 1 is the controller, every node is in one partition."""
    if not nodes:
        raise LabError("a Slurm lab needs at least one running node")
    ctl = nodes[0]
    lines = [
        "# Written by `nodetune lab up --with-slurm`; removed with the lab.",
        f"ClusterName={cluster}",
        f"SlurmctldHost={ctl.name}({ctl.address})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "MpiDefault=none",
        # A container cannot hand slurmd its own cgroup tree: track processes by
        # their parent PIDs and bind no tasks (the lab runs no real jobs).
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # A node that went DOWN because it stopped answering (a lab node restarted)
        # comes back by itself; a DRAIN set by a person or by nodetune stays.
        "ReturnToService=2",
        # `scontrol reboot` (apply --reboot on Slurm nodes) runs this on the node; a lab
        # node's systemd reboots the container and podman (--restart=always) starts it again.
        "RebootProgram=/usr/sbin/reboot",
        # A loaded lab machine restarts a node container in minutes, not Slurm's 60 s.
        "ResumeTimeout=600",
        "SlurmUser=slurm",
        "SlurmdUser=root",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
    ]
    lines += [f"NodeName={n.name} NodeAddr={n.address} CPUs={NODE_CPUS} "
              f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN" for n in nodes]
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def up(nodes: Sequence[LabNode], keydir: Path, *, progress: Say = lambda _m: None,
       timeout: float = 90) -> dict[str, object]:
    """Install, configure and start Slurm on ``nodes`` (idempotent); node 1 is the controller.

    Returns:
        Inventory variables for the lab (``nodetune_slurm_controller``).

    Raises:
        LabError: a package does not install, a daemon does not start, or the
            nodes do not register with slurmctld within ``timeout`` seconds.
    """
    controller = nodes[0].name
    key = _munge_key(keydir)
    conf = slurm_conf(nodes).encode()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        installed = list(pool.map(
            lambda n: _install(n.name, controller=n.name == controller), nodes))
    if any(installed):
        progress(f"Slurm packages installed in {time.monotonic() - started:.1f} s")
    changed = False
    for node in nodes:
        is_ctl = node.name == controller
        key_new = _put(node.name, MUNGE_KEY, key, mode="0400", owner="munge:munge")
        conf_new = _put(node.name, CONF, conf, mode="0644", owner="root:root")
        opts_new = _put(node.name, SLURMD_DEFAULTS, SLURMD_OPTIONS, mode="0644",
                        owner="root:root")
        if key_new or not _active(node.name, "munge"):
            _systemctl(node.name, "restart", "munge")
        if not is_ctl and _active(node.name, "slurmctld") is not None:
            _systemctl(node.name, "disable", "--now", "slurmctld")
        changed = changed or key_new or conf_new or opts_new
    if changed or not _active(controller, "slurmctld"):
        progress(f"starting slurmctld on {controller}")
        _systemctl(controller, "enable", "slurmctld")
        _systemctl(controller, "restart", "slurmctld")
    for node in nodes:
        if changed or not _active(node.name, "slurmd"):
            _systemctl(node.name, "enable", "slurmd")
            _systemctl(node.name, "restart", "slurmd")
    _wait_registered(controller, [n.name for n in nodes], timeout=timeout, progress=progress)
    return {CONTROLLER_VAR: controller}


def inventory_vars(nodes: Sequence[LabNode]) -> dict[str, object]:
    """The Slurm variables of a lab whose Slurm covers every node (none otherwise: a lab
    grown without ``--with-slurm`` has nodes its slurm.conf does not name, and an
    inventory that claimed Slurm for them would have validate refuse them)."""
    if not nodes:
        return {}
    conf = _podman("exec", nodes[0].name, "cat", CONF, check=False)
    named = {line.split()[0].removeprefix("NodeName=") for line in conf.stdout.splitlines()
             if line.startswith("NodeName=")}
    if conf.returncode == 0 and {n.name for n in nodes} <= named:
        return {CONTROLLER_VAR: nodes[0].name}
    return {}


def sinfo(controller: str) -> dict[str, SlurmNode]:
    """Every lab node's state and reason as slurmctld reports them, read on ``controller``."""
    out = _podman("exec", controller, *SINFO).stdout
    try:
        return parse_nodes(out)
    except ValueError as exc:
        raise LabError(f"{controller}: {exc}") from None


def _wait_registered(controller: str, names: Sequence[str], *, timeout: float,
                     progress: Say) -> None:
    progress("waiting for every slurmd to register with slurmctld")
    deadline = time.monotonic() + timeout
    while True:
        try:
            states = sinfo(controller)
        except LabError:
            states = {}
        waiting = [n for n in names
                   if n not in states or _NOT_READY & states[n].flags]
        if not waiting:
            return
        if time.monotonic() > deadline:
            seen = ", ".join(f"{n}={states[n].state if n in states else 'absent'}"
                             for n in waiting)
            raise LabError(f"Slurm nodes did not register within {timeout:.0f} s ({seen}); see "
                           f"/var/log/slurm/slurmctld.log on {controller} and slurmd.log on "
                           "each node")
        time.sleep(1)


def _munge_key(keydir: Path) -> bytes:
    """The lab's munge key (1024 random bytes), made once and kept with the lab's SSH key."""
    path = keydir / "munge.key"
    if not path.exists():
        keydir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))
    return path.read_bytes()


def _install(node: str, *, controller: bool) -> bool:
    """Install the Slurm packages on ``node`` unless they are there; True if it installed."""
    packages = CONTROLLER_PACKAGES if controller else NODE_PACKAGES
    query = _podman("exec", node, "dpkg-query", "-W", "-f", "${db:Status-Status} ",
                    *packages, check=False)
    if query.returncode == 0 and query.stdout.split() == ["installed"] * len(packages):
        return False
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    _podman("exec", node, *env, "apt-get", "-q", "update", timeout=300)
    _podman("exec", node, *env, "apt-get", "-q", "install", "-y", "--no-install-recommends",
            *packages, timeout=600)
    return True


def _put(node: str, path: str, data: bytes, *, mode: str, owner: str) -> bool:
    """Write ``data`` to ``path`` on ``node`` unless it is already there; True if written."""
    have = _podman("exec", node, "sha256sum", path, check=False).stdout.split()
    if have and have[0] == hashlib.sha256(data).hexdigest():
        return False
    tmp = f"{path}.nodetune-new"
    _podman("exec", "-i", node, "sh", "-c", 'umask 077 && cat > "$0"', tmp, input_=data)
    _podman("exec", node, "chown", owner, tmp)
    _podman("exec", node, "chmod", mode, tmp)
    _podman("exec", node, "mv", "-f", tmp, path)
    return True


def _active(node: str, unit: str) -> bool | None:
    """Whether ``unit`` runs on ``node``; None when the unit is not installed there."""
    proc = _podman("exec", node, "systemctl", "is-active", unit, check=False)
    state = proc.stdout.strip()
    if state == "active":
        return True
    listed = _podman("exec", node, "systemctl", "list-unit-files", f"{unit}.service",
                     "--no-legend", check=False).stdout.strip()
    return False if listed else None


def _systemctl(node: str, *args: str) -> None:
    proc = _podman("exec", node, "systemctl", *args, check=False, timeout=120)
    if proc.returncode != 0:
        unit = args[-1]
        journal = _podman("exec", node, "journalctl", "-u", unit, "-n", "15", "--no-pager",
                          check=False).stdout
        raise LabError(f"{node}: `systemctl {' '.join(args)}` failed: "
                       f"{proc.stderr.strip()[-300:]}\n{journal[-800:]}")
