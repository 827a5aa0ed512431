"""apply's reliability contract on the real lab: host keys, tags that own only their role.

Every test here restores what it broke, so the session lab stays usable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nodetune.ansible.inventory import load
from tests.conftest import NODETUNE, REPO, run_nodetune
from tests.integration.conftest import Lab, answers_ssh

FACT = "/etc/ansible/facts.d/nodetune.fact"
ROLES = ["node_facts", "nvidia_driver", "nvidia_container_toolkit", "ofed", "net_sysctl",
         "net_mtu", "roce_qos", "nccl_config"]


def test_changed_host_key_exits_3_naming_the_node_and_changes_nothing(
        lab: Lab, runs_dir: Path) -> None:
    node = lab.nodes[0]
    lab.sh(node, "sh", "-c", "rm -rf /root/.hostkeys && mkdir /root/.hostkeys && "
           "cp -a /etc/ssh/ssh_host_* /root/.hostkeys/ && rm -f /etc/ssh/ssh_host_* && "
           "ssh-keygen -A >/dev/null && systemctl restart ssh")
    try:
        lab.sh(node, "rm", "-f", FACT)
        # A fresh ControlPath dir: an SSH master connection that an earlier test left
        # open (ControlPersist) would carry the session without a new key exchange.
        res = run_nodetune("apply", str(lab.inventory), "--limit", node, "--json",
                           runs_dir=runs_dir,
                           env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(runs_dir.parent / "cp")})
        assert res.code == 3, res.stdout + res.stderr
        doc = res.json()
        assert [(h["host"], h["state"]) for h in doc["hosts"]] == [(node, "unreachable")]
        assert any(t["host"] == node and "HOST IDENTIFICATION HAS CHANGED" in t["message"]
                   for t in doc["failed_tasks"]), doc["failed_tasks"]
        assert lab.sh(node, "sh", "-c", f"test -e {FACT} && echo present || echo absent") == \
            "absent", "nothing was changed on the node"
    finally:
        lab.sh(node, "sh", "-c", "rm -f /etc/ssh/ssh_host_* && cp -a /root/.hostkeys/. /etc/ssh/ "
               "&& systemctl restart ssh")
    # The known key is back: the node converges again.
    again = run_nodetune("apply", str(lab.inventory), "--limit", node, "-t", "node_facts",
                         runs_dir=runs_dir)
    assert again.code == 0, again.stdout + again.stderr


@pytest.fixture(scope="module")
def roce_inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The lab with roce_qos active: a stand-in mlnx_qos and sysfs/configfs trees (no ConnectX).

    STAND-IN: the same fakes as molecule/roce_qos (a recording mlnx_qos script, one
    RoCE port mlx5_0/1 -> ens1f0np0), so roce_qos exports NCCL_IB_TC to nccl_config; the
    tree links the node's real interfaces beside the stand-in port, as node_facts (which
    reads it) must still see eth1, the lab's fabric interface.
    """
    inv = tmp_path_factory.mktemp("roce") / "lab"
    shutil.copytree(lab.inventory, inv)
    (inv / "group_vars").mkdir(exist_ok=True)
    (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({
        "roce_qos_force": True, "roce_qos_persist": False,
        "__roce_qos_sysfs_root": "/srv/fake-sys", "__roce_qos_configfs_root": "/srv/fake-configfs",
        "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}],
    }))
    standin = (REPO / "molecule" / "roce_qos" / "mlnx_qos-standin.sh").read_text()
    tree = (
        "set -e; root=/srv/fake-sys; for point in roce_np roce_rp; do "
        "mkdir -p $root/class/net/ens1f0np0/ecn/$point/enable; for p in 0 1 2 3 4 5 6 7; do "
        "echo 0 > $root/class/net/ens1f0np0/ecn/$point/enable/$p; done; done; "
        "mkdir -p $root/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs $root/bus/pci/devices "
        "/srv/fake-configfs/rdma_cm; echo Ethernet > $root/class/infiniband/mlx5_0/ports/1/link_layer; "
        "echo ens1f0np0 > $root/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0; "
        # node_facts lists the interfaces from this tree: the node's own ones are in it too
        # (net_mtu's eth1), beside the stand-in RoCE port.
        "for n in /sys/class/net/*; do ln -s $n $root/class/net/; done"
    )
    for node in lab.nodes:
        lab.sh(node, "sh", "-c", f"cat > /usr/local/bin/mlnx_qos <<'EOF'\n{standin}\nEOF\n"
               "chmod 755 /usr/local/bin/mlnx_qos")
        lab.sh(node, "sh", "-c", tree)
        # node_facts, roce_qos's view of the RDMA ports, reads the same stand-in tree:
        # pam_env gives every SSH session of Ansible's the variable (molecule/roce_qos
        # sets it with the play's environment).
        lab.sh(node, "sh", "-c", "cp /etc/environment /etc/environment.nodetune-test && "
               "echo NODETUNE_FACTS_SYSFS=/srv/fake-sys >> /etc/environment")
    try:
        yield inv
    finally:
        for node in lab.nodes:
            lab.sh(node, "sh", "-c", "mv -f /etc/environment.nodetune-test /etc/environment",
                   check=False)
            lab.sh(node, "rm", "-rf", "/usr/local/bin/mlnx_qos", "/srv/fake-sys",
                   "/srv/fake-configfs", check=False)


def test_each_tag_after_a_full_apply_changes_nothing(
        lab: Lab, roce_inventory: Path, runs_dir: Path) -> None:
    full = run_nodetune("apply", str(roce_inventory), runs_dir=runs_dir)
    assert full.code == 0, full.stdout + full.stderr
    for node in lab.nodes:
        assert "NCCL_IB_TC=106" in lab.sh(node, "cat", "/etc/nccl.conf")
    for role in ROLES:
        res = run_nodetune("apply", str(roce_inventory), "-t", role, "--json", runs_dir=runs_dir)
        assert res.code == 0, f"-t {role}: " + res.stdout + res.stderr
        doc = res.json()
        assert all(h["changed"] == 0 for h in doc["hosts"]), (role, doc["changed_tasks"])
    for node in lab.nodes:
        assert "NCCL_IB_TC=106" in lab.sh(node, "cat", "/etc/nccl.conf"), "-t nccl_config kept it"



def _podman(*argv: str) -> None:
    subprocess.run(["podman", *argv], check=True, capture_output=True, timeout=120)


def _wait_answers_ssh(lab: Lab, node: str) -> None:
    """Wait until the restarted ``node`` answers SSH from this machine, not only inside: later
    tests use it. A node that stays cut off is restarted once more, then the test says so."""
    address = next(h.vars["ansible_host"] for h in load(lab.inventory).hosts if h.name == node)
    for attempt in (1, 2):
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if answers_ssh(address):
                return
            time.sleep(1)
        seen = subprocess.run(["ip", "neigh", "show", address], capture_output=True,
                              text=True, check=False).stdout.strip()
        inside = lab.sh(node, "ip", "-br", "addr", check=False)
        if attempt == 2:
            raise AssertionError(f"{node} ({address}) does not answer SSH after a restart; "
                                 f"neighbour: {seen!r}; inside: {inside!r}")
        _podman("restart", "-t", "3", node)


def test_node_that_goes_away_mid_apply_is_unreachable_exit_3(lab: Lab, runs_dir: Path) -> None:
    node = lab.nodes[1]
    lab.sh(node, "rm", "-f", FACT)
    proc = subprocess.Popen(
        [str(NODETUNE), "apply", str(lab.inventory), "--limit", node, "--json"], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir)})
    try:
        # Past the first plays (node_facts installed its script), the node is stopped.
        deadline = time.monotonic() + 240
        while lab.sh(node, "sh", "-c", f"test -e {FACT} && echo y || echo n") != "y":
            assert proc.poll() is None and time.monotonic() < deadline, "apply ended early"
            time.sleep(0.5)
        _podman("stop", "-t", "3", node)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        _podman("start", node)
        _wait_answers_ssh(lab, node)
    assert proc.returncode == 3, out + err
    doc = json.loads(out)
    assert [(h["host"], h["state"]) for h in doc["hosts"]] == [(node, "unreachable")]
    assert any(t["host"] == node and "went away" in t["message"]
               for t in doc["failed_tasks"]), doc["failed_tasks"]
