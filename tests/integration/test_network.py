"""Network roles through `nodetune apply` on the lab: live values equal the inventory's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_nodetune
from tests.integration.conftest import Lab

# Values that differ from both the kernel's and the roles' defaults, so a pass
# proves the inventory reached the nodes.
ASKED = {
    # reno: always allowed, also inside a container's network namespace (bbr is the default).
    "net_sysctl_tcp_congestion_control": "reno",
    "net_sysctl_settings_overrides": {
        "net.ipv4.tcp_rmem": "4096 262144 33554432",
        "net.ipv4.tcp_wmem": "4096 32768 33554432",
        "net.ipv4.tcp_slow_start_after_idle": 0,
        "net.ipv4.tcp_mtu_probing": 1,
    },
    "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}],
    "nccl_config_socket_ifname": "=eth1",
    "nccl_config_extra": {"NCCL_DEBUG": "WARN"},
}


@pytest.fixture(scope="module")
def tuned_inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    inv = tmp_path_factory.mktemp("inv") / "lab"
    shutil.copytree(lab.inventory, inv)
    (inv / "group_vars").mkdir(exist_ok=True)
    (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(ASKED))
    return inv


def test_apply_sets_live_values_the_inventory_asked_for(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(tuned_inventory), "-t",
                       "node_facts,net_sysctl,net_mtu,roce_qos,nccl_config", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    for node in lab.nodes:
        assert lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_congestion_control") == "reno"
        for key, value in ASKED["net_sysctl_settings_overrides"].items():  # type: ignore[union-attr]
            live = " ".join(lab.sh(node, "sysctl", "-n", key).split())
            assert live == str(value), f"{node}: {key} is {live}"
        persisted = lab.sh(node, "cat", "/etc/sysctl.d/90-nodetune-net.conf")
        assert "net.ipv4.tcp_rmem = 4096 262144 33554432" in persisted
        assert lab.sh(node, "cat", "/sys/class/net/eth1/mtu") == "9000"
        assert lab.sh(node, "cat", "/sys/class/net/eth0/mtu") == "1500", "SSH NIC untouched"
        nccl = lab.sh(node, "cat", "/etc/nccl.conf")
        assert "NCCL_SOCKET_IFNAME==eth1" in nccl and "NCCL_DEBUG=WARN" in nccl


def test_second_apply_changes_nothing(tuned_inventory: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(tuned_inventory), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert all(h["changed"] == 0 for h in doc["hosts"]), doc["changed_tasks"]


def test_facts_show_the_new_values(lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    res = run_nodetune("facts", str(tuned_inventory), "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    for node, facts in res.json()["facts"].items():
        assert facts["sysctl"]["net.ipv4.tcp_congestion_control"] == "reno", node
        assert facts["sysctl"]["net.ipv4.tcp_rmem"] == "4096 262144 33554432", node
        eth1 = next(i for i in facts["interfaces"] if i["name"] == "eth1")
        assert eth1["mtu"] == 9000, node


def test_bad_value_fails_before_changing_anything(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    before = lab.sh(lab.nodes[0], "sysctl", "-n", "net.ipv4.tcp_rmem")
    res = run_nodetune("apply", str(tuned_inventory), "-t", "net_sysctl", "-e",
                       '{"net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 oops"}}',
                       runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "net.ipv4.tcp_rmem" in res.stdout
    assert lab.sh(lab.nodes[0], "sysctl", "-n", "net.ipv4.tcp_rmem") == before


def test_bad_value_in_a_later_role_on_one_host_changes_nothing_anywhere(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    """net_sysctl runs before nccl_config; a valid new tcp_rmem must not land either."""
    bad, good = lab.nodes
    before = {n: lab.sh(n, "sysctl", "-n", "net.ipv4.tcp_rmem") for n in lab.nodes}
    hv = tuned_inventory / "host_vars"
    hv.mkdir(exist_ok=True)
    (hv / f"{bad}.yml").write_text("nccl_config_ib_tc: 300\n")
    try:
        res = run_nodetune(
            "apply", str(tuned_inventory), "--json", "-e",
            '{"net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 131072 16777216"}}',
            runs_dir=runs_dir)
    finally:
        (hv / f"{bad}.yml").unlink()
    assert res.code == 2, res.stdout + res.stderr
    doc = res.json()
    assert [(p["host"], p["role"]) for p in doc["input_problems"]] == [(bad, "nccl_config")]
    assert "nccl_config_ib_tc" in doc["input_problems"][0]["message"]
    assert all(h["changed"] == 0 for h in doc["hosts"]), doc["changed_tasks"]
    for node in (bad, good):
        assert lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_rmem") == before[node], node


def test_an_interface_or_hca_the_node_lacks_exits_2_naming_them_and_changes_nothing(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    """The example's NIC names on a node that has other ones: refused by the inputs pass,
    before net_sysctl (which runs first) writes the valid value it was given."""
    bad = lab.nodes[0]

    def state(node: str) -> tuple[str, str, str]:
        return (lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_rmem"),
                lab.sh(node, "cat", "/sys/class/net/eth1/mtu"),
                lab.sh(node, "sh", "-c", "cat /etc/nccl.conf 2>/dev/null || echo absent"))

    before = {n: state(n) for n in lab.nodes}
    hv = tuned_inventory / "host_vars"
    hv.mkdir(exist_ok=True)
    (hv / f"{bad}.yml").write_text(yaml.safe_dump({
        "net_mtu_interfaces": [{"name": "eth1", "mtu": 9000}, {"name": "ens1f0np0", "mtu": 9000}],
        "nccl_config_ib_hca": "=mlx5_0:1"}))
    try:
        res = run_nodetune(
            "apply", str(tuned_inventory), "--json", "-e",
            '{"net_sysctl_settings_overrides": {"net.ipv4.tcp_rmem": "4096 131072 16777216"}}',
            runs_dir=runs_dir)
    finally:
        (hv / f"{bad}.yml").unlink()
    assert res.code == 2, res.stdout + res.stderr
    doc = res.json()
    problems = {(p["host"], p["role"]): " ".join(p["message"].split())
                for p in doc["input_problems"]}
    assert sorted(problems) == [(bad, "nccl_config"), (bad, "net_mtu")], problems
    assert ("net_mtu_interfaces[1] (name: ens1f0np0): no such interface on this node; this "
            "node has interfaces eth0, eth1 and RDMA devices none") in problems[(bad, "net_mtu")]
    assert ("nccl_config_ib_hca (NCCL_IB_HCA==mlx5_0:1): mlx5_0:1 matches no RDMA device port "
            "on this node; this node has interfaces eth0, eth1") in problems[(bad, "nccl_config")]
    assert all(h["changed"] == 0 for h in doc["hosts"]), doc["changed_tasks"]
    assert {n: state(n) for n in lab.nodes} == before


def test_sysctl_drift_by_hand_is_found_and_undone_and_a_converged_node_costs_no_call(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    # The inputs pass's probe compares live values and files: a converged node gets no
    # net_sysctl write call; a live value or the file changed by hand gets one, which
    # undoes it.
    task = "Persist and apply the sysctl settings"
    conf = "/etc/sysctl.d/90-nodetune-net.conf"

    _apply_json(tuned_inventory, "net_sysctl", runs_dir)
    live, edited = lab.nodes[0], lab.nodes[1]
    lab.sh(live, "sysctl", "-w", "net.ipv4.tcp_rmem=4096 87380 6291456")
    lab.sh(edited, "sh", "-c", f"echo 'net.ipv4.tcp_sack = 0' >> {conf}")
    report = _apply_json(tuned_inventory, "net_sysctl", runs_dir)
    assert sorted(t["host"] for t in report["changed_tasks"]  # type: ignore[union-attr]
                  if t["task"] == task) == sorted([live, edited])
    assert " ".join(lab.sh(live, "sysctl", "-n", "net.ipv4.tcp_rmem").split()) == \
        "4096 262144 33554432"
    assert "net.ipv4.tcp_sack = 0" not in lab.sh(edited, "cat", conf)
    again = _apply_json(tuned_inventory, "net_sysctl", runs_dir)
    # The tuning tasks are not even included (roles/net_sysctl/tasks/tune.yml): no event.
    assert _task_results(again, task) == set()
    assert _task_results(again, "Tune socket and TCP sysctls") == {
        (n, "runner_on_skipped") for n in lab.nodes}


def test_nccl_block_changed_by_hand_is_rewritten_and_a_kept_one_costs_no_call(
        lab: Lab, tuned_inventory: Path, runs_dir: Path) -> None:
    task = "Write the managed block of the NCCL config"

    _apply_json(tuned_inventory, "nccl_config", runs_dir)
    node = lab.nodes[0]
    lab.sh(node, "sed", "-i", "s/^NCCL_DEBUG=WARN$/NCCL_DEBUG=INFO/", "/etc/nccl.conf")
    report = _apply_json(tuned_inventory, "nccl_config", runs_dir)
    assert [t["host"] for t in report["changed_tasks"]  # type: ignore[union-attr]
            if t["task"] == task] == [node]
    assert "NCCL_DEBUG=WARN" in lab.sh(node, "cat", "/etc/nccl.conf").splitlines()
    again = _apply_json(tuned_inventory, "nccl_config", runs_dir)
    assert _task_results(again, task) == {(n, "runner_on_skipped") for n in lab.nodes}


def _task_results(report: dict[str, object], task: str) -> set[tuple[str, str]]:
    """(host, ok or skipped event) of ``task`` in one run, from its job events."""
    found = set()
    for path in Path(str(report["artifacts"])).glob("job_events/*.json"):
        event = yaml.safe_load(path.read_text())
        if (event.get("event_data") or {}).get("task") == task and \
                event["event"] in ("runner_on_ok", "runner_on_skipped"):
            found.add((event["event_data"]["host"], event["event"]))
    return found


def _apply_json(inventory: Path, tag: str, runs_dir: Path) -> dict[str, object]:
    """One `nodetune apply -t TAG --json` that must succeed, as its report."""
    res = run_nodetune("apply", str(inventory), "-t", tag, "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    return res.json()  # type: ignore[no-any-return]
