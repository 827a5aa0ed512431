"""The nvidia_driver role's package names for every branch x flavour x Debian release.

NVIDIA's CUDA repository for Debian names the driver's packages by branch and kernel module
flavour (driver installation guide, "Kernel Modules"): up to R580 the suffixed
nvidia-open-<branch> (open) or cuda-drivers-<branch> (proprietary) with
nvidia-fabricmanager-<branch>; from R590 the unsuffixed nvidia-open / cuda-drivers /
nvidia-fabricmanager, with nvidia-driver-pinning-<branch> holding the branch. The role's
vars (vars/main.yml, vars/Debian.yml) turn the inventory into those names.

This is the whole table, one inventory host per row, in one ansible-playbook run that loads
the role's own defaults and vars files and prints what the role would install. The molecule
scenario (molecule/nvidia_driver) installs two rows of it from a stand-in repository (R580
open on Debian 12 with Fabric Manager and peermem, R595 proprietary on Debian 13), so both
flavours, both naming schemes and both Debian releases are installed for real; the rows it
does not install are proven here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins import ansible_env

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"

# host: (inventory, expected packages, pinning packages, Fabric Manager packages)
ROWS: dict[str, tuple[dict[str, Any], list[str], list[str], list[str]]] = {
    "r580_open_debian12": ({"nvidia_driver_branch": "580", "nvidia_driver_kernel_modules": "open",
                            "major": "12"},
                           ["nvidia-open-580"], [], ["nvidia-fabricmanager-580"]),
    "r580_proprietary_debian13": ({"nvidia_driver_branch": "580",
                                   "nvidia_driver_kernel_modules": "proprietary", "major": "13"},
                                  ["cuda-drivers-580"], [], ["nvidia-fabricmanager-580"]),
    "r575_open_debian13": ({"nvidia_driver_branch": "575", "nvidia_driver_kernel_modules": "open",
                            "major": "13"},
                           ["nvidia-open-575"], [], ["nvidia-fabricmanager-575"]),
    "r590_open_debian12": ({"nvidia_driver_branch": "590", "nvidia_driver_kernel_modules": "open",
                            "major": "12"},
                           ["nvidia-open"], ["nvidia-driver-pinning-590"], ["nvidia-fabricmanager"]),
    "r595_proprietary_debian13": ({"nvidia_driver_branch": "595",
                                   "nvidia_driver_kernel_modules": "proprietary", "major": "13"},
                                  ["cuda-drivers"], ["nvidia-driver-pinning-595"],
                                  ["nvidia-fabricmanager"]),
    "r595_open_debian13": ({"nvidia_driver_branch": "595", "nvidia_driver_kernel_modules": "open",
                            "major": "13"},
                           ["nvidia-open"], ["nvidia-driver-pinning-595"], ["nvidia-fabricmanager"]),
    "r620_open_debian12": ({"nvidia_driver_branch": "620", "nvidia_driver_kernel_modules": "open",
                            "major": "12"},
                           ["nvidia-open"], ["nvidia-driver-pinning-620"], ["nvidia-fabricmanager"]),
    # Debian's own packages carry no branch and no pin.
    "distro_open_debian12": ({"nvidia_driver_source": "distro", "nvidia_driver_branch": "595",
                              "nvidia_driver_kernel_modules": "open", "major": "12"},
                             ["nvidia-driver", "nvidia-open-kernel-dkms"], [],
                             ["nvidia-fabricmanager"]),
    "distro_proprietary_debian13": ({"nvidia_driver_source": "distro",
                                     "nvidia_driver_kernel_modules": "proprietary", "major": "13"},
                                    ["nvidia-driver", "nvidia-kernel-dkms"], [],
                                    ["nvidia-fabricmanager-580"]),
}

PLAY = [{
    "name": "The role's package names for this host's inventory",
    "hosts": "all", "gather_facts": False,
    "tasks": [
        {"name": "Stand in for the facts the names read (Debian, this host's release)",
         "ansible.builtin.set_fact": {"ansible_facts": {
             "os_family": "Debian", "distribution": "Debian",
             "distribution_major_version": "{{ major }}", "kernel": "6.1.0-standin"}}},
        {"name": "The role's defaults", "ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
        # The inventory outranks the role's defaults here as in a real run: include_vars
        # ranks above the inventory, so each host's own values are set again after them.
        {"name": "This host's inventory", "ansible.builtin.set_fact": {
            "nvidia_driver_branch": "{{ row.nvidia_driver_branch | default(nvidia_driver_branch) }}",
            "nvidia_driver_kernel_modules": "{{ row.nvidia_driver_kernel_modules }}",
            "nvidia_driver_source": "{{ row.nvidia_driver_source | default('cuda_repo') }}"}},
        {"name": "The role's vars", "ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
        {"name": "The role's Debian vars", "ansible.builtin.include_vars": str(ROLE / "vars" / "Debian.yml")},
        {"name": "What the role installs", "ansible.builtin.debug": {"msg": {
            "packages": "{{ __nvidia_driver_packages_effective }}",
            "pinning": "{{ __nvidia_driver_pinning_packages }}",
            "fabricmanager": "{{ __nvidia_driver_fabricmanager_packages }}"}}},
    ]}]


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("driver-packages")
    inv = tmp / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {
        host: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               "major": row["major"], "row": {k: v for k, v in row.items() if k != "major"}}
        for host, (row, *_) in ROWS.items()}}}))
    play = tmp / "names.yml"
    play.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    env = ansible_env(json_output=True)
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           str(play)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    last = json.loads(proc.stdout)["plays"][0]["tasks"][-1]["hosts"]
    return {host: last[host]["msg"] for host in ROWS}


@pytest.mark.parametrize("host", list(ROWS))
def test_package_names_follow_branch_flavour_and_source(
        host: str, names: dict[str, dict[str, Any]]) -> None:
    _, packages, pinning, fabricmanager = ROWS[host]
    assert names[host] == {"packages": packages, "pinning": pinning,
                           "fabricmanager": fabricmanager}


def test_the_molecule_scenario_installs_both_flavours_schemes_and_releases() -> None:
    """The two rows the scenario installs for real still cover what the table varies."""
    scenario = yaml.safe_load((ROOT / "molecule" / "nvidia_driver" / "molecule.yml").read_text())
    images = {p["name"]: p["image"].rsplit(":", 1)[1] for p in scenario["platforms"]}
    hosts = scenario["provisioner"]["inventory"]["host_vars"]
    installed = {(hosts[n]["nvidia_driver_kernel_modules"],
                  int(hosts[n]["nvidia_driver_branch"]) >= 590, images[n]) for n in images}
    assert {flavour for flavour, _, _ in installed} == {"open", "proprietary"}
    assert {unsuffixed for _, unsuffixed, _ in installed} == {False, True}
    assert {release for _, _, release in installed} == {"bookworm", "trixie"}
    assert any(hosts[n]["expect"]["fm"] and hosts[n]["expect"]["peermem"] for n in hosts)
    assert any(not hosts[n]["expect"]["fm"] for n in hosts)
