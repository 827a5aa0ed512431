"""On a node Slurm has allocated, the driver-stack package installs and upgrades wait.

The roles run their package tasks in check mode there (apt-get --simulate reads the
node and changes nothing) and list what would change through the filter
nodetune_package_changes; the next run on an idle node installs. The role test runs the
nvidia_container_toolkit package task for real with this machine's own apt (Debian) on
a package its package lists carry and that is not installed: nothing is installed, the
prediction is listed. No stand-in: apt, its lists and dpkg are the real ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodetune.ansible.results import PlaybookOptions, PlaybookResult
from nodetune.ansible.runner import run_playbook
from tests.plugins import load_plugin

mod = load_plugin("plugins/filter/packages.py")

# apt-get --simulate's output for an upgrade, a new package and a removal (the lines
# ansible.builtin.apt returns as stdout in check mode).
SIMULATE = """\
Reading package lists...
Building dependency tree...
The following packages will be upgraded:
  nvidia-container-toolkit nvidia-container-toolkit-base
Inst nvidia-container-toolkit-base [1.17.8-1] (1.18.0-1 nvidia:1.0 [amd64])
Inst nvidia-container-toolkit [1.17.8-1] (1.18.0-1 nvidia:1.0 [amd64])
Inst libnvidia-container1 (1.18.0-1 nvidia:1.0 [amd64])
Inst nvidia-driver-580 [580.159.04-1] (580.95.05-1 cuda:/ [amd64])
Remv old-tool [2.0-1]
Conf nvidia-container-toolkit-base (1.18.0-1 nvidia:1.0 [amd64])
"""


def test_apt_simulation_lines_become_deferrals() -> None:
    assert mod.nodetune_package_changes(
        [{"changed": True, "stdout": SIMULATE}, {"skipped": True}], "nvidia_container_toolkit"
    ) == [
        "nvidia_container_toolkit: nvidia-container-toolkit-base 1.17.8-1 → 1.18.0-1"
        " (package upgrade)",
        "nvidia_container_toolkit: nvidia-container-toolkit 1.17.8-1 → 1.18.0-1"
        " (package upgrade)",
        "nvidia_container_toolkit: libnvidia-container1 1.18.0-1 (package install)",
        "nvidia_container_toolkit: nvidia-driver-580 580.159.04-1 → 580.95.05-1"
        " (package downgrade)",
        "nvidia_container_toolkit: old-tool 2.0-1 (package removal)",
    ]


def test_dnf_results_and_an_unpredictable_apt_are_listed() -> None:
    dnf = {"changed": True, "results": ["Installed: nvidia-container-toolkit-1.18.0-1.x86_64",
                                        "Removed: old-tool-2.0-1.x86_64"]}
    pending = {"changed": True, "pending": True,
               "invocation": {"module_args": {"name": ["nvidia-container-toolkit=1.18.0-1"]}}}
    assert mod.nodetune_package_changes([dnf, pending], "t") == [
        "t: nvidia-container-toolkit-1.18.0-1.x86_64 (package install)",
        "t: old-tool-2.0-1.x86_64 (package removal)",
        "t: nvidia-container-toolkit=1.18.0-1 (package install or upgrade; not predicted:"
        " python3-apt is not installed)"]
    # Nothing to change: nothing listed.
    assert mod.nodetune_package_changes([{"changed": False, "stdout": ""}], "t") == []


PLAY = """\
- hosts: gpu_nodes
  gather_facts: true
  tasks:
    - ansible.builtin.import_role:
        name: nodetune.cluster.nvidia_container_toolkit
        tasks_from: packages-Debian.yml
        rolespec_validate: false
- ansible.builtin.import_playbook: {report}
"""


def _absent_candidate() -> tuple[str, str]:
    """A package this machine's apt lists carry and dpkg does not have installed."""
    for name in ("hello", "cowsay", "sl", "figlet"):
        status = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", name],
                                capture_output=True, text=True, check=False)
        if "install ok installed" in status.stdout:
            continue
        policy = subprocess.run(["apt-cache", "policy", name], capture_output=True,
                                text=True, check=False).stdout
        for line in policy.splitlines():
            if line.strip().startswith("Candidate:") and "(none)" not in line:
                return name, line.split(":", 1)[1].strip()
    pytest.skip("no package in this machine's apt lists to predict an install of")


def _installed(name: str) -> bool:
    status = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", name],
                            capture_output=True, text=True, check=False)
    return "install ok installed" in status.stdout


def _busy_run(tmp_path: Path, play_text: str, given: dict[str, object], *, check: bool,
              inv: Path | None = None) -> PlaybookResult:
    """Run ``play_text`` (its ``{report}`` the package's report playbook) on this machine as
    the inventory host ``busy``, with ``given`` as extra variables."""
    from nodetune.ansible.content import content_dir

    inv = inv or tmp_path / "hosts.ini"
    inv.write_text("[gpu_nodes]\n"
                   f"busy ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    play = tmp_path / "play.yml"
    play.write_text(play_text.replace("{report}", str(content_dir() / "playbooks" / "report.yml")))
    result = run_playbook(str(play), inv, options=PlaybookOptions(
        check=check, extra_vars=(json.dumps(given),)), artifact_dir=tmp_path / "run")
    assert not result.failed_tasks, result.failed_tasks
    return result


@pytest.mark.skipif(not shutil.which("apt-get") or not Path("/usr/lib/python3/dist-packages/apt").is_dir(),
                    reason="needs a Debian machine with apt and python3-apt")
@pytest.mark.parametrize("mode", ["apply", "check-mode", "inherited-check-mode"])
def test_a_busy_node_lists_the_toolkit_install_and_installs_nothing(
        tmp_path: Path, mode: str) -> None:
    """Busy (apply, or apply --check): listed, not installed. Idle under a check mode the
    task inherits (molecule's verify imports roles with `check_mode: true`): predicted,
    not installed; a task-level `check_mode: "{{ ansible_check_mode or busy }}"` read the
    play's mode there, False, and installed for real."""
    name, version = _absent_candidate()
    inherited = mode == "inherited-check-mode"
    text = PLAY
    if inherited:
        text = text.replace("        rolespec_validate: false\n",
                            "        rolespec_validate: false\n      check_mode: true\n")
    given = {"nodetune_busy_hosts": [] if inherited else ["busy"],
             "nvidia_container_toolkit_packages": [name],
             "nvidia_container_toolkit_version": version}
    result = _busy_run(tmp_path, text, given, check=mode == "check-mode")
    if inherited:  # a change a real run would make, not made, and nothing deferred
        assert [t.host for t in result.changed_tasks if "toolkit" in t.task] == ["busy"]
        assert not result.custom_stats.get("nodetune_deferred")
    else:
        assert result.custom_stats.get("nodetune_deferred") == {
            "busy": [f"nvidia_container_toolkit: {name} {version} (package install)"]}
    assert not _installed(name)


OFED_PLAY = """\
- hosts: gpu_nodes
  gather_facts: true
  tasks:
    - ansible.builtin.import_role:
        name: nodetune.cluster.ofed
        tasks_from: setup-Debian.yml
        rolespec_validate: false
    - ansible.builtin.import_role:
        name: nodetune.cluster.ofed
        tasks_from: packages-deferred.yml
        rolespec_validate: false
- ansible.builtin.import_playbook: {report}
"""


@pytest.mark.skipif(not shutil.which("apt-get") or not Path("/usr/lib/python3/dist-packages/apt").is_dir(),
                    reason="needs a Debian machine with apt and python3-apt")
@pytest.mark.parametrize("check", [False, True], ids=["apply", "check-mode"])
def test_a_busy_node_lists_the_rdma_stack_install_and_installs_nothing(
        tmp_path: Path, check: bool) -> None:
    name, version = _absent_candidate()
    given = {"nodetune_busy_hosts": ["busy"], "ofed_source": "inbox",
             "__ofed_inbox_packages_effective": [name]}
    result = _busy_run(tmp_path, OFED_PLAY, given, check=check)
    assert result.custom_stats.get("nodetune_deferred") == {
        "busy": [f"ofed: {name} {version} (package install)"]}
    assert not _installed(name)


DCGM_PLAY = """\
- hosts: gpu_nodes
  gather_facts: true
  environment:
    STANDIN_HOST: "{{ inventory_hostname }}"
  tasks:
    - ansible.builtin.import_role:
        name: nodetune.cluster.nvidia_driver
        tasks_from: dcgm.yml
        rolespec_validate: false
- ansible.builtin.import_playbook: {report}
"""


@pytest.mark.skipif(not shutil.which("apt-get") or not Path("/usr/lib/python3/dist-packages/apt").is_dir(),
                    reason="needs a Debian machine with apt and python3-apt")
@pytest.mark.parametrize("check", [False, True], ids=["apply", "check-mode"])
def test_a_busy_node_lists_the_dcgm_install_and_neither_installs_nor_enables_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: bool) -> None:
    """nvidia_driver's DCGM step: real apt predicts the package; systemctl is the
    STAND-IN of test_defer_disruptive (no systemd here), which logs what it is asked."""
    from tests.unit.test_defer_disruptive import _calls, _site

    name, version = _absent_candidate()
    inv, log = _site(tmp_path, monkeypatch)
    given = {"nodetune_busy_hosts": ["busy"], "nvidia_driver_userspace_only": False,
             "__nvidia_driver_dcgm_packages": [name], "nvidia_driver_dcgm_version": version,
             "__nvidia_driver_repo_pending": False,
             "__nvidia_driver_probe": {"module_version": "580.95.05"}}
    result = _busy_run(tmp_path, DCGM_PLAY, given, check=check, inv=inv)
    assert result.custom_stats.get("nodetune_deferred") == {"busy": [
        f"nvidia_driver: {name} {version} (package install)",
        "nvidia_driver: start nvidia-dcgm"]}
    assert not _installed(name)
    # Nothing asked of systemd but to read the unit: no enable, no start.
    assert [line.split()[2] for line in _calls(log, "systemctl")] in ([], ["show"])
