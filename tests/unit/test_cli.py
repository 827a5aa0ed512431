"""CLI error paths and option parsing: every bad input is one clear line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodetune.cli import main


@pytest.fixture()
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _good_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node-a:\n"
                   "        node-b:\n")
    return inv


@pytest.mark.parametrize("verb", ["apply", "facts"])
def test_missing_inventory(runner: CliRunner, verb: str) -> None:
    res = runner.invoke(main, [verb, "inventory/nope"])
    assert res.exit_code == 2
    assert "inventory/nope does not exist" in res.output
    assert "Traceback" not in res.output


def test_unparsable_inventory(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.ini"
    bad.write_text("[x\nfoo")
    res = runner.invoke(main, ["apply", str(bad)])
    assert res.exit_code == 2
    assert "cannot parse inventory" in res.output and "bad.ini" in res.output


def test_inventory_without_hosts(runner: CliRunner, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yml"
    empty.write_text("all:\n  vars: {a: 1}\n")
    res = runner.invoke(main, ["apply", str(empty)])
    assert res.exit_code == 2
    assert "defines no hosts" in res.output


def test_limit_matching_nothing(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(main, ["apply", str(_good_inventory(tmp_path)), "--limit", "gpu-9*"])
    assert res.exit_code == 2
    assert "--limit 'gpu-9*' matches no host" in res.output


@pytest.mark.parametrize(("bad", "said", "why"), [
    ("{not: [closed", "-e '{not: [closed': ", "while parsing a flow sequence"),  # YAML's words
    ("@missing.yml", "-e @missing.yml: ", "cannot read missing.yml"),
])
def test_malformed_extra_vars(runner: CliRunner, tmp_path: Path, bad: str, said: str,
                              why: str) -> None:
    # ansible-playbook itself parses -e; what it refuses (or a file that is not there)
    # is bad input, recorded, with a JSON document under --json.
    res = runner.invoke(main, ["apply", str(_good_inventory(tmp_path)), "-e", bad, "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2 and doc["status"] == "error"
    message = doc["error"]["message"]
    assert message.startswith(said) and why in message.lower(), message
    assert (tmp_path / ".nodetune" / "runs" / doc["run_id"] / "report.json").is_file()


def test_bad_option_value_is_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(main, ["apply", str(_good_inventory(tmp_path)), "--forks", "0"])
    assert res.exit_code == 2


def test_help_teaches(runner: CliRunner) -> None:
    res = runner.invoke(main, ["apply", "--help"])
    assert res.exit_code == 0
    for word in ("--check", "--limit", "Examples", "--json", "-e nodetune_hosts=GROUP",
                 "gpu_nodes", "ANSIBLE_HOST_KEY_CHECKING=False"):
        assert word in res.output
    top = runner.invoke(main, ["--help"])
    assert "Exit codes" in top.output and "lab up" in top.output


def test_runs_with_no_records(runner: CliRunner) -> None:
    res = runner.invoke(main, ["runs"])
    assert res.exit_code == 0
    assert "no runs recorded" in res.output
    res = runner.invoke(main, ["runs", "2001"])
    assert res.exit_code == 2


def test_lab_without_podman(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    res = runner.invoke(main, ["lab", "status"])
    assert res.exit_code == 3
    assert "apt-get install podman" in res.output


LOGIN_ONLY = "all:\n  children:\n    login:\n      hosts:\n        login-01:\n"
EMPTY_GROUP = ("all:\n  children:\n    gpu_nodes:\n      hosts: {}\n    login:\n      hosts:\n"
               "        login-01:\n")
MIXED = ("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-01:\n    login:\n"
         "      hosts:\n        login-01:\n")


GROUP_REFUSALS = [
    (LOGIN_ONLY, [], "group 'gpu_nodes' is not in inventory"),
    (EMPTY_GROUP, [], "group 'gpu_nodes' in inventory"),
    (MIXED, ["-e", "nodetune_hosts=rack_b"], "group 'rack_b' is not in inventory"),
    (MIXED, ["-e", '{"nodetune_hosts": "rack_b"}'], "group 'rack_b' is not in inventory"),
    (MIXED, ["--limit", "login-01"], "--limit 'login-01' matches no host in group 'gpu_nodes'"),
    (MIXED, ["-e", "nodetune_hosts="], "-e nodetune_hosts is empty"),
]


@pytest.mark.parametrize(("verb", "text", "args", "said"), [
    (verb, text, args, said) for verb in ("apply", "facts") for text, args, said in GROUP_REFUSALS
    if verb == "apply" or "-e" not in args  # facts has no -e
])
def test_a_missing_or_empty_gpu_group_is_refused_before_anything_runs(
        runner: CliRunner, tmp_path: Path, verb: str, text: str, args: list[str],
        said: str) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    res = runner.invoke(main, [verb, str(inv), *args, "--json"])
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    message = doc["error"]["message"]
    assert said in message, message
    assert said.startswith("-e") or str(inv) in message  # the group and the inventory named
    run = tmp_path / ".nodetune" / "runs" / doc["run_id"]
    assert not (run / "ansible").exists()  # ansible-runner never started
    assert set(p.name for p in run.iterdir()) <= {"report.json", "report.html"}


def test_the_target_group_is_read_as_ansible_reads_extra_vars(tmp_path: Path) -> None:
    from nodetune.ansible.targets import pattern_of as target_pattern

    assert target_pattern(()) == "gpu_nodes"
    assert target_pattern(["net_mtu_mtu=9000"]) == "gpu_nodes"
    assert target_pattern(["nodetune_hosts=rack_a other=1"]) == "rack_a"
    assert target_pattern(["nodetune_hosts=rack_a", '{"nodetune_hosts": "rack_b"}']) == "rack_b"
    assert target_pattern(["nodetune_hosts='rack_a:&rack_b'"]) == "rack_a:&rack_b"
    extra = tmp_path / "extra.yml"
    extra.write_text("nodetune_hosts: rack_c\n")
    assert target_pattern([f"@{extra}"]) == "rack_c"
    vaulted = tmp_path / "vault.yml"
    vaulted.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    assert target_pattern([f"@{vaulted}"]) is None  # only ansible-playbook can read it
    assert target_pattern(["nodetune_hosts={{ target }}"]) is None
