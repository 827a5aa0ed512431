"""``validate --all``: one group of every selected node, its plan, verdicts and reports."""

from __future__ import annotations

from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import plan
from nodetune.errors import InputError
from nodetune.reports import junit, model, prom
from nodetune.validate.job_wide import plan_all
from nodetune.verdicts import NodeState, group_verdicts, pair_verdicts


def host(name: str, **vars_: Any) -> Host:
    return Host(name=name, groups=("gpu_nodes",), vars={"ansible_host": f"10.0.0.{name[-1]}",
                                                        **vars_})


def test_the_group_is_every_host_in_order_rank_0_the_master() -> None:
    hosts = [host("n1"), host("n2", nodetune_python="/opt/py"), host("n3")]
    p = plan_all(hosts, plan.Options(min_busbw=1.0))
    assert [(n.name, n.rank) for n in p.nodes] == [("n1", 0), ("n2", 1), ("n3", 2)]
    assert p.nodes[1].python == "/opt/py" and p.master_addr == "10.0.0.1"
    assert p.threshold is not None and p.threshold.min_busbw_gbps == 1.0


def test_a_group_needs_two_hosts_and_good_options() -> None:
    with pytest.raises(InputError, match="at least two"):
        plan_all([host("n1")], plan.Options())
    with pytest.raises(InputError):
        plan_all([host("n1"), host("n2")], plan.Options(iters=0))


def test_a_group_names_no_culprit_unless_an_error_names_one() -> None:
    hosts = ("n1", "n2", "n3")
    good = group_verdicts(hosts, passed=True)
    assert {v.state for v in good.values()} == {NodeState.GOOD}
    assert good["n2"].partners == ("n1", "n3")
    bad = group_verdicts(hosts, passed=False, reason="busbw low")
    assert {v.state for v in bad.values()} == {NodeState.UNRESOLVED}
    assert "cannot tell which node" in bad["n1"].reason
    err = group_verdicts(hosts, passed=None, reason="unreachable", culprit="n3")
    assert err["n3"].state is NodeState.UNREACHABLE
    assert err["n1"].state is NodeState.UNRESOLVED and "n3" in err["n1"].reason


def test_a_pair_is_the_group_of_two() -> None:
    two = group_verdicts(("n1", "n2"), passed=False, reason="busbw low")
    assert two == pair_verdicts(("n1", "n2"), passed=False, reason="busbw low")
    assert two["n1"].reason.startswith("pair with n2 failed, a pair alone cannot tell")
    with pytest.raises(ValueError, match="not 3"):
        pair_verdicts(("n1", "n2", "n3"), passed=True)


def _doc() -> dict[str, Any]:
    return {"verb": "validate", "status": "pass", "exit_code": 0, "run_id": "r1",
            "result": {"hosts": ["n1", "n2", "n3"], "verdict": "pass", "reasons": [],
                       "largest_busbw_gbps": 0.3, "threshold": {"min_busbw_gbps": 0.05},
                       "sizes": [{"bytes": 4194304, "busbw": 0.3, "algbw": 0.2,
                                  "time_us": 100.0, "count": 1048576, "type": "float",
                                  "wrong": 0}],
                       "transport": {"kind": "gloo/TCP", "interfaces": ["eth1"]}}}


def test_reports_show_the_group_as_one_test_of_every_node() -> None:
    doc = _doc()
    (group,) = model.pairs_of(doc)
    assert group.hosts == ("n1", "n2", "n3") and group.name == "all of n1, n2, n3"
    assert group.peer("n2") == "all"
    assert [n.name for n in model.nodes_of(doc)] == ["n1", "n2", "n3"]
    text = prom.to_text(doc)
    peers = {s.labels["peer"] for f in prom.registry_of(doc).collect() for s in f.samples
             if s.name.startswith("nodetune_validate_busbw")}
    assert peers == {"all"}, text
    assert "all of n1, n2, n3 round 1" in junit.to_xml(doc)
