"""playbooks/inputs.yml: which roles' input checks a run selects (and records as checked)."""

from __future__ import annotations

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
