"""A restarted lab node comes back on its address with its host key: the inventory stays true."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import load
from nodetune.lab import nodes as lab_mod
from nodetune.remote import ssh

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"

pytestmark = pytest.mark.integration


def _host_key(address: str) -> str:
    proc = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", address],
                          capture_output=True, text=True, timeout=30, check=False)
    keys = [ln.split(None, 1)[1] for ln in proc.stdout.splitlines() if ln and ln[0] != "#"]
    assert len(keys) == 1, proc.stderr
    return keys[0]


def _wait_sshd(address: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=2) as sock:
                if sock.recv(4).startswith(b"SSH"):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"sshd on {address} did not come back within {timeout:.0f} s")


def test_restarted_node_keeps_address_and_host_key(lab: Any) -> None:
    inventory = Path(lab.inventory)
    node = lab.nodes[1]
    host = load(inventory).host(node)
    known_hosts = lab.root / ".nodetune" / "lab" / "known_hosts"
    recorded = set(known_hosts.read_text().splitlines())
    key_before = _host_key(host.address)
    hosts_yml = (inventory / "hosts.yml").read_text()

    subprocess.run(["podman", "restart", "-t", "5", node], check=True, capture_output=True,
                   timeout=120)
    _wait_sshd(host.address)

    nets = json.loads(subprocess.run(["podman", "inspect", node], check=True,
                                     capture_output=True, text=True).stdout)[0]
    nets = nets["NetworkSettings"]["Networks"]
    assert nets[lab_mod.NETWORK]["IPAddress"] == host.address
    assert nets[lab_mod.FABRIC]["IPAddress"] == host.vars["nodetune_validate_master_addr"]
    assert _host_key(host.address) == key_before

    # nodetune's SSH (strict host keys against the lab's known_hosts) reaches it as is...
    session = ssh.connect(host, timeout=30)
    try:
        assert session.run(["hostname"], timeout=30).stdout.strip() == node
    finally:
        session.close()
    # ...and so does Ansible's (OpenSSH, StrictHostKeyChecking=yes).
    facts = subprocess.run([str(NODETUNE), "facts", str(inventory), "--limit", node],
                           capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert facts.returncode == 0, facts.stdout + facts.stderr
    assert node in facts.stdout

    # `lab up` again changes neither the inventory nor the recorded keys.
    lab_mod.up(lab.root, nodes=len(lab.nodes))
    assert (inventory / "hosts.yml").read_text() == hosts_yml
    assert set(known_hosts.read_text().splitlines()) == recorded
