"""Whose ansible.cfg is in force, the roles path, and host-key checking (issue: always on)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodetune.ansible.content import content_dir
from nodetune.ansible.env import find_config, host_key_checking, playbook_env, roles_path
from nodetune.ansible.results import PlaybookOptions
from nodetune.ansible.runner import run_playbook

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _cfg(path: Path, text: str = "[defaults]\nforks = 7\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_config_precedence_follows_ansible(tmp_path: Path) -> None:
    bundled = _cfg(tmp_path / "bundle" / "ansible.cfg")
    env_cfg = _cfg(tmp_path / "env" / "site.cfg")
    cwd = tmp_path / "cwd"
    here = _cfg(cwd / "ansible.cfg")
    home = tmp_path / "home"
    user = _cfg(home / ".ansible.cfg")
    system = _cfg(tmp_path / "etc" / "ansible.cfg")
    kw = {"bundled": bundled, "cwd": cwd, "home": home, "system": system}

    assert find_config(environ={"ANSIBLE_CONFIG": str(env_cfg)}, **kw).path == env_cfg  # type: ignore[arg-type]
    # ANSIBLE_CONFIG may name a directory holding ansible.cfg.
    assert find_config(environ={"ANSIBLE_CONFIG": str(cwd)}, **kw).path == here  # type: ignore[arg-type]
    got = find_config(environ={}, **kw)  # type: ignore[arg-type]
    assert (got.path, got.source) == (here, "./ansible.cfg")
    here.unlink()
    assert find_config(environ={}, **kw).path == user  # type: ignore[arg-type]
    user.unlink()
    assert find_config(environ={}, **kw).source == "/etc/ansible"  # type: ignore[arg-type]
    system.unlink()
    got = find_config(environ={}, **kw)  # type: ignore[arg-type]
    assert (got.path, got.source) == (bundled, "bundled")


def test_world_writable_cwd_config_is_ignored_as_ansible_does(tmp_path: Path) -> None:
    cwd = tmp_path / "shared"
    _cfg(cwd / "ansible.cfg")
    cwd.chmod(0o777)
    bundled = _cfg(tmp_path / "b" / "ansible.cfg")
    got = find_config(bundled=bundled, environ={}, cwd=cwd, home=tmp_path / "nohome",
                      system=tmp_path / "nosys")
    assert got.source == "bundled"


def test_roles_path_puts_nodetune_first_and_keeps_the_operators(tmp_path: Path) -> None:
    cfg = find_config(bundled=tmp_path / "x", environ={},
                      cwd=_cfg(tmp_path / "op" / "ansible.cfg",
                               "[defaults]\nroles_path = myroles:/opt/roles\n").parent,
                      home=tmp_path, system=tmp_path / "nosys")
    got = roles_path(cfg, bundled_roles=tmp_path / "bundle" / "roles", environ={})
    assert got.split(":") == [str(tmp_path / "bundle" / "roles"),
                              str(tmp_path / "op" / "myroles"), "/opt/roles"]
    from_env = roles_path(cfg, bundled_roles=tmp_path / "r", environ={"ANSIBLE_ROLES_PATH": "/e"})
    assert from_env.split(":") == [str(tmp_path / "r"), "/e"]


@pytest.mark.parametrize(("env", "checked"), [
    ({}, True), ({"ANSIBLE_HOST_KEY_CHECKING": "False"}, False),
    ({"ANSIBLE_HOST_KEY_CHECKING": "0"}, False), ({"ANSIBLE_HOST_KEY_CHECKING": "yes"}, True),
])
def test_host_keys_are_checked_unless_the_environment_opts_out(
        env: dict[str, str], checked: bool) -> None:
    assert host_key_checking(env) is checked
    out, _ = playbook_env(content=content_dir(), environ=env)
    assert out["ANSIBLE_HOST_KEY_CHECKING"] == str(checked)


def _settings_in_force(tmp_path: Path) -> dict[str, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"me ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    result = run_playbook(str(FIXTURES / "playbooks" / "config_in_force.yml"), inv,
                          options=PlaybookOptions(), artifact_dir=tmp_path / "run")
    return dict(result.custom_stats)


@dataclass
class OperatorRun:
    """One run from the operator's directory `site`, whose ansible.cfg says
    host_key_checking = false, forks = 37, roles_path = siteroles, local_tmp = `lt` and
    control_path_dir = `mine`: the settings it ran with (config_in_force.yml's)."""

    stats: dict[str, object]
    cfg: Path
    site: Path
    mine: Path
    lt: Path


# Unset for the operator's run: each would win over its ansible.cfg.
OPERATOR_UNSET = ("ANSIBLE_CONFIG", "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_ROLES_PATH",
                  "ANSIBLE_SSH_CONTROL_PATH_DIR", "ANSIBLE_SSH_CONTROL_PATH",
                  "ANSIBLE_LOCAL_TEMP")


@pytest.fixture(scope="module")
def operator_run(tmp_path_factory: pytest.TempPathFactory) -> OperatorRun:
    """Read by the host-key test, the operator's-config test and the control-path test:
    each asserts its own settings of the one ansible.cfg."""
    tmp = tmp_path_factory.mktemp("operator")
    site, mine, lt = tmp / "site", tmp / "cp", tmp / "lt"
    cfg = _cfg(site / "ansible.cfg",
               "[defaults]\nhost_key_checking = false\nforks = 37\nroles_path = siteroles\n"
               f"local_tmp = {lt}\n[ssh_connection]\ncontrol_path_dir = {mine}\n")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(site)
        for var in OPERATOR_UNSET:
            monkeypatch.delenv(var, raising=False)
        stats = _settings_in_force(tmp / "run")
    return OperatorRun(stats, cfg, site, mine, lt)


def test_ansible_playbook_checks_host_keys_even_though_ansible_runner_turns_it_off(
        operator_run: OperatorRun) -> None:
    # The operator's own config even says false: only the environment opts out.
    assert operator_run.stats["host_key_checking"] is True


def test_ansible_playbook_reads_the_operators_ansible_cfg(operator_run: OperatorRun) -> None:
    stats = operator_run.stats
    assert stats["config_file"] == str(operator_run.cfg)
    assert stats["forks_from_cfg"] == 37
    roles = [str(p) for p in stats["roles_path"]]  # type: ignore[attr-defined]
    assert roles[:2] == [str(content_dir() / "roles"), str(operator_run.site / "siteroles")]


def test_each_run_has_ssh_master_connections_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ansible's ControlPath is keyed on host, port and user only, in ~/.ansible/cp by
    default: a run would ride a master connection an earlier run opened with other SSH
    settings (another ProxyJump, known_hosts, host key). Each run gets its own."""
    monkeypatch.chdir(tmp_path)
    for var in ("ANSIBLE_CONFIG", "ANSIBLE_SSH_CONTROL_PATH_DIR", "ANSIBLE_SSH_CONTROL_PATH"):
        monkeypatch.delenv(var, raising=False)
    first = str(_settings_in_force(tmp_path / "a")["ssh_control_path_dir"])
    second = str(_settings_in_force(tmp_path / "b")["ssh_control_path_dir"])
    assert first != second
    assert "nodetune-cp-" in first and ".ansible/cp" not in first
    assert not Path(first).exists() and not Path(second).exists()  # removed after the run


def test_the_operators_control_path_dir_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operator_run: OperatorRun) -> None:
    assert operator_run.stats["ssh_control_path_dir"] == str(operator_run.mine)
    monkeypatch.chdir(operator_run.site)
    for var in OPERATOR_UNSET:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANSIBLE_SSH_CONTROL_PATH_DIR", str(tmp_path / "env-cp"))
    assert _settings_in_force(tmp_path / "b")["ssh_control_path_dir"] == str(tmp_path / "env-cp")


def test_each_run_has_a_local_tmp_of_its_own_gone_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ansible removes its local_tmp (default ~/.ansible/tmp/ansible-local-*) only when it
    exits by itself; a run nodetune stops (Ctrl-C, --timeout: ansible-runner kills its
    group) would leave it in the operator's home. Each run's is in the run's own directory,
    which nodetune removes however the run ends."""
    monkeypatch.chdir(tmp_path)
    for var in ("ANSIBLE_CONFIG", "ANSIBLE_LOCAL_TEMP"):
        monkeypatch.delenv(var, raising=False)
    used = Path(str(_settings_in_force(tmp_path / "a")["local_tmp"]))
    assert used.name.startswith("ansible-local-") and used.parent.name == "local"
    assert used.parent.parent.name.startswith("nodetune-runner-"), used
    assert not used.parent.parent.exists()  # removed after the run


def test_the_operators_local_tmp_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operator_run: OperatorRun) -> None:
    assert Path(str(operator_run.stats["local_tmp"])).parent == operator_run.lt
    monkeypatch.chdir(operator_run.site)
    for var in OPERATOR_UNSET:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "env-lt"))
    used = Path(str(_settings_in_force(tmp_path / "b")["local_tmp"]))
    assert used.parent == tmp_path / "env-lt"
