"""Inputs Ansible would only warn about are bad input: duplicate keys, bytes that are not
UTF-8, a wrong shape, bare -e words, role-variable typos, a malformed master address;
vaulted inventories read with the operator's secrets; `runs --json` on an error."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodetune.ansible import role_vars, selection
from nodetune.ansible.env import playbook_env
from nodetune.ansible.extra_vars import read as read_extra_vars
from nodetune.ansible.inventory import load
from nodetune.ansible.results import PlaybookOptions
from nodetune.ansible.vault import Vault, env_paths, playbook_args
from nodetune.errors import InputError, InventoryError
from tests.conftest import NODETUNE, REPO, run_nodetune

VAULT = Path(sys.executable).parent / "ansible-vault"
DUPLICATE_KEY_ENV = "ANSIBLE_DUPLICATE_YAML_DICT_KEY"
SECRET = "correct horse battery staple"
HOSTS = ("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
         "        node-a: {ansible_host: 192.0.2.1}\n        node-b: {ansible_host: 192.0.2.2}\n")


def _inventory(tmp_path: Path, hosts: str = HOSTS) -> Path:
    root = tmp_path / "inv"
    (root / "group_vars" / "gpu_nodes").mkdir(parents=True)
    (root / "host_vars").mkdir()
    (root / "hosts.yml").write_text(hosts)
    return root


# --- duplicate keys ---------------------------------------------------------------------

def test_duplicate_key_in_the_hosts_file_names_file_line_and_key(tmp_path: Path) -> None:
    root = _inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                "        node-a:\n          ansible_host: 192.0.2.1\n"
                                "          ansible_host: 192.0.2.9\n")
    with pytest.raises(InventoryError) as err:
        load(root)
    assert f"{root}/hosts.yml:7" in str(err.value)
    assert "duplicate key 'ansible_host'" in str(err.value)
    assert err.value.exit_code == 2


def test_duplicate_key_in_group_vars_names_file_line_and_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _inventory(tmp_path)
    path = root / "group_vars" / "gpu_nodes" / "net_mtu.yml"
    path.write_text("net_mtu_interfaces: [{name: eth1, mtu: 9000}]\n"
                    "net_mtu_interfaces: [{name: eth2, mtu: 1500}]\n")
    # The operator's own "warn" does not make it a warning again.
    monkeypatch.setenv(DUPLICATE_KEY_ENV, "warn")
    with pytest.raises(InventoryError) as err:
        load(root)
    assert f"{path}:2" in str(err.value)
    assert "duplicate key 'net_mtu_interfaces'" in str(err.value)
    assert os.environ[DUPLICATE_KEY_ENV] == "warn", "the read leaves the environment as it was"


def test_ansible_playbook_runs_treat_a_duplicate_key_as_an_error(tmp_path: Path) -> None:
    env, _config = playbook_env(content=REPO, environ={DUPLICATE_KEY_ENV: "warn"}, cwd=tmp_path,
                                home=tmp_path)
    assert env[DUPLICATE_KEY_ENV] == "error"
    root = _inventory(tmp_path)
    (root / "group_vars" / "gpu_nodes" / "x.yml").write_text("a: 1\na: 2\n")
    # ansible-inventory under that environment refuses it, as ansible-playbook does.
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                           str(root), "--list"], capture_output=True, text=True, check=False,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode != 0
    assert "duplicate mapping key 'a'" in proc.stderr


# --- encoding and shape -------------------------------------------------------------------

def test_group_vars_that_are_not_utf8_name_the_file(tmp_path: Path) -> None:
    root = _inventory(tmp_path)
    path = root / "group_vars" / "gpu_nodes" / "net_mtu.yml"
    path.write_bytes(b'net_mtu_fabric: "caf\xe9 \xff"\n')
    with pytest.raises(InventoryError) as err:
        load(root)
    assert f"{path} is not UTF-8 text" in str(err.value)


@pytest.mark.parametrize("kind", ["yaml", "ini"])
def test_an_inventory_file_that_is_not_utf8_is_named(tmp_path: Path, kind: str) -> None:
    if kind == "yaml":
        path = tmp_path / "hosts.yml"
        path.write_bytes(b"all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                         b"        node-a: {ansible_host: caf\xe9}\n")
    else:
        path = tmp_path / "hosts.ini"
        path.write_bytes(b"[gpu_nodes]\nnode-a nodetune_python=/opt/caf\xe9/bin/python\n")
    with pytest.raises(InventoryError) as err:
        load(path)
    assert str(path) in str(err.value) and "not UTF-8 text" in str(err.value)


def test_a_list_where_the_hosts_mapping_belongs_gives_the_reason(tmp_path: Path) -> None:
    root = _inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                "        - node-a\n        - node-b\n")
    with pytest.raises(InventoryError) as err:
        load(root)
    message = str(err.value)
    assert 'Invalid "hosts" entry for "gpu_nodes" group, requires a dictionary, found a list' \
        in message
    assert str(root / "hosts.yml") in message
    assert "Origin:" not in message and "<class" not in message


# --- -e -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["garbage", "net_mtu_default=9000 garbage"])
def test_a_bare_word_in_extra_vars_is_refused(value: str) -> None:
    with pytest.raises(InputError, match="is not KEY=VALUE"):
        read_extra_vars([value])


def test_a_duplicate_key_in_an_extra_vars_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("net_mtu_default: 9000\nnet_mtu_default: 1500\n")
    with pytest.raises(InputError, match=f"{path}:2.*duplicate mapping key 'net_mtu_default'"):
        read_extra_vars([f"@{path}"])
    with pytest.raises(InputError, match="cannot read"):
        read_extra_vars([f"@{tmp_path / 'absent.yml'}"])


def test_extra_vars_that_are_not_a_mapping_are_refused() -> None:
    with pytest.raises(InputError, match="must be a mapping"):
        read_extra_vars(["[1, 2]"])
    assert read_extra_vars(["a=1", '{"b": 2}']) == [{"a": "1"}, {"b": 2}]


def test_apply_refuses_a_bare_extra_var_before_running(tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    res = run_nodetune("apply", str(inv), "--check", "-e", "garbage", "--json",
                       runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "-e 'garbage'" in res.json()["error"]["message"]
    assert not list(runs_dir.glob("*/ansible")), "ansible-playbook never started"


# --- role variables -------------------------------------------------------------------------

def test_unknown_role_variables_are_named_with_where_and_the_closest_name(
        tmp_path: Path) -> None:
    root = _inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                "        node-a: {net_mtu_interface: []}\n        node-b:\n")
    (root / "group_vars" / "gpu_nodes" / "s.yml").write_text(
        "net_sysctl_tcp_congestion_control: bbr\n__net_sysctl_private: 1\n"
        "net_sysctl_congestion_control: bbr\n")
    (root / "host_vars" / "node-b.yml").write_text("nccl_config_socket_if: eth1\n")
    inv = load(root)
    found = role_vars.check(inv.hosts, extra_vars=[{"roce_qos_trusts": "dscp"}],
                            inventory=root, roles=REPO / "roles", strict=False)
    by_name = {u.name: u for u in found}
    assert set(by_name) == {"roce_qos_trusts", "net_mtu_interface",
                            "net_sysctl_congestion_control", "nccl_config_socket_if"}
    assert by_name["roce_qos_trusts"].where == "-e"
    assert by_name["roce_qos_trusts"].suggestion == "roce_qos_trust"
    assert by_name["net_sysctl_congestion_control"].where.startswith(
        f"{root}/group_vars/gpu_nodes/s.yml:3")
    assert by_name["net_sysctl_congestion_control"].suggestion == \
        "net_sysctl_tcp_congestion_control"
    assert by_name["net_sysctl_congestion_control"].hosts == ("node-a", "node-b")
    assert by_name["nccl_config_socket_if"].where.startswith(f"{root}/host_vars/node-b.yml:1")
    assert by_name["nccl_config_socket_if"].suggestion == "nccl_config_socket_ifname"
    assert by_name["net_mtu_interface"].where.startswith(f"{root}/hosts.yml:5")
    with pytest.raises(InputError, match="did you mean net_mtu_interfaces"):
        role_vars.check(inv.hosts, inventory=root, roles=REPO / "roles", strict=True)


def test_every_variable_the_lab_and_example_inventories_set_is_known() -> None:
    example = load(REPO / "inventory" / "example")
    assert role_vars.check(example.hosts, inventory=example.source, roles=REPO / "roles",
                           strict=True) == ()


def test_the_example_inventory_s_commented_advice_names_real_variables() -> None:
    # An operator uncomments these lines: each must be a variable its role takes.
    known = role_vars.known(REPO / "roles")
    for path in sorted((REPO / "inventory" / "example").rglob("*.yml")):
        for line in path.read_text().splitlines():
            for name in re.findall(r"^\s*#\s*([a-z][a-z0-9_]*):", line):
                role = next((r for r in known if name.startswith(r + "_")), None)
                assert role is None or name in known[role], f"{path.name}: {name}"


def test_one_selection_for_the_verbs_that_contact_nodes(tmp_path: Path) -> None:
    """check, validate and tune select their hosts in one step (ansible/selection.py): the
    verb's group (-e nodetune_hosts), --limit, then the role variables no role takes."""
    root = _inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                "        node-a:\n        node-b:\n    rack1:\n      hosts:\n"
                                "        node-b:\n")
    (root / "host_vars" / "node-b.yml").write_text("net_mtu_interface: eth1\n")
    chosen = selection.select(root, verb="check")
    assert chosen.pattern == "gpu_nodes"
    assert [h.name for h in chosen.inventory.hosts] == ["node-a", "node-b"]
    assert [u.name for u in chosen.unknown] == ["net_mtu_interface"]
    assert chosen.warnings()[0].startswith(f"{root}/host_vars/node-b.yml:1:20: net_mtu_interface")
    assert "did you mean net_mtu_interfaces" in chosen.warnings()[0]
    narrowed = selection.select(root, verb="tune", limit="node-a")
    assert [h.name for h in narrowed.inventory.hosts] == ["node-a"] and narrowed.unknown == ()
    rack = selection.select(root, verb="validate", extra_vars=["nodetune_hosts=rack1"])
    assert rack.pattern == "rack1" and [h.name for h in rack.inventory.hosts] == ["node-b"]
    with pytest.raises(InputError, match="did you mean net_mtu_interfaces"):
        selection.select(root, verb="validate", strict=True)
    with pytest.raises(InventoryError):
        selection.select(root, verb="check", limit="nowhere")


def test_apply_warns_of_a_typo_and_strict_vars_refuses_it(tmp_path: Path,
                                                           runs_dir: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    playbook = str(REPO / "tests" / "fixtures" / "playbooks" / "mixed.yml")
    warned = run_nodetune("apply", str(inv), "--playbook", playbook, "--limit", "me",
                          "-e", "net_sysctl_congestion_control=bbr", runs_dir=runs_dir)
    assert warned.code == 0, warned.stdout + warned.stderr
    text = " ".join(warned.stderr.split())
    assert "net_sysctl_congestion_control is not a variable of role net_sysctl" in text
    assert "did you mean net_sysctl_tcp_congestion_control?" in text
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert [m.split(" is not")[0] for m in doc["unknown_vars"]] == [
        "-e: net_sysctl_congestion_control"]
    strict = run_nodetune("apply", str(inv), "--playbook", playbook, "--strict-vars", "--json",
                          "-e", "net_sysctl_congestion_control=bbr", runs_dir=runs_dir / "s")
    assert strict.code == 2, strict.stdout + strict.stderr
    assert "did you mean net_sysctl_tcp_congestion_control" in strict.json()["error"]["message"]
    assert not list((runs_dir / "s").glob("*/ansible")), "ansible-playbook never started"


def test_apply_help_examples_name_real_variables(runs_dir: Path) -> None:
    res = run_nodetune("apply", "--help", runs_dir=runs_dir)
    names = [w.split("=", 1)[0] for line in res.stdout.splitlines() if "-e " in line
             for w in line.split("-e ")[1:] if "=" in w.split()[0]]
    assert "net_sysctl_tcp_congestion_control" in names
    known = role_vars.known(REPO / "roles")
    for name in names:
        role = next((r for r in known if name.startswith(r + "_")), None)
        assert role is None or name in known[role], name


# --- validate's master address --------------------------------------------------------------

def test_a_malformed_master_addr_is_refused_before_connecting(tmp_path: Path,
                                                              runs_dir: Path) -> None:
    root = _inventory(tmp_path, "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                "        node-a:\n          ansible_host: 192.0.2.1\n"
                                "          nodetune_validate_master_addr: 10.0.0.300\n"
                                "        node-b: {ansible_host: 192.0.2.2}\n")
    started = time.monotonic()
    res = run_nodetune("validate", str(root), "--timeout", "5", "--json", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    error = res.json()["error"]
    assert error["host"] == "node-a"
    assert "nodetune_validate_master_addr '10.0.0.300' is not an IP address" in error["message"]
    assert time.monotonic() - started < 20


# --- runs --json ----------------------------------------------------------------------------

def test_runs_of_an_unknown_id_prints_json(runs_dir: Path) -> None:
    res = run_nodetune("runs", "NOSUCHID", "--json", runs_dir=runs_dir)
    assert res.code == 2
    doc = res.json()
    assert doc["exit_code"] == 2 and doc["status"] == "error"
    assert "NOSUCHID" in doc["error"]["message"]


# --- vault ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vaulted_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An inventory with an encrypted group_vars file and an inline !vault value, and its
    password file, encrypted once (two ansible-vault runs) for the module's tests, which
    each read a copy of their own (see _vaulted)."""
    tmp_path = tmp_path_factory.mktemp("vaulted")
    root = _inventory(tmp_path)
    password = tmp_path / "vault-pass"
    password.write_text(SECRET + "\n")
    secret_file = root / "group_vars" / "gpu_nodes" / "secret.yml"
    secret_file.write_text("ansible_become_password: hunter2\nnet_mtu_default: 9000\n")
    subprocess.run([str(VAULT), "encrypt", "--vault-password-file", str(password),
                    str(secret_file)], check=True, capture_output=True)
    inline = subprocess.run([str(VAULT), "encrypt_string", "--vault-password-file",
                             str(password), "=eth1", "--name", "nccl_config_socket_ifname"],
                            check=True, capture_output=True, text=True).stdout
    (root / "group_vars" / "gpu_nodes" / "inline.yml").write_text(inline)
    return tmp_path


def _vaulted(template: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy, under tmp_path, of the vaulted inventory (inv/) and its password file: the
    test's own directory, which it may add to."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template / "inv", tmp_path / "inv")
    shutil.copy2(template / "vault-pass", tmp_path / "vault-pass")
    return tmp_path / "inv", tmp_path / "vault-pass"


def test_a_vaulted_inventory_is_read_with_a_password_file(tmp_path: Path,
                                                           vaulted_template: Path) -> None:
    root, password = _vaulted(vaulted_template, tmp_path)
    for vault in (Vault(ids=(str(password),)), Vault(ids=(f"prod@{password}",)),
                  Vault(ids=("@prompt",), typed={"default": SECRET})):
        host = load(root, vault=vault).host("node-a")
        assert host.vars["ansible_become_password"] == "hunter2"
        assert host.vars["net_mtu_default"] == 9000
        assert host.vars["nccl_config_socket_ifname"] == "=eth1"


def test_without_the_secret_the_file_is_named(tmp_path: Path, vaulted_template: Path) -> None:
    root, _password = _vaulted(vaulted_template, tmp_path)
    with pytest.raises(InventoryError) as err:
        load(root)
    assert str(root / "group_vars" / "gpu_nodes" / "secret.yml") in str(err.value)
    assert "--vault-id" in str(err.value)
    # Another inventory (Ansible caches each directory's vars files per process).
    root, _password = _vaulted(vaulted_template, tmp_path / "inline-only")
    (root / "group_vars" / "gpu_nodes" / "secret.yml").unlink()
    with pytest.raises(InventoryError) as err:  # the inline value: no ReferenceError
        load(root)
    assert f"{root / 'group_vars' / 'gpu_nodes' / 'inline.yml'}:1" in str(err.value)
    assert "nccl_config_socket_ifname" in str(err.value)


def test_a_missing_password_file_is_bad_input(tmp_path: Path, vaulted_template: Path) -> None:
    root, _password = _vaulted(vaulted_template, tmp_path)
    with pytest.raises(InputError, match="vault secret"):
        load(root, vault=Vault(ids=(str(tmp_path / "no-such-file"),)))


@pytest.mark.parametrize("verb", ["apply", "facts", "check", "validate"])
def test_every_verb_honours_the_password_file_of_the_environment(
        tmp_path: Path, runs_dir: Path, verb: str, vaulted_template: Path) -> None:
    root, password = _vaulted(vaulted_template, tmp_path)
    without = run_nodetune(verb, str(root), "--json", runs_dir=runs_dir / "without")
    assert without.code == 2, without.stdout + without.stderr
    assert "secret.yml" in without.json()["error"]["message"]
    # With the secret the inventory is read: the run goes on to contact the (absent) nodes
    # and --strict-vars is the first thing to stop it, after the read.
    (root / "group_vars" / "gpu_nodes" / "typo.yml").write_text("net_mtu_defualt: 1\n")
    with_env = run_nodetune(verb, str(root), "--strict-vars", "--json", runs_dir=runs_dir / "env",
                            env={"ANSIBLE_VAULT_PASSWORD_FILE": str(password)})
    assert with_env.code == 2, with_env.stdout + with_env.stderr
    assert "net_mtu_defualt" in with_env.json()["error"]["message"]
    with_option = run_nodetune(verb, str(root), "--strict-vars", "--vault-id",
                               f"lab@{password}", "--json", runs_dir=runs_dir / "opt")
    assert "net_mtu_defualt" in with_option.json()["error"]["message"]
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("setting", ["vault_identity_list = lab@{}", "vault_password_file = {}"])
def test_the_vault_settings_of_ansible_cfg_are_honoured(tmp_path: Path, runs_dir: Path,
                                                        vaulted_template: Path,
                                                        setting: str) -> None:
    root, password = _vaulted(vaulted_template, tmp_path)
    (root / "group_vars" / "gpu_nodes" / "typo.yml").write_text("net_mtu_defualt: 1\n")
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\n{setting.format(password)}\n")
    res = run_nodetune("validate", str(root), "--strict-vars", "--json", runs_dir=runs_dir,
                       env={"ANSIBLE_CONFIG": str(cfg)})
    assert res.code == 2, res.stdout + res.stderr
    assert "net_mtu_defualt" in res.json()["error"]["message"]


def test_secrets_reach_ansible_playbook_as_private_files_only(tmp_path: Path) -> None:
    vault = Vault(ids=("lab@prompt", "ops@rel/pass"), typed={"lab": SECRET})
    assert SECRET not in repr(vault) and SECRET not in json.dumps(vault.as_dict())
    assert SECRET not in json.dumps(PlaybookOptions(vault=vault).as_dict())
    with playbook_args(vault, tmp_path) as args:
        assert args[:2] == ["--vault-id", f"ops@{Path('rel/pass').absolute()}"]
        label, path = args[3].split("@", 1)
        assert label == "lab" and Path(path).parent == tmp_path
        assert Path(path).read_text() == SECRET + "\n"
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert not Path(path).exists()


def test_relative_vault_paths_of_the_environment_stay_the_operators(tmp_path: Path) -> None:
    # ansible-playbook runs in the playbook's directory: the runs get absolute paths.
    env, _config = playbook_env(content=REPO, cwd=tmp_path, home=tmp_path, environ={
        "ANSIBLE_VAULT_PASSWORD_FILE": "pw",
        "ANSIBLE_VAULT_IDENTITY_LIST": "a@x, b@/abs/y, c@prompt"})
    assert env["ANSIBLE_VAULT_PASSWORD_FILE"] == str(tmp_path / "pw")
    assert env["ANSIBLE_VAULT_IDENTITY_LIST"] == f"a@{tmp_path / 'x'},b@/abs/y,c@prompt"
    assert env_paths({}, cwd=tmp_path) == {}


def test_ask_vault_pass_reads_the_secret_once_from_the_terminal(tmp_path: Path,
                                                                vaulted_template: Path,
                                                                runs_dir: Path) -> None:
    root, _password = _vaulted(vaulted_template, tmp_path)
    (root / "group_vars" / "gpu_nodes" / "typo.yml").write_text("net_mtu_defualt: 1\n")
    # A session of its own: no controlling terminal, so the prompt reads stdin.
    proc = subprocess.run([str(NODETUNE), "check", str(root), "--ask-vault-pass",
                           "--strict-vars", "--json"], input=SECRET + "\n", text=True,
                          capture_output=True, timeout=120, cwd=REPO, start_new_session=True,
                          env={**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir)}, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "net_mtu_defualt" in json.loads(proc.stdout)["error"]["message"]


def test_a_typed_vault_secret_reaches_ansible_playbook(tmp_path: Path, runs_dir: Path) -> None:
    root = tmp_path / "local"
    (root / "group_vars").mkdir(parents=True)
    (root / "hosts.ini").write_text(f"me ansible_connection=local "
                                    f"ansible_python_interpreter={sys.executable}\n")
    password = tmp_path / "vault-pass"
    password.write_text(SECRET + "\n")
    secret_file = root / "group_vars" / "all.yml"
    secret_file.write_text("vaulted_value: from-the-vault\n")
    subprocess.run([str(VAULT), "encrypt", "--vault-password-file", str(password),
                    str(secret_file)], check=True, capture_output=True)
    playbook = tmp_path / "prove.yml"
    playbook.write_text("- name: Prove the vaulted value arrived\n  hosts: all\n"
                        "  gather_facts: false\n  tasks:\n"
                        "    - name: Compare it\n      ansible.builtin.assert:\n"
                        "        that: vaulted_value == 'from-the-vault'\n")
    proc = subprocess.run([str(NODETUNE), "apply", str(root), "--playbook", str(playbook),
                           "--ask-vault-pass", "--json"], input=SECRET + "\n", text=True,
                          capture_output=True, timeout=300, cwd=REPO, start_new_session=True,
                          env={**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir)}, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert [(h["host"], h["ok"]) for h in doc["hosts"]] == [("me", 1)]
    assert doc["options"]["vault_ids"] == ["prompt_ask_vault_pass"]
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
