"""The Jinja test ``nodetune.cluster.node_facts_fresh``: its truth table, its reading of
``node_facts_gathered`` (the ``bool`` filter's), and each role's condition through it
against the condition it replaced, rendered by Ansible's templar over every combination."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.plugins import collection_loader, load_plugin

fresh = load_plugin("plugins/test/node_facts_fresh.py").node_facts_fresh
booleans = load_plugin("plugins/plugin_utils/booleans.py")

FACTS = {"nodetune": {"schema": 2, "pci": [], "rdma_devices": None}}


def test_fresh_only_where_the_caller_says_this_run_gathered_them() -> None:
    assert fresh(FACTS, True) and fresh(FACTS, "yes") and fresh(FACTS, "True")
    assert fresh(FACTS, 1) and fresh(FACTS, "1") and fresh(FACTS, "on")
    for gathered in (False, "no", "false", 0, "0", None, "y", "t", "", [], {}):
        assert not fresh(FACTS, gathered), gathered


def test_fresh_only_with_the_key_the_role_reads() -> None:
    assert fresh(FACTS, True, needs="pci")
    assert fresh(FACTS, True, needs="rdma_devices")  # null is there
    assert not fresh(FACTS, True, needs="nccl_conf")
    assert not fresh({}, True) and not fresh(None, True)
    assert not fresh({"nodetune": "error loading fact - output of ..."}, True, needs="pci")


@pytest.mark.parametrize(("value", "want"), [
    (1, False), (2, True), (3, True), ("2", True), ("1", False), ("2.5", True),
    (None, False), ("x", False), (2.9, True), (1.9, False)])
def test_fresh_only_with_the_layout_the_role_reads(value: object, want: bool) -> None:
    assert fresh({"nodetune": {"schema": value}}, True, schema=2) is want
    assert not fresh({"nodetune": {}}, True, schema=2)
    assert fresh({"nodetune": {}}, True, schema=0)


@pytest.mark.parametrize("value", [
    True, False, "yes", "YES", "no", "on", "off", "true", "false", "1", "0", 1, 0, 2, 1.0,
    0.0, "y", "t", "n", "", " yes", None, [], {}, ["yes"]], ids=repr)
def test_gathered_is_read_as_the_bool_filter_reads_it(value: object) -> None:
    from ansible.plugins.filter.core import to_bool

    assert booleans.filter_bool(value) is to_bool(value)


# Each role's condition as it was, and as it is through the test plugin.
CONDITIONS = {
    "needs": (
        "not node_facts_gathered | default(false) | bool"
        " or ansible_local.nodetune.pci is not defined",
        "not (ansible_local | default({}) is nodetune.cluster.node_facts_fresh("
        "node_facts_gathered | default(false), needs='pci'))"),
    "schema": (
        "not node_facts_gathered | default(false) | bool"
        " or ansible_local.nodetune.schema | default(0) | int < __facts_schema",
        "not (ansible_local | default({}) is nodetune.cluster.node_facts_fresh("
        "node_facts_gathered | default(false), schema=__facts_schema))"),
    "nccl_conf": (
        "not (node_facts_gathered | default(false) | bool"
        " and ansible_local.nodetune.nccl_conf | default(none)"
        " | nodetune.cluster.nccl_config_block_kept('/etc/nccl.conf', '# {mark} x', 'A=1',"
        " '0644', 0, 0))",
        "not (ansible_local | default({}) is nodetune.cluster.node_facts_fresh("
        "node_facts_gathered | default(false), needs='nccl_conf')"
        " and ansible_local.nodetune.nccl_conf"
        " | nodetune.cluster.nccl_config_block_kept('/etc/nccl.conf', '# {mark} x', 'A=1',"
        " '0644', 0, 0))"),
    "script": (
        "not node_facts_gathered | bool"
        " or ansible_local.nodetune.script | default(none) != __installed",
        "not (ansible_local | default({}) is nodetune.cluster.node_facts_fresh("
        "node_facts_gathered, needs='script')"
        " and ansible_local.nodetune.script == __installed)"),
}

MISSING = object()
GATHERED = [True, False, "yes", "no", "True", "1", 1, 0, MISSING]
INSTALLED = {"path": "/etc/ansible/facts.d/nodetune.fact", "mode": "0755"}
KEPT = {"path": "/etc/nccl.conf", "content": "# BEGIN x\nA=1\n# END x\n", "mode": "0644",
        "uid": 0, "gid": 0}
NODETUNE: list[Any] = [
    MISSING, "error loading fact", {}, {"pci": []}, {"pci": None}, {"schema": 1},
    {"schema": 2}, {"schema": 3}, {"schema": "2"}, {"schema": None, "pci": 1},
    {"nccl_conf": KEPT}, {"nccl_conf": {**KEPT, "mode": "0600"}}, {"nccl_conf": None},
    {"script": INSTALLED}, {"script": {**INSTALLED, "mode": "0700"}}, {"script": None}]
LOCALS = [MISSING, {}, *({"nodetune": n} for n in NODETUNE if n is not MISSING)]


def _holds(condition: str, variables: dict[str, Any]) -> bool:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    return bool(Templar(loader=DataLoader(), variables=variables)
                .evaluate_conditional(trust_as_template(condition)))


@pytest.mark.parametrize("kind", sorted(CONDITIONS))
def test_each_role_condition_keeps_its_truth_table(kind: str) -> None:
    collection_loader()
    old, new = CONDITIONS[kind]
    differ, seen = [], set()
    for gathered, local in itertools.product(GATHERED, LOCALS):
        if kind == "script" and gathered is MISSING:
            continue  # node_facts' own variable, with its role default
        variables: dict[str, Any] = {"__facts_schema": 2, "__installed": INSTALLED}
        if gathered is not MISSING:
            variables["node_facts_gathered"] = gathered
        if local is not MISSING:
            variables["ansible_local"] = local
        before = _holds(old, variables)
        seen.add(before)
        if before != _holds(new, variables):
            differ.append((gathered, local))
    assert differ == []
    assert seen == {True, False}
