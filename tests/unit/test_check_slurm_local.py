"""The node-local check Slurm runs: its configuration, its drain reasons, and who it resumes.

The checks themselves run for real on this machine through the local session
(the loopback interface's MTU is what they hold it to); Slurm's side is proven
against the lab's real slurmctld in tests/integration/test_slurm_healthcheck.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodetune.check import local
from nodetune.check import slurm_local as hc
from nodetune.check.model import NodeChecks, failed, passed
from nodetune.check.run import report_sections
from nodetune.errors import InputError
from nodetune.slurm.state import SlurmNode

MTU_FAIL = failed("fabric.mtu[eth1]", "1500", "9000", "net_mtu_interfaces (inventory)", "x")
GOOD = NodeChecks("n1", (passed("fabric.mtu[eth1]", "9000", "9000", "net_mtu_interfaces"),))
BAD = NodeChecks("n1", (MTU_FAIL,))
OURS = "nodetune healthcheck: fabric.mtu[eth1] 1500, expected 9000"
# What this program wrote before it had its own form: still its own, by drained.json's record.
LEGACY = "nodetune: fabric.mtu[eth1] 1500, expected 9000"
# Every role check but the MTU off, so that this machine's own sysctls do not decide.
ONLY_MTU = {"net_sysctl_enabled": False, "nccl_config_enabled": False,
            "roce_qos_enabled": False}


def _config(tmp_path: Path, **doc: Any) -> Path:
    base: dict[str, Any] = {"version": 1, "host": "n1", "slurm_node": "n1", "vars": {}}
    path = tmp_path / "healthcheck.json"
    path.write_text(json.dumps({**base, **doc}))
    return path


def test_reason_names_the_check_what_it_measured_and_what_was_expected() -> None:
    assert hc.drain_reason(BAD) == OURS


def test_reason_is_one_printable_line_of_at_most_255_bytes() -> None:
    hostile = failed("fabric.mtu[eth1]", "1500\nreason=x state=resume", "é" * 300, "s", "m")
    reason = hc.drain_reason(NodeChecks("n1", (hostile,)))
    assert reason.startswith("nodetune healthcheck: fabric.mtu[eth1] 1500 reason=x state=resume, expected é")
    assert "\n" not in reason and reason.endswith("...")
    assert len(reason.encode()) <= 255


def test_a_node_that_could_not_be_checked_is_drained_with_why() -> None:
    checks = NodeChecks("n1", error="the check probe failed under python3")
    assert hc.drain_reason(checks) == "nodetune healthcheck: check could not run: the check probe failed " \
        "under python3"
    assert hc.decide(checks, SlurmNode("n1", "idle"), None).action == "drain"


@pytest.mark.parametrize(("checks", "node", "owned", "action", "forget"), [
    # A failure drains a node in service, and only such a node.
    (BAD, SlurmNode("n1", "idle"), None, "drain", False),
    (BAD, SlurmNode("n1", "mixed"), None, "drain", False),
    (BAD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), None, "none", False),
    (BAD, SlurmNode("n1", "down", "Not responding"), None, "none", False),
    (BAD, SlurmNode("n1", "idle+drain+reboot_requested", "nodetune: reboot"), None, "none",
     False),
    # Our own drain keeps its reason, or takes the new one.
    (BAD, SlurmNode("n1", "idle+drain", OURS), OURS, "none", False),
    (BAD, SlurmNode("n1", "idle+drain", "nodetune healthcheck: fabric.mtu[eth1] 1400, "
                    "expected 9000"),
     "nodetune healthcheck: fabric.mtu[eth1] 1400, expected 9000", "drain", False),
    # A drain recorded in the old form is still ours: renewed in the new form, or resumed.
    (BAD, SlurmNode("n1", "idle+drain", LEGACY), LEGACY, "drain", False),
    (GOOD, SlurmNode("n1", "idle+drain", LEGACY), LEGACY, "resume", True),
    # An admin wrote over our reason: the drain is theirs now and stays.
    (BAD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), OURS, "none", True),
    # A pass resumes only the drain this program recorded.
    (GOOD, SlurmNode("n1", "idle+drain", OURS), OURS, "resume", True),
    (GOOD, SlurmNode("n1", "idle+drain", OURS), None, "none", False),
    (GOOD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), OURS, "none", True),
    (GOOD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), None, "none", False),
    (GOOD, SlurmNode("n1", "idle"), OURS, "none", True),
    (GOOD, SlurmNode("n1", "idle"), None, "none", False),
])
def test_decide(checks: NodeChecks, node: SlurmNode, owned: str | None, action: str,
                forget: bool) -> None:
    decision = hc.decide(checks, node, owned)
    assert (decision.action, decision.forget) == (action, forget), decision
    if action == "drain":
        assert decision.reason == hc.drain_reason(checks)


def test_config_missing_names_the_file_and_the_role(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.json: cannot read .*slurm_healthcheck"):
        local.load_config(tmp_path / "nope.json")


@pytest.mark.parametrize(("doc", "match"), [
    ({"version": 2}, "not a version 1"),
    ({"slurm_node": "n[1-4]"}, "slurm_node 'n\\[1-4\\]' is not a plain node name"),
    ({"host": "a b"}, "host 'a b'"),
    ({"vars": ["x"]}, "vars must be a mapping"),
    ({"connection_address": "10.0.0.1; reboot"}, "connection_address"),
])
def test_bad_config_is_refused(tmp_path: Path, doc: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        local.load_config(_config(tmp_path, **doc))


def test_bad_config_exits_2_and_touches_no_slurm(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hc, "LOCK", tmp_path / "lock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo, no scontrol: none may be needed
    code = hc.main(["--config", str(_config(tmp_path, version=7)),
                    "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("mtu", "status"), [(65536, "pass"), (9000, "fail")])
def test_node_checks_itself_with_the_same_checks_and_report(
        tmp_path: Path, mtu: int, status: str) -> None:
    """Real probe, real judgement, on this machine: the loopback interface's MTU is 65536."""
    variables = {**ONLY_MTU, "net_mtu_interfaces": [{"name": "lo", "mtu": mtu}],
                 "ansible_host": "198.51.100.7", "ansible_connection": "ssh"}
    config = local.load_config(_config(tmp_path, vars=variables))
    checks = local.check_self(config, timeout=30)
    assert checks.error is None
    assert checks.get("fabric.mtu[lo]") is not None
    assert checks.get("fabric.mtu[lo]").status.value == status  # type: ignore[union-attr]
    assert [r.name for r in checks.failures] == ([] if status == "pass" else ["fabric.mtu[lo]"])
    doc = local.report(config, checks, mode="healthcheck")
    sections = report_sections({"n1": checks})
    assert set(sections) <= set(doc)  # every section `nodetune check` writes, and the same:
    assert {k: doc[k] for k in ("checks", "nodes", "allreduce")} == \
        {k: sections[k] for k in ("checks", "nodes", "allreduce")}
    if status == "fail":
        assert hc.drain_reason(checks) == "nodetune healthcheck: fabric.mtu[lo] 65536, expected 9000"
