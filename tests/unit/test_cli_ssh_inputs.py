"""`nodetune validate`, `apply` and `check` with a connection variable that would add an ssh_config
directive: exit 2 naming the host and the variable, before any node is contacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodetune.cli import main


@pytest.mark.parametrize("verb", ["validate", "apply", "check"])
@pytest.mark.parametrize("variable", ["ansible_user", "ansible_port",
                                      "ansible_ssh_private_key_file"])
def test_a_newline_in_a_connection_variable_stops_the_verb_before_any_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, verb: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    marker = tmp_path / "proxycommand-ran"
    # Were it written into ssh_config as it is, the second line would be a ProxyCommand
    # that runs on the controller when node-b is connected to.
    value = json.dumps(f"x\nProxyCommand touch {marker}")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                   "        node-a:\n          ansible_host: 127.0.0.1\n          ansible_port: 1\n"
                   f"        node-b:\n          ansible_host: 127.0.0.1\n"
                   f"          {variable}: {value}\n")
    extra = ["--timeout", "5"] if verb == "validate" else []
    res = CliRunner().invoke(main, [verb, str(inv), "--json", *extra])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2
    assert doc["error"]["host"] == "node-b" and variable in doc["error"]["message"]
    assert "node-b" in res.stderr and variable in res.stderr
    assert not marker.exists()
    # The run record is there, and says the same.
    record = next((tmp_path / "runs").glob(f"*-{verb}/report.json"))
    assert json.loads(record.read_text())["exit_code"] == 2


def test_check_refuses_a_bad_connection_variable_before_checking_any_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over SSH `check` reaches its nodes in parallel: the bad value on node-b is refused
    before node-a is checked, not when node-b's turn to connect comes."""
    from nodetune.check import verb as check_verb

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    contacted: list[str] = []
    monkeypatch.setattr(check_verb, "check_nodes", lambda hosts, *_a, **_k: contacted.extend(
        h.name for h in hosts) or {})
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                   "        node-a:\n          ansible_host: 127.0.0.1\n"
                   "        node-b:\n          ansible_host: 127.0.0.1\n"
                   '          ansible_user: "x\\nProxyCommand true"\n')
    res = CliRunner().invoke(main, ["check", str(inv), "--json"])
    assert res.exit_code == 2, res.output
    assert json.loads(res.stdout)["error"]["host"] == "node-b"
    assert contacted == []


# Connection variables as ordinary inventories write them: Jinja that ansible-playbook
# renders from the host's variables (and the controller's environment) before ssh starts.
TEMPLATED = ("all:\n  vars:\n    ssh_port: 2222\n  children:\n    gpu_nodes:\n      hosts:\n"
             '        node-a:\n          ansible_host: "{{ inventory_hostname }}.mgmt.example"\n'
             "        node-b:\n"
             '          ansible_host: "{{ inventory_hostname }}.mgmt.example"\n'
             "          ansible_user: \"{{ lookup('env', 'NODETUNE_TEST_SSH_USER') }}\"\n"
             '          ansible_port: "{{ ssh_port }}"\n'
             '          ansible_ssh_common_args: "-o ServerAliveInterval={{ 5 * 3 }}"\n')


@pytest.fixture
def templated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("NODETUNE_TEST_SSH_USER", "ops")
    for var in ("ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_COMMON_ARGS", "ANSIBLE_SSH_EXTRA_ARGS"):
        monkeypatch.delenv(var, raising=False)
    inv = tmp_path / "hosts.yml"
    inv.write_text(TEMPLATED)
    return inv


def test_templated_connection_variables_pass_apply_and_validate_inputs_and_are_what_is_reached(
        templated: Path) -> None:
    from nodetune.ansible import inventory
    from nodetune.ansible.results import PlaybookOptions
    from nodetune.apply import run
    from nodetune.collective.plan import Options
    from nodetune.remote import ssh_config
    from nodetune.validate import inputs

    run.check_inputs(templated, options=PlaybookOptions(), playbook="site.yml",
                     strict_vars=False)
    inv = inventory.load(templated)
    plan = inputs.checked(inv, Options(), group="pair")
    # Node rank 1 dials the master's rendered address, not the template.
    assert plan is not None and plan.master_addr == "node-a.mgmt.example"
    # The connection is made to what was checked: the rendered values.
    spec = ssh_config.spec_for(inv.host("node-b"))
    assert (spec.address, spec.user, spec.port, spec.keepalive) == (
        "node-b.mgmt.example", "ops", 2222, 15)


def test_check_accepts_templated_connection_variables_and_checks_every_node(
        templated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodetune.check import verb as check_verb

    contacted: list[str] = []
    monkeypatch.setattr(check_verb, "check_nodes", lambda hosts, *_a, **_k: contacted.extend(
        h.name for h in hosts) or {})
    res = CliRunner().invoke(main, ["check", str(templated), "--json"])
    assert res.exit_code != 2, res.output
    assert sorted(contacted) == ["node-a", "node-b"]


@pytest.mark.parametrize("verb", ["validate", "apply", "check"])
def test_a_template_that_renders_to_a_newline_is_still_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    marker = tmp_path / "proxycommand-ran"
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                   "        node-a:\n          ansible_host: 127.0.0.1\n          ansible_port: 1\n"
                   "        node-b:\n          ansible_host: 127.0.0.1\n"
                   f"          site_user: {json.dumps(f'x{chr(10)}ProxyCommand touch {marker}')}\n"
                   '          ansible_user: "{{ site_user }}"\n')
    extra = ["--timeout", "5"] if verb == "validate" else []
    res = CliRunner().invoke(main, [verb, str(inv), "--json", *extra])
    assert res.exit_code == 2, res.output
    error = json.loads(res.stdout)["error"]
    # Refused for what it renders to (a line break), not for being a template.
    assert error["host"] == "node-b" and "ansible_user" in error["message"]
    assert "control character" in error["message"]
    assert not marker.exists()
