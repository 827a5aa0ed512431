"""A controller as a new user makes it, and the roles as an Ansible collection, on the lab.

One fresh virtualenv gets `pip install .` (runtime dependencies only, so
ansible-core without any bundled collection). With it:

- the collection is built with `ansible-galaxy collection build` and installed
  into a temporary collections path;
- every playbook passes `ansible-playbook nodetune.cluster.<name> --syntax-check`;
- a user's own playbook calls two roles by FQCN against the lab, twice;
- `nodetune apply --check` from that venv predicts changes and changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import Lab

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml"))
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())

# What the user's playbook asks for: values that differ from the roles' defaults.
USER_RMEM = "4096 131072 33554432"
USER_PLAYBOOK = f"""\
---
- name: Tune the fabric with nodetune's roles
  hosts: gpu_nodes
  become: true
  roles:
    - role: nodetune.cluster.net_sysctl
      vars:
        # reno: a container may only use tcp_allowed_congestion_control (reno bbr here).
        net_sysctl_tcp_congestion_control: reno
        net_sysctl_settings_overrides:
          net.ipv4.tcp_rmem: "{USER_RMEM}"
    - role: nodetune.cluster.nccl_config
      vars:
        nccl_config_socket_ifname: "=eth1"
        nccl_config_extra:
          NCCL_DEBUG: VERSION
"""


@dataclass(frozen=True)
class Controller:
    venv: Path
    work: Path
    collections: Path
    tarball: Path

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment: no ANSIBLE_* settings of the test suite, no repository config."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV", "NODETUNE_RUNS"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}"
        env["ANSIBLE_NOCOLOR"] = "1"
        return {**env, **extra}

    def run(self, *argv: str, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=self.work, env=self.env(**extra), capture_output=True,
                              text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    work = tmp_path_factory.mktemp("controller")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(REPO)],
                         capture_output=True, text=True, timeout=900, check=False)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    dist = work / "dist"
    ctl = Controller(venv=venv, work=work, collections=work / "collections",
                     tarball=dist / f"nodetune-cluster-{GALAXY['version']}.tar.gz")
    build = ctl.run(ctl.bin("ansible-galaxy"), "collection", "build", "--output-path", str(dist),
                    str(REPO))
    assert build.returncode == 0, build.stdout + build.stderr
    # --force: ansible-galaxy skips a collection it finds anywhere on the default
    # collections path (such as a copy in ~/.ansible); this test wants the tarball's.
    install = ctl.run(ctl.bin("ansible-galaxy"), "collection", "install", "--force", "-p",
                      str(ctl.collections), str(ctl.tarball))
    assert install.returncode == 0, install.stdout + install.stderr
    yield ctl


def test_fresh_install_has_ansible_core_and_no_bundled_collections(controller: Controller) -> None:
    pkgs = json.loads(controller.run(controller.bin("pip"), "list", "--format", "json").stdout)
    names = {p["name"].lower() for p in pkgs}
    assert "ansible-core" in names and "nodetune" in names
    assert "ansible" not in names, "the ansible bundle is a dev dependency, not a runtime one"
    site = next((controller.venv / "lib").glob("python3*/site-packages"))
    assert not (site / "ansible_collections").exists()
    version = controller.run(controller.bin("nodetune"), "--version")
    assert f"roles: nodetune.cluster {GALAXY['version']}" in version.stdout, version.stderr


def test_tarball_holds_the_collection_and_nothing_else(controller: Controller) -> None:
    with tarfile.open(controller.tarball) as tar:
        names = tar.getnames()
    top = {n.split("/")[0] for n in names}
    assert {"MANIFEST.json", "FILES.json", "roles", "playbooks", "plugins", "meta",
            "README.md"} <= top
    leaked = [n for n in names if re.match(
        r"^(\.venv|\.nodetune|\.ansible|\.pytest_cache|\.mypy_cache|\.ruff_cache|\.git|"
        r"tests/(?!sanity(/|$))[^/]+|molecule|nodetune|inventory|scripts|collections|build|dist)(/|$)", n)
        or "__pycache__" in n or n.endswith((".pyc", ".tar.gz"))]
    assert not leaked, leaked
    # ansible-test sanity reads the collection's ignore files from tests/sanity/.
    assert "tests/sanity/ignore-2.19.txt" in names
    manifest = json.loads((controller.collections / "ansible_collections" / "nodetune" / "cluster"
                           / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == GALAXY["version"]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_playbook_passes_syntax_check_by_fqcn(controller: Controller, lab: Lab,
                                                    playbook: str) -> None:
    res = controller.run(controller.bin("ansible-playbook"), "-i", str(lab.inventory),
                         "--syntax-check", f"nodetune.cluster.{playbook}",
                         ANSIBLE_COLLECTIONS_PATH=str(controller.collections))
    assert res.returncode == 0, res.stdout + res.stderr


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    recap = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.MULTILINE):
        recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return recap


def test_user_playbook_runs_two_roles_by_fqcn(controller: Controller, lab: Lab) -> None:
    playbook = controller.work / "site.yml"
    playbook.write_text(USER_PLAYBOOK)
    argv = (controller.bin("ansible-playbook"), "-i", str(lab.inventory), str(playbook))
    first = controller.run(*argv, ANSIBLE_COLLECTIONS_PATH=str(controller.collections))
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    for node in lab.nodes:
        assert " ".join(lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_rmem").split()) == USER_RMEM
        assert lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_congestion_control") == "reno"
        assert f"net.ipv4.tcp_rmem = {USER_RMEM}" in lab.sh(
            node, "cat", "/etc/sysctl.d/90-nodetune-net.conf")
        nccl = lab.sh(node, "cat", "/etc/nccl.conf")
        assert "NCCL_DEBUG=VERSION" in nccl and "NCCL_SOCKET_IFNAME==eth1" in nccl
    second = controller.run(*argv, ANSIBLE_COLLECTIONS_PATH=str(controller.collections))
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    recap = _recap(second.stdout)
    assert set(recap) == set(lab.nodes), second.stdout[-2000:]
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), recap


def test_fresh_install_applies_the_lab_in_check_mode(controller: Controller, lab: Lab) -> None:
    def state(node: str) -> tuple[str, str, str]:
        return (lab.sh(node, "sha256sum", "/etc/sysctl.d/90-nodetune-net.conf", check=False),
                lab.sh(node, "sysctl", "-n", "net.ipv4.tcp_rmem"),
                lab.sh(node, "sha256sum", "/etc/nccl.conf", check=False))

    before = {node: state(node) for node in lab.nodes}
    res = controller.run(controller.bin("nodetune"), "apply", str(lab.inventory), "--check",
                         "--diff", "--json", NODETUNE_RUNS_DIR=str(controller.work / "runs"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads(res.stdout)
    assert {h["host"] for h in report["hosts"]} == set(lab.nodes)
    # The user playbook above left values the lab inventory does not ask for.
    assert all(h["changed"] >= 1 and h["failed"] == 0 for h in report["hosts"]), report["hosts"]
    assert {node: state(node) for node in lab.nodes} == before, "check mode changed a node"
