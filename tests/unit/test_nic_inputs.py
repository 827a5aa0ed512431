"""Interface and HCA names a node does not have are refused before anything changes.

The roles run against localhost (local connection, check mode). Their only view of
the node's interfaces is node_facts' fact, which they include read-only where the
run has none: its script reads a STAND-IN sysfs tree under a temporary directory
(NODETUNE_FACTS_SYSFS), a node with lo, eth0 and eth1 and, where a case needs one,
the RDMA device mlx5_0 (one port). The inputs pass (playbooks/inputs.yml) reads
this machine's own /sys, read-only.

Cases of one role that differ in public role variables share one ansible-playbook run:
one local inventory host per case (test_net_role_inputs' _run_hosts), each asserted on
its own host's results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins import ansible_env
from tests.unit.test_net_role_inputs import PLAYBOOK, ROOT, HostRun, _run, _run_hosts


def _sysfs(tmp_path: Path, *, hca: bool = False) -> Path:
    root = tmp_path / "sys"
    for name in ("lo", "eth0", "eth1"):
        link = root / "class" / "net" / name
        link.mkdir(parents=True)
        (link / "mtu").write_text("1500\n")
        (link / "type").write_text("772\n" if name == "lo" else "1\n")
    if hca:
        (root / "class" / "infiniband" / "mlx5_0" / "ports" / "1").mkdir(parents=True)
    return root


def _facts_env(tmp_path: Path, *, hca: bool = False) -> dict[str, str]:
    """node_facts' script reads the stand-in tree (and an empty /proc)."""
    return {"NODETUNE_FACTS_SYSFS": str(_sysfs(tmp_path, hca=hca)),
            "NODETUNE_FACTS_PROCFS": str(tmp_path / "proc")}


@pytest.fixture(scope="module")
def net_mtu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostRun]:
    """One net_mtu run: a host that names absent interfaces and one that allows them. Both
    the role's own sysfs root (-e: a role var) and node_facts' script read the stand-in."""
    tmp = tmp_path_factory.mktemp("net_mtu")
    env = _facts_env(tmp)
    return _run_hosts("net_mtu", {
        "absent": {"net_mtu_interfaces": [{"name": "eth1", "mtu": 9000},
                                          {"name": "ens1f0np0", "mtu": 9000},
                                          {"rdma": True, "mtu": 9000}]},
        "allowed": {"net_mtu_interfaces": [{"name": "ens1f0np0", "mtu": 9000}],
                    "net_mtu_allow_absent_nics": True, "net_mtu_persist": False},
    }, tmp, {"__net_mtu_sysfs_root": env["NODETUNE_FACTS_SYSFS"]}, env_=env)


def test_net_mtu_refuses_an_interface_the_node_lacks(net_mtu_runs: dict[str, HostRun]) -> None:
    run = net_mtu_runs["absent"]
    out = " ".join(run.text.split())
    assert run.failures > 0, run.raw
    assert ("net_mtu_interfaces[1] (name: ens1f0np0): no such interface on this node; "
            "net_mtu_interfaces[2] (rdma: true): no interface on this node is backed by an "
            "RDMA device; this node has interfaces eth0, eth1 and RDMA devices none; set "
            "net_mtu_allow_absent_nics: true") in out, out
    assert run.changed == 0, run.raw
    assert run.failed_task == "net_mtu : Check each MTU request selects an interface of this node"
    assert "node_facts : Gather the nodetune local fact without installing it" in out, out


def test_net_mtu_skips_and_reports_absent_names_where_allowed(
        net_mtu_runs: dict[str, HostRun]) -> None:
    run = net_mtu_runs["allowed"]
    out = " ".join(run.text.split())
    assert run.failures == 0 and run.unreachable == 0, run.raw
    # Allowed, nothing compares names before the change: node_facts is not included.
    assert "node_facts : " not in out, out
    assert ("Skipped (net_mtu_allow_absent_nics): net_mtu_interfaces[0] (name: ens1f0np0): "
            "no such interface on this node") in out, out


def test_nccl_config_refuses_an_hca_port_the_node_lacks(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    extra = {"nccl_config_socket_ifname": "=eth1", "nccl_config_ib_hca": "=mlx5_0:1,mlx5_1:1",
             "nccl_config_path": str(conf)}
    env = _facts_env(tmp_path, hca=True)
    # One run: a host with these and one that also allows absent NICs.
    runs = _run_hosts("nccl_config", {"refused": extra, "allowed": {
        **extra, "nccl_config_allow_absent_nics": True}}, tmp_path, env_=env)
    run = runs["refused"]
    out = " ".join(run.text.split())
    assert run.failures > 0, run.raw
    assert ("nccl_config_ib_hca (NCCL_IB_HCA==mlx5_0:1,mlx5_1:1): mlx5_1:1 matches no RDMA "
            "device port on this node; this node has interfaces eth0, eth1 and RDMA devices "
            "mlx5_0 (port 1); set nccl_config_allow_absent_nics: true") in out, out
    assert "nccl_config_socket_ifname" not in run.failed_text, run.failed_text
    assert run.failed_task == "nccl_config : Check the NCCL interfaces and HCAs are on this node"
    allowed = runs["allowed"]
    assert allowed.failures == 0 and allowed.unreachable == 0, allowed.raw
    assert not conf.exists(), "check mode"


def test_the_inputs_pass_reads_the_node_once_for_both_roles(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yml"
    extra.write_text(
        f"ansible_python_interpreter: {sys.executable}\nnodetune_hosts: localhost\n"
        "nodetune_input_roles: [net_mtu, nccl_config]\n"
        "net_mtu_interfaces: [{name: nt-absent0, mtu: 9000}]\n"
        "nccl_config_socket_ifname: '=nt-absent1'\n")
    env = ansible_env()
    result = subprocess.run(
        [str(PLAYBOOK), "-i", "localhost,", "-c", "local", "--check",
         str(ROOT / "playbooks" / "inputs.yml"), "-e", f"@{extra}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    flat = " ".join(out.split())
    assert "invalid input on localhost: net_mtu: net_mtu_interfaces[0] (name: nt-absent0): no " \
           "such interface on this node; this node has interfaces" in flat, flat
    assert "nccl_config: nccl_config_socket_ifname (NCCL_SOCKET_IFNAME==nt-absent1): " \
           "nt-absent1 matches no interface on this node" in flat, flat
    # One read of the node for both roles: net_mtu's checks, the first, include node_facts
    # read-only (this machine has no installed fact script); nccl_config's see its facts.
    tasks = [block.split("]", 1) for block in out.split("TASK [")[1:]]
    gathers = [body for name, body in tasks
               if name == "Gather the node facts where this run has none"]
    assert len(gathers) == 2 and "included: node_facts" in gathers[0], out
    assert "skipping: [localhost]" in gathers[1], out
    read = [body for name, body in tasks if name == "nodetune.cluster.node_facts : Gather the "
            "nodetune local fact without installing it"]
    assert len(read) == 1 and "ok: [localhost]" in read[0], out
    assert "changed: [" not in out, out


def test_a_role_used_alone_reads_the_node_not_a_fact_cache(tmp_path: Path) -> None:
    """A fact cache (jsonfile, smart gathering) holds node facts that an earlier run's
    `setup` gathered when the node had eth9; the node has lost it since. net_mtu used alone
    reads the node again and refuses eth9, where the cached facts would let it pass (and
    the MTU request would be a silent no-op)."""
    cache, facts_d, before = tmp_path / "cache", tmp_path / "facts.d", tmp_path / "before"
    facts_d.mkdir()
    script = facts_d / "nodetune.fact"
    script.write_bytes((ROOT / "roles/node_facts/files/nodetune.fact").read_bytes())
    script.chmod(0o755)
    before.mkdir()
    earlier = _facts_env(before)
    eth9 = Path(earlier["NODETUNE_FACTS_SYSFS"]) / "class" / "net" / "eth9"
    eth9.mkdir()
    (eth9 / "mtu").write_text("1500\n")
    cached = {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache),
              "ANSIBLE_GATHERING": "smart", "ANSIBLE_NOCOLOR": "1",
              "ANSIBLE_LOCALHOST_WARNING": "false"}
    play = tmp_path / "gather.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    f"    - ansible.builtin.setup: {{fact_path: {facts_d}, gather_subset: [min]}}\n")
    first = subprocess.run([str(PLAYBOOK), "-i", "localhost,", "-c", "local", str(play),
                            "-e", f"ansible_python_interpreter={sys.executable}"],
                           env={**os.environ, **earlier, **cached}, capture_output=True,
                           text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    # The cache holds the earlier facts (one file per host; its name varies by ansible-core).
    assert any("eth9" in f.read_text() for f in cache.iterdir()), list(cache.iterdir())
    result = _run("net_mtu", {"net_mtu_interfaces": [{"name": "eth9", "mtu": 9000}]},
                  tmp_path, env_={**_facts_env(tmp_path), **cached})
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, out
    assert "net_mtu_interfaces[0] (name: eth9): no such interface on this node" in out, out
