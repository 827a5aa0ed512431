"""Every role's molecule scenario (podman driver): check, converge, idempotence, verify.

Scenarios use distinct container names, so they run three at a time, started when pytest
has collected them (tests/molecule/runs.py); each test waits for its own scenario's result.
"""

from __future__ import annotations

import pytest

from tests.molecule.runs import REPO, SCENARIOS, failed_creating, order, result


def covered_roles() -> set[str]:
    """The roles a scenario converges: its own name's, or those whose plays it imports
    (molecule/network runs the four network roles' plays on one pair of instances)."""
    import yaml

    covered = set(SCENARIOS)
    for scenario in SCENARIOS:
        plays = yaml.safe_load((REPO / "molecule" / scenario / "converge.yml").read_text())
        for play in plays:
            imported = str(play.get("ansible.builtin.import_playbook", ""))
            if imported.startswith("../") and imported.endswith("/converge.yml"):
                covered.add(imported.split("/")[1])
    return covered


def test_every_role_has_a_scenario() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    missing = [r for r in roles if r not in covered_roles() and r != "node_facts"]
    assert not missing, f"roles without a molecule scenario: {missing}"


def test_the_network_scenario_runs_each_roles_own_plays_in_the_site_order() -> None:
    import yaml

    [play] = yaml.safe_load((REPO / "playbooks" / "stages" / "network.yml").read_text())
    site_order = [t["ansible.builtin.import_role"]["name"].split(".")[-1] for t in play["tasks"]]
    assert site_order == ["net_sysctl", "net_mtu", "roce_qos", "nccl_config"]
    for stage in ("prepare", "converge", "verify"):
        plays = yaml.safe_load((REPO / "molecule" / "network" / f"{stage}.yml").read_text())
        assert [p["ansible.builtin.import_playbook"] for p in plays] == [
            f"../{role}/{stage}.yml" for role in site_order], stage
    for role in site_order:
        assert role not in SCENARIOS, f"{role} runs inside molecule/network, not on its own"


@pytest.mark.molecule
@pytest.mark.timeout(3700)  # the scenario's own limit (runs.py) and the wait for a free slot
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str) -> None:
    code, output, took = result(scenario)
    print(f"molecule {scenario}: {took:.0f} s")
    assert code == 0, output


def test_every_scenario_reaches_its_instances_through_the_pipelined_connection() -> None:
    """One podman call per task and host (tests/molecule/connection_plugins): a scenario on
    the podman driver's own connection would cost about three times the CPU."""
    import yaml

    plugins = "${MOLECULE_PROJECT_DIRECTORY}/tests/molecule/connection_plugins"
    for scenario in SCENARIOS:
        conf = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
        provisioner = conf["provisioner"]
        assert provisioner.get("connection_options") == {
            "ansible_connection": "nodetune_podman"}, scenario
        assert provisioner["env"].get("ANSIBLE_CONNECTION_PLUGINS") == plugins, scenario
    assert (REPO / "tests" / "molecule" / "connection_plugins" / "nodetune_podman.py").is_file()


def test_longest_scenarios_start_first_then_the_rest_by_name() -> None:
    started = order(SCENARIOS)
    assert sorted(started) == SCENARIOS
    assert started[0] == "nvidia_container_toolkit"
    rest = [s for s in started if s not in ("nvidia_container_toolkit", "nvidia_driver",
                                            "slurm_healthcheck", "ofed_doca", "ofed",
                                            "net_mtu_netplan")]
    assert rest == sorted(rest) and started[-len(rest):] == rest


def test_only_a_failed_create_step_is_tried_again() -> None:
    create = ("ERROR    [nccl_config > create] \x1b[31mExecuted: Failed\x1b[0m\n"
              "Error: netavark: No such file or directory (os error 2)")
    assert failed_creating("nccl_config", create)
    assert failed_creating("nccl_config", "nccl_config > create: Executed: Failed (Ansible")
    assert not failed_creating("net_mtu", create)
    assert not failed_creating("config", create)
    assert not failed_creating("nccl_config", "ERROR    [nccl_config > converge] Executed: Failed")
    assert not failed_creating("nccl_config", "[nccl_config > idempotence] Executed: Failed")
