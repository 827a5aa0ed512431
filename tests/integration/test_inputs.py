"""Inventories on the real lab: a vaulted one works for every verb, with the secret in the
places ansible-playbook takes it from; a duplicated key changes nothing on any node."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_nodetune
from tests.integration.conftest import Lab

VAULT = Path(sys.executable).parent / "ansible-vault"
SECRET = "lab vault secret 7f3a"


@pytest.fixture(scope="module")
def vaulted(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A copy of the lab inventory whose SSH key is an inline !vault value and whose
    nodetune_python is in an encrypted group_vars file: no verb reaches a node, nor
    finds torch there, unless it decrypted both. Returns (inventory, password file)."""
    tmp = tmp_path_factory.mktemp("vaulted")
    password = tmp / "vault-pass"
    password.write_text(SECRET + "\n")
    root = tmp / "inv"
    gpu_vars = root / "group_vars" / "gpu_nodes"
    gpu_vars.mkdir(parents=True)
    hosts = yaml.safe_load((lab.inventory / "hosts.yml").read_text())
    key = hosts["all"]["vars"].pop("ansible_ssh_private_key_file")
    python = hosts["all"]["vars"].pop("nodetune_python")
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    secret_file = gpu_vars / "secret.yml"
    secret_file.write_text(yaml.safe_dump({"nodetune_python": python}))
    subprocess.run([str(VAULT), "encrypt", "--vault-password-file", str(password),
                    str(secret_file)], check=True, capture_output=True)
    inline = subprocess.run([str(VAULT), "encrypt_string", "--vault-password-file",
                             str(password), key, "--name", "ansible_ssh_private_key_file"],
                            check=True, capture_output=True, text=True).stdout
    (gpu_vars / "inline.yml").write_text(inline)
    assert "$ANSIBLE_VAULT" in secret_file.read_text() and "!vault" in inline
    yield root, password
    shutil.rmtree(tmp, ignore_errors=True)


def _no_secret_left(runs_dir: Path) -> None:
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"secret written to {path}"


def test_apply_reads_a_vaulted_inventory_with_vault_id(
        lab: Lab, vaulted: tuple[Path, Path], runs_dir: Path) -> None:
    inventory, password = vaulted
    res = run_nodetune("apply", str(inventory), "--check", "-t", "nccl_config",
                       "--vault-id", f"lab@{password}", "--json", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert {h["host"]: h["state"] in ("ok", "changed") for h in doc["hosts"]} == \
        dict.fromkeys(lab.nodes, True)
    assert doc["options"]["vault_ids"] == [f"lab@{password}"]
    _no_secret_left(runs_dir)


def test_facts_reads_a_vaulted_inventory_with_the_environments_password_file(
        lab: Lab, vaulted: tuple[Path, Path], runs_dir: Path) -> None:
    inventory, password = vaulted
    res = run_nodetune("facts", str(inventory), "--json", runs_dir=runs_dir,
                       env={"ANSIBLE_VAULT_PASSWORD_FILE": str(password)})
    assert res.code == 0, res.stdout + res.stderr
    assert sorted(res.json()["facts"]) == sorted(lab.nodes)
    _no_secret_left(runs_dir)


def test_check_reads_a_vaulted_inventory_with_a_password_file(
        lab: Lab, vaulted: tuple[Path, Path], runs_dir: Path) -> None:
    inventory, password = vaulted
    res = run_nodetune("check", str(inventory), "--skip-allreduce", "--vault-password-file",
                       str(password), "--json", runs_dir=runs_dir)
    assert res.code in (0, 1), res.stdout + res.stderr  # drift on a node is not this test's
    doc = res.json()
    torch = {node: [c for c in checks if c["name"] == "software.torch"]
             for node, checks in doc["checks"].items()}
    assert sorted(torch) == sorted(lab.nodes)
    for node, checks in torch.items():
        assert [c["status"] for c in checks] == ["pass"], (node, checks)
    _no_secret_left(runs_dir)


def test_validate_reads_a_vaulted_inventory_with_ansible_cfgs_password_file(
        lab: Lab, vaulted: tuple[Path, Path], runs_dir: Path, tmp_path: Path) -> None:
    inventory, password = vaulted
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text((REPO / "ansible.cfg").read_text().replace(
        "[defaults]\n", f"[defaults]\nvault_password_file = {password}\n", 1))
    res = run_nodetune("validate", str(inventory), "--min-busbw", "0.001", "--sizes", "1M",
                       "--iters", "2", "--warmup", "1", "--json", runs_dir=runs_dir,
                       env={"ANSIBLE_CONFIG": str(cfg)})
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    assert doc["status"] == "pass"
    assert sorted(doc["result"]["hosts"]) == sorted(lab.nodes)
    _no_secret_left(runs_dir)


_STATE = ("ip -o link show eth1 | grep -o 'mtu [0-9]*'; "
          "stat -c '%n %Y' /etc/nccl.conf /etc/ansible/facts.d/nodetune.fact "
          "/etc/sysctl.d/* /etc/systemd/network/* 2>/dev/null; true")


@pytest.mark.parametrize("where", ["group_vars", "hosts.yml"])
def test_apply_refuses_a_duplicated_key_and_changes_nothing(
        lab: Lab, runs_dir: Path, tmp_path: Path, where: str) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    text = (lab.inventory / "hosts.yml").read_text()
    node = lab.nodes[0]
    if where == "hosts.yml":
        # ansible_host twice for one host; the last value would silently win.
        text = text.replace(f"    {node}:\n", f"    {node}:\n          ansible_host: 192.0.2.99\n",
                            1)
        path, key = root / "hosts.yml", "ansible_host"
    else:
        gpu_vars = root / "group_vars" / "gpu_nodes"
        gpu_vars.mkdir(parents=True)
        path, key = gpu_vars / "net_mtu.yml", "net_mtu_interfaces"
        path.write_text("net_mtu_interfaces: [{name: eth1, mtu: 4000}]\n"
                        "net_mtu_interfaces: [{name: eth1, mtu: 9000}]\n")
    (root / "hosts.yml").write_text(text)
    before = {n: lab.sh(n, "sh", "-c", _STATE) for n in lab.nodes}
    res = run_nodetune("apply", str(root), "--json", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    message = res.json()["error"]["message"]
    assert f"{path}:" in message and f"duplicate key '{key}'" in message
    line = int(message.split(f"{path}:", 1)[1].split(":", 1)[0])
    assert path.read_text().splitlines()[line - 1].strip().startswith(key)
    assert not list(runs_dir.glob("*/ansible")), "ansible-playbook never started"
    assert {n: lab.sh(n, "sh", "-c", _STATE) for n in lab.nodes} == before
