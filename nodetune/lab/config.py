"""The lab's names: everything it creates carries NAME (``NODETUNE_LAB``), read once at import."""

from __future__ import annotations

import os
from collections.abc import Callable

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
