"""playbooks/inputs.yml: which roles' input checks a run selects (and records as checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins import load_plugin

select = load_plugin("plugins/filter/inputs.py").nodetune_input_roles_selected
ROLES = ["net_sysctl", "net_mtu", "roce_qos", "nccl_config"]
TAGS = {"roce_qos": ["roce_qos", "nccl_config"]}


def test_all_tags_select_every_role_not_skipped() -> None:
    assert select(ROLES, TAGS, ["all"], []) == ROLES
    assert select(ROLES, TAGS, ["all"], ["net_mtu"]) == ["net_sysctl", "roce_qos", "nccl_config"]


def test_a_tag_selects_its_role_and_roles_checked_under_it() -> None:
    assert select(ROLES, TAGS, ["net_mtu"], []) == ["net_mtu"]
    assert select(ROLES, TAGS, ["nccl_config"], []) == ["roce_qos", "nccl_config"]
    assert select(ROLES, TAGS, ["facts"], []) == []


stage_roles = load_plugin("plugins/filter/inputs.py").nodetune_stage_roles


def test_the_stage_playbooks_are_the_one_list_of_roles() -> None:
    """A role is registered by the stage play that runs it: inputs.yml's default list,
    drivers.yml's and network.yml's lists and report.yml's reboot roles all come from it.
    A role added to a stage joins the list without this test changing: the roles known
    here keep their order, and every role listed has its folder."""
    drivers = ["nvidia_driver", "nvidia_container_toolkit", "ofed"]
    known = [*drivers, *ROLES]
    every = stage_roles()
    assert [r for r in every if r in known] == known
    assert [r for r in stage_roles(["network"]) if r in known] == ROLES
    assert [r for r in stage_roles(["drivers"]) if r in known] == drivers
    assert set(stage_roles(["drivers"])) | set(stage_roles(["network"])) == set(every)
    roles = Path(__file__).resolve().parents[2] / "roles"
    assert [r for r in every if not (roles / r / "tasks" / "main.yml").is_file()] == []


def test_a_new_stage_role_is_found_and_an_unknown_stage_refused(tmp_path: Path) -> None:
    (tmp_path / "extra.yml").write_text(
        "---\n- name: Extra\n  hosts: all\n  tasks:\n"
        "    - name: Run it\n      ansible.builtin.import_role:\n"
        "        name: nodetune.cluster.net_extra\n      tags: [net_extra]\n"
        "    - name: Not a role\n      ansible.builtin.debug: {msg: x}\n")
    assert stage_roles([], str(tmp_path)) == ["net_extra"]
    with pytest.raises(ValueError, match="no stage playbook"):
        stage_roles(["missing"], str(tmp_path))
