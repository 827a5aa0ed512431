"""A checkout used the way Ansible users use a repository of roles: plain ansible-playbook.

From the repository root, `ansible-playbook -i INVENTORY playbooks/site.yml` resolves
`nodetune.cluster.*` through the repository's own ansible.cfg (its collections path
holds a link to the checkout), with no build, install, roles path or collections path
of the caller's. The run applies the lab and a second run changes nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.integration.conftest import Lab

REPO = Path(__file__).resolve().parents[2]
# What could make the roles resolve some other way than the checkout's ansible.cfg.
CALLER_SETTINGS = ("ANSIBLE_CONFIG", "ANSIBLE_ROLES_PATH", "ANSIBLE_COLLECTIONS_PATH",
                   "ANSIBLE_COLLECTIONS_PATHS", "DEFAULT_ROLES_PATH")


def _ansible_playbook(*argv: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in CALLER_SETTINGS}
    exe = shutil.which("ansible-playbook")
    assert exe, "ansible-playbook is not on PATH"
    return subprocess.run([exe, *argv], cwd=cwd, env={**clean, **env}, capture_output=True,
                          text=True, timeout=1500, check=False)


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    recap = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.MULTILINE):
        recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return recap


def test_site_playbook_applies_the_lab_from_the_checkout(lab: Lab) -> None:
    first = _ansible_playbook("-i", str(lab.inventory), "playbooks/site.yml")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    recap = _recap(first.stdout)
    assert set(recap) == set(lab.nodes), first.stdout[-2000:]
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recap.values()), recap
    # The roles ran from this checkout (the collection link resolves to it) and left their files.
    assert "nodetune.cluster.net_sysctl : " in first.stdout
    for node in lab.nodes:
        assert "net.core.rmem_max" in lab.sh(node, "cat", "/etc/sysctl.d/90-nodetune-net.conf")
        assert int(lab.sh(node, "stat", "-c", "%s", "/etc/nccl.conf")) > 0
    second = _ansible_playbook("-i", str(lab.inventory), "playbooks/site.yml")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    again = _recap(second.stdout)
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in again.values()), again


def test_without_the_checkouts_ansible_cfg_the_roles_do_not_resolve(lab: Lab,
                                                                     tmp_path: Path) -> None:
    # The failing variant: the same command with an empty configuration (the collections
    # path of a user's machine, without the checkout's) cannot find nodetune.cluster.
    empty = tmp_path / "ansible.cfg"
    empty.write_text("[defaults]\n")
    res = _ansible_playbook("-i", str(lab.inventory), "--syntax-check", "playbooks/site.yml",
                            ANSIBLE_CONFIG=str(empty),
                            ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    assert res.returncode != 0
    assert "nodetune.cluster" in res.stdout + res.stderr, res.stdout[-2000:] + res.stderr[-2000:]
    ok = _ansible_playbook("-i", str(lab.inventory), "--syntax-check", "playbooks/site.yml")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
