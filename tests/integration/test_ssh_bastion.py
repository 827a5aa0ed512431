"""A node the controller cannot reach, reached through a bastion: ProxyJump and ProxyCommand.

The second lab node drops every packet to the controller's addresses
(blackhole routes in its own network namespace), so the controller cannot
open a TCP connection to it; the first node still can. That node is the
bastion. Real sshd at every hop, host keys checked at every hop.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml

from nodetune.ansible.inventory import load
from nodetune.errors import SSHError
from nodetune.remote import ssh
from tests.integration.conftest import answers_ssh

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--sizes", "1M:4M", "--iters", "5", "--warmup", "2"]

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Bastioned:
    bastion: str
    bastion_addr: str
    hidden: str
    hidden_addr: str
    key: str
    known_hosts: Path
    base: dict[str, Any]


def _controller_sources(address: str) -> str:
    route = json.loads(subprocess.run(["ip", "-j", "route", "get", address], check=True,
                                      capture_output=True, text=True).stdout)
    return str(route[0]["prefsrc"])


@pytest.fixture(scope="module")
def bastioned(lab: Any) -> Iterator[Bastioned]:
    """The second node cut off from the controller; the first node reaches it."""
    validate_lab = Path(lab.inventory)  # `lab up --with-torch`: nodetune_python is set
    hosts = {h.name: h for h in load(validate_lab).hosts}
    bastion, hidden = lab.nodes[0], lab.nodes[1]
    base = yaml.safe_load((validate_lab / "hosts.yml").read_text())
    gv = base["all"]["vars"]
    known = Path(str(gv["ansible_ssh_common_args"]).split("UserKnownHostsFile=")[1].split()[0])
    hidden_addrs = [hosts[hidden].address, str(hosts[hidden].vars["nodetune_validate_master_addr"])]
    sources = sorted({_controller_sources(a) for a in hidden_addrs})
    # An ansible run straight to the node just before it is cut off, as an earlier apply
    # or facts would be: Ansible's ControlPersist master to that address outlives the
    # run by a minute, and a later run must not ride it (its path is gone).
    direct = subprocess.run([str(NODETUNE), "facts", str(validate_lab), "--limit", hidden],
                            capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    for src in sources:
        lab.sh(hidden, "ip", "route", "add", "blackhole", f"{src}/32")
    try:
        yield Bastioned(bastion=bastion, bastion_addr=hosts[bastion].address, hidden=hidden,
                        hidden_addr=hosts[hidden].address, key=str(gv[
                            "ansible_ssh_private_key_file"]), known_hosts=known, base=base)
    finally:
        for src in sources:
            lab.sh(hidden, "ip", "route", "del", "blackhole", f"{src}/32", check=False)


def _inventory(b: Bastioned, out: Path, common_args: str) -> Path:
    data = json.loads(json.dumps(b.base))
    data["all"]["vars"]["ansible_ssh_common_args"] = common_args
    # The session's lab may run Slurm by now (test_slurm*.py): without its controller, apply
    # asks no controller (the bastion, whose key a test forges) which nodes run jobs, and
    # what is proven is the path through the jump host alone.
    data["all"]["vars"] = {k: v for k, v in data["all"]["vars"].items()
                           if not k.startswith("nodetune_slurm_")}
    out.mkdir(exist_ok=True)
    (out / "hosts.yml").write_text(yaml.safe_dump(data))
    return out


def _ssh_config(b: Bastioned, path: Path, known: Path, hop: str) -> Path:
    # What a site's ssh_config for a cluster behind a bastion looks like.
    path.write_text(
        f"Host {b.hidden_addr}\n    {hop}\n"
        f"Host *\n    User root\n    IdentityFile {b.key}\n"
        f"    UserKnownHostsFile {known}\n    StrictHostKeyChecking yes\n")
    return path


def test_validate_and_ansible_through_proxyjump(bastioned: Bastioned, lab: Any,
                                                 tmp_path: Path) -> None:
    b = bastioned
    assert not answers_ssh(b.hidden_addr), "the hidden node must not be reachable directly"
    assert answers_ssh(b.bastion_addr)
    config = _ssh_config(b, tmp_path / "ssh_config", b.known_hosts,
                         f"ProxyJump root@{b.bastion_addr}")
    inv = _inventory(b, tmp_path / "inv", f"-F {config}")
    # Ansible (OpenSSH) reaches both nodes through the same settings...
    facts = subprocess.run([str(NODETUNE), "facts", str(inv)], capture_output=True, text=True,
                           cwd=REPO, timeout=120, check=False)
    assert facts.returncode == 0, facts.stdout + facts.stderr
    assert b.hidden in facts.stdout
    # ...and so does validate (paramiko, a direct-tcpip channel through the bastion).
    proc = subprocess.run([str(NODETUNE), "validate", str(inv), *FAST, "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "pass"
    assert all(s["wrong"] == 0 for s in doc["result"]["sizes"])
    assert not lab.sh(b.hidden, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true")


def test_proxycommand_and_host_keys_checked_at_every_hop(bastioned: Bastioned,
                                                         tmp_path: Path) -> None:
    b = bastioned
    proxy = (f"ProxyCommand ssh -q -i {b.key} -o StrictHostKeyChecking=yes "
             f"-o UserKnownHostsFile={b.known_hosts} -W %h:%p root@{b.bastion_addr}")
    config = _ssh_config(b, tmp_path / "ssh_config", b.known_hosts, proxy)
    inv = _inventory(b, tmp_path / "inv", f"-F {config}")
    host = load(inv).host(b.hidden)
    session = ssh.connect(host, timeout=20)
    try:
        assert session.spec.proxy_command and not session.spec.jumps
        assert session.run(["hostname"], timeout=20).stdout.strip() == b.hidden
    finally:
        session.close()

    # The bastion's key changed (or a machine took its address): refused, naming that hop.
    lines = b.known_hosts.read_text().splitlines()
    other = paramiko.Ed25519Key.from_private_key_file(b.key)  # any key but the bastion's
    forged = [f"{b.bastion_addr} ssh-ed25519 {other.get_base64()}" if
              ln.split()[0] == b.bastion_addr else ln for ln in lines]
    known = tmp_path / "forged_known_hosts"
    known.write_text("\n".join(forged) + "\n")
    config = _ssh_config(b, tmp_path / "ssh_config2", known, f"ProxyJump root@{b.bastion_addr}")
    host = load(_inventory(b, tmp_path / "inv2", f"-F {config}")).host(b.hidden)
    with pytest.raises(SSHError, match=f"host key of jump host {b.bastion_addr} does not "
                                       "match known_hosts") as info:
        ssh.connect(host, timeout=20)
    assert info.value.host == b.hidden
    # The bastion's key is unknown: refused too, also with --accept-new-host-keys off.
    known.write_text("\n".join(ln for ln in lines if ln.split()[0] != b.bastion_addr) + "\n")
    with pytest.raises(SSHError, match=f"jump host {b.bastion_addr} is unknown"):
        ssh.connect(host, timeout=20)
    # The node behind the bastion has a changed key: refused, even when accepting new keys.
    known.write_text("\n".join(
        f"{b.hidden_addr} ssh-ed25519 {other.get_base64()}" if ln.split()[0] == b.hidden_addr
        else ln for ln in lines) + "\n")
    with pytest.raises(SSHError, match=f"host key of {b.hidden_addr} does not match"):
        ssh.connect(host, timeout=20, accept_new_host_keys=True)


def test_apply_names_a_jump_host_key_failure_and_its_fix(bastioned: Bastioned,
                                                          tmp_path: Path) -> None:
    # Ansible's ssh runs under a ControlMaster, which swallows what the ProxyJump hop's
    # ssh says ("Host key verification failed"): apply must say it, as validate does.
    b = bastioned
    lines = b.known_hosts.read_text().splitlines()
    other = paramiko.Ed25519Key.from_private_key_file(b.key)  # any key but the bastion's
    known = tmp_path / "forged_known_hosts"
    known.write_text("\n".join(f"{b.bastion_addr} ssh-ed25519 {other.get_base64()}"
                               if ln.split()[0] == b.bastion_addr else ln for ln in lines) + "\n")
    config = _ssh_config(b, tmp_path / "ssh_config", known, f"ProxyJump root@{b.bastion_addr}")
    inv = _inventory(b, tmp_path / "inv", f"-F {config}")
    runs = tmp_path / "runs"
    proc = subprocess.run([str(NODETUNE), "apply", str(inv), "--limit", b.hidden],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
                          env={**os.environ, "NODETUNE_RUNS_DIR": str(runs)})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    cause = f"host key of jump host {b.bastion_addr} does not match known_hosts"
    fix = f"ssh-keygen -R {b.bastion_addr} -f {known}"
    output = " ".join((proc.stdout + proc.stderr).split())  # tables may fold long lines
    assert cause in output and fix in output, output
    (report,) = runs.glob("*-apply/report.json")
    (task,) = [t for t in json.loads(report.read_text())["failed_tasks"]
               if t["host"] == b.hidden]
    assert task["status"] == "unreachable"
    assert cause in task["message"] and fix in task["message"]
    assert known.read_text().count(b.bastion_addr) == 1, "the forged key was left as it was"
