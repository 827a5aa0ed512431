"""One rule for the hosts every verb acts on (nodetune.ansible.targets): the GPU group or
`-e nodetune_hosts`, refused when missing, and --partners inside it; nothing is contacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodetune.ansible import targets
from nodetune.cli import main
from nodetune.errors import InputError, InventoryError

# 192.0.2.0/24 is TEST-NET-1: nothing answers there.
HOSTS = """\
all:
  children:
    {group}:
      hosts:
        gpu-01: {{ansible_host: 192.0.2.11}}
        gpu-02: {{ansible_host: 192.0.2.12}}
        gpu-03: {{ansible_host: 192.0.2.13}}
    login:
      hosts:
        login-1: {{ansible_host: 192.0.2.21}}
        login-2: {{ansible_host: 192.0.2.22}}
"""


@pytest.fixture()
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    return CliRunner()


def inventory(tmp_path: Path, group: str = "gpu_nodes") -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(HOSTS.format(group=group))
    return path


@pytest.mark.parametrize("verb", [["apply", "--check"], ["facts"], ["check"],
                                  ["validate", "--plan"], ["validate"]])
def test_every_verb_refuses_an_inventory_without_the_gpu_group(
        runner: CliRunner, tmp_path: Path, verb: list[str]) -> None:
    """No verb falls back to every host (login nodes included) when gpu_nodes is missing."""
    inv = inventory(tmp_path, group="compute")
    res = runner.invoke(main, [verb[0], str(inv), *verb[1:], "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert "group 'gpu_nodes' is not in inventory" in doc["error"]["message"]
    assert "nodetune_hosts=GROUP" in doc["error"]["message"]


@pytest.mark.parametrize("verb", [["validate", "--plan", "--seed", "1"], ["check"]])
def test_nodetune_hosts_names_the_group_for_check_and_validate(
        runner: CliRunner, tmp_path: Path, verb: list[str]) -> None:
    inv = inventory(tmp_path, group="compute")
    res = runner.invoke(main, [verb[0], str(inv), *verb[1:], "-e", "nodetune_hosts=compute",
                               "--timeout", "5", "--json"])
    doc = json.loads(res.stdout)
    if verb[0] == "validate":
        assert res.exit_code == 0, res.output
        assert sorted(doc["fleet"]["nodes_under_test"]) == ["gpu-01", "gpu-02", "gpu-03"]
    else:  # checked the compute hosts (unreachable here), never the login hosts
        assert res.exit_code in (3, 4), res.output
        assert sorted(doc["nodes"]) == ["gpu-01", "gpu-02", "gpu-03"]


def test_check_and_validate_read_only_nodetune_hosts_from_e(runner: CliRunner,
                                                            tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    for verb in (["check"], ["validate", "--plan"]):
        res = runner.invoke(main, [verb[0], str(inv), *verb[1:], "-e", "net_mtu_mtu=9000"])
        assert res.exit_code == 2, res.output
        assert "reads only nodetune_hosts" in res.output and "net_mtu_mtu" in res.output


def test_partners_outside_the_group_are_refused_naming_them(runner: CliRunner,
                                                            tmp_path: Path) -> None:
    """Before: the plan was made, and every pair then failed with "needs two hosts"."""
    inv = inventory(tmp_path)
    res = runner.invoke(main, ["validate", str(inv), "--limit", "gpu-03",
                               "--partners", "login-*,gpu-01", "--plan", "--json"])
    assert res.exit_code == 2, res.output
    message = json.loads(res.stdout)["error"]["message"]
    assert "--partners 'login-*,gpu-01': login-1, login-2 are not in 'gpu_nodes'" in message
    res = runner.invoke(main, ["validate", str(inv), "--limit", "gpu-03",
                               "--partners", "gpu-01", "--plan", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["fleet"]["partners"] == ["gpu-01"]


def test_partners_follow_nodetune_hosts(tmp_path: Path) -> None:
    from nodetune.ansible.inventory import load

    inv = load(inventory(tmp_path, group="compute"))
    assert [h.name for h in targets.partners(inv, "gpu-01,gpu-02", pattern="compute").hosts] == \
        ["gpu-01", "gpu-02"]
    with pytest.raises(InputError, match="gpu-01 is not in 'login'"):
        targets.partners(inv, "gpu-01", pattern="login")
    with pytest.raises(InventoryError, match="--partners 'nope'"):
        targets.partners(inv, "nope", pattern="compute")


def test_select_is_the_group_under_limit(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    assert [h.name for h in targets.select(inv, limit=None).hosts] == \
        ["gpu-01", "gpu-02", "gpu-03"]
    assert [h.name for h in targets.select(inv, limit="gpu-02,login-1").hosts] == ["gpu-02"]
    with pytest.raises(InventoryError, match="is empty"):
        targets.select(inv, limit=None, pattern="")
