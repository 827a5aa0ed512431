"""Whether this run gathered the node facts is told one way: node_facts' own
``node_facts_gathered``, which the inputs pass and the stage plays set.

A role that reads ``ansible_local.nodetune`` trusts facts only where the caller says this
run gathered them (a fact cache's are from an earlier run); every such condition reads
``node_facts_gathered``, none infers it from ``nodetune_inputs_checked`` (which says the
role's input checks ran, and is passed only where a role is given no parameters).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SIGNAL = "node_facts_gathered"


def _tasks(items: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task list, those inside blocks, rescues and always included."""
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _when(task: dict[str, Any]) -> str:
    when = task.get("when", "")
    return " ".join(when) if isinstance(when, list) else str(when)


ROLE_TASKS = sorted((ROOT / "roles").glob("*/tasks/*.yml"))


def _fact_conditions() -> list[tuple[str, str, str]]:
    """(file, task, when) of each task whose condition reads the node facts."""
    out = []
    for path in ROLE_TASKS:
        for task in _tasks(yaml.safe_load(path.read_text())):
            includes = (task.get("ansible.builtin.include_role") or {}).get("name")
            when = _when(task)
            if includes == "node_facts" or "ansible_local.nodetune" in when:
                out.append((str(path.relative_to(ROOT)), str(task.get("name")), when))
    return out


def test_the_roles_that_read_node_facts_are_found() -> None:
    including = {f.split("/")[1] for f, _, w in _fact_conditions() if SIGNAL in w}
    assert {"nvidia_driver", "net_mtu", "nccl_config", "roce_qos", "ofed",
            "nvidia_container_toolkit", "node_facts"} <= including


@pytest.mark.parametrize(("path", "task", "when"), _fact_conditions(),
                         ids=lambda v: str(v)[:60])
def test_a_condition_on_node_facts_tells_their_freshness_one_way(
        path: str, task: str, when: str) -> None:
    assert "nodetune_inputs_checked" not in when, (path, task)
    if "Gather" in task:  # an include of node_facts, or node_facts' own gathering
        assert SIGNAL in when, (path, task)


@pytest.mark.parametrize("stage", ["drivers.yml", "network.yml"])
def test_the_stage_plays_say_the_inputs_pass_gathered_the_facts(stage: str) -> None:
    """Each play of a stage passes the flag as facts.yml does: set where the inputs pass
    (whose setup gathered the facts) ran on the host in this run."""
    plays = yaml.safe_load((ROOT / "playbooks" / "stages" / stage).read_text())
    facts = yaml.safe_load((ROOT / "playbooks" / "facts.yml").read_text())
    want = facts[0]["roles"][0][SIGNAL]
    assert want == "{{ __nodetune_argument_specs.roles is defined }}"
    assert plays and all(play["vars"][SIGNAL] == want for play in plays)


@pytest.mark.parametrize(("path", "task", "when"),
                         [c for c in _fact_conditions() if SIGNAL in c[2]],
                         ids=lambda v: str(v)[:60])
def test_the_roles_read_the_flag_through_the_one_test(path: str, task: str, when: str) -> None:
    """``nodetune.cluster.node_facts_fresh`` is the rule; no role writes its own copy."""
    assert "nodetune.cluster.node_facts_fresh(node_facts_gathered" in when, (path, task)
    assert f"{SIGNAL} | default(false) | bool" not in when and f"{SIGNAL} | bool" not in when
