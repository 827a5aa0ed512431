"""An action for every finding: one ladder, each failed or unknown check's action, the
node's highest, and where it shows (report.json, the terminal table, the HTML page, JUnit,
Prometheus, the Slurm drain reason).

The Xid records are in the form real nodes log them (nodetune.check.xid's docstring); the
nvidia-smi log is the real 4x H200 capture (tests/fixtures/check/h200-x4) with one GPU's
remap-failure flag set, as a GPU that failed a row remap reports it.
"""

from __future__ import annotations

import io
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nodetune.action import Action, highest
from nodetune.check import gpu, nvidia_smi, slurm_decide, xid
from nodetune.check.model import NodeChecks, Status, failed, passed, unknown, warned
from nodetune.check.run import report_sections
from nodetune.cli import check_view as cli_check
from nodetune.remote import ssh
from nodetune.reports import html, junit, prom
from nodetune.slurm.act import decide
from nodetune.slurm.model import SlurmOptions
from nodetune.slurm.state import SlurmNode
from tests.unit.test_reports_html import _Page
from tests.unit.test_slurm_policy import run_of

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x4" / "nvidia-smi-q-x.xml"
KMSG = "3,{seq},{usec},-;NVRM: Xid (PCI:0000:2b:00): {rest}"


def xid_result(*rests: str) -> Any:
    records = [KMSG.format(seq=i, usec=1_000_000 + i, rest=r) for i, r in enumerate(rests)]
    return xid.judge({"records": records, "boot_time": 1.7e9, "source": "/dev/kmsg"}, None,
                     None, "boot")


def test_the_ladder_is_ordered_and_the_highest_wins() -> None:
    assert [a.value for a in sorted(Action, key=lambda a: a.rank)] == [
        "none", "re-run", "reset-gpu", "restart-fabric-manager", "reboot", "service"]
    assert highest([Action.RERUN, Action.REBOOT, Action.RESET_GPU]) is Action.REBOOT
    assert highest([]) is Action.NONE


@pytest.mark.parametrize(("rests", "action"), [
    (["79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."], Action.REBOOT),
    (["48, pid=2187734, name=python, channel 0x00000002"], Action.RESET_GPU),
    (["54, Auxiliary power is not connected"], Action.SERVICE),
    (["154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"],
     Action.REBOOT),
    (["154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"],
     Action.RESET_GPU),
    # the highest of the events counted
    (["48, pid=1, name=python", "79, GPU has fallen off the bus."], Action.REBOOT),
])
def test_an_xid_carries_the_catalogues_immediate_action(rests: list[str],
                                                        action: Action) -> None:
    res = xid_result(*rests)
    assert res.status is Status.FAIL
    assert res.recommended is action
    assert res.to_dict()["action"] == action.value


def test_an_application_xid_warns_with_no_action() -> None:
    res = xid_result("13, Graphics Engine Exception")
    assert res.status is Status.WARN and res.recommended is Action.NONE


def _smi(failure: bool) -> nvidia_smi.SmiLog:
    tree = ET.parse(SMI)
    if failure:
        flag = tree.getroot().find("gpu/remapped_rows/remapped_row_failure")
        assert flag is not None
        flag.text = "Yes"
    return nvidia_smi.parse_smi_xml(ET.tostring(tree.getroot(), encoding="unicode"))


def test_a_failed_row_remap_is_service_and_a_clean_gpu_needs_nothing() -> None:
    res = gpu.judge_ecc(_smi(True))
    assert res.status is Status.FAIL and res.recommended is Action.SERVICE
    assert gpu.judge_ecc(_smi(False)).recommended is Action.NONE


@pytest.mark.parametrize(("result", "action"), [
    (failed("gpu.count", "3", "4", "v", "GPU 2 not seen by the driver"), Action.REBOOT),
    (failed("gpu.fabric", "inactive", "active", "v", "fabric manager down"),
     Action.RESTART_FABRIC_MANAGER),
    (failed("fabric.rdma_errors[mlx5_0/1]", "symbol_error 9", "< 10", "v", "x"),
     Action.SERVICE),
    (failed("fabric.mtu[eth1]", "1500", "9000", "v", "x"), Action.RERUN),  # configuration
    (unknown("gpu.count", "nvidia-smi hung"), Action.RERUN),
    (warned("gpu.clocks", "sw thermal", "none", "v", "x"), Action.NONE),
    (passed("gpu.count", "4", "4", "v"), Action.NONE),
])
def test_each_finding_has_an_action(result: Any, action: Action) -> None:
    assert result.recommended is action


NODES = {
    "n-bad": NodeChecks("n-bad", (failed("fabric.mtu[eth1]", "1500", "9000", "v", "mtu"),
                                  xid_result("79, GPU has fallen off the bus."))),
    "n-na": NodeChecks("n-na", (unknown("gpu.count", "could not be assessed: nvidia-smi gave "
                                        "no answer within 60 s"),)),
    "n-ok": NodeChecks("n-ok", (passed("gpu.count", "4", "4", "v"),)),
}


def record() -> dict[str, Any]:
    return {"schema_version": 1, "verb": "check", "run_id": "20261129T230000Z-check",
            "started": "2026-11-29T23:00:00+00:00", "status": "fail", "exit_code": 1,
            **report_sections(NODES)}


def test_the_node_carries_its_highest_action_into_report_json() -> None:
    doc = record()
    assert {n: v["action"] for n, v in doc["nodes"].items()} == {
        "n-bad": "reboot", "n-na": "re-run", "n-ok": "none"}
    assert {c["name"]: c["action"] for c in doc["checks"]["n-bad"]} == {
        "gpu.xid": "reboot", "fabric.mtu[eth1]": "re-run"}


def test_the_html_page_has_an_action_column_and_each_findings_action() -> None:
    page = _Page(html.render(record()))
    table = page.tables["checks"]
    col = table[0].index("action")
    assert {row[0]: row[col] for row in table[1:]} == {
        "n-bad": "reboot", "n-na": "re-run", "n-ok": "none"}
    problems = next(t for t in page.tables.values() if t and t[0][-1:] == ["action"]
                    and "check" in t[0])
    assert any(r[:3] == ["n-bad", "gpu.xid", "fail"] and r[-1] == "reboot" for r in problems)
    assert any(r[:3] == ["n-na", "gpu.count", "unknown"] and r[-1] == "re-run"
               for r in problems)
    # each action in plain words on hover, the heavy rungs in bold
    text = html.render(record())
    assert '<td class="action action-reboot" title="reboot the node">reboot</td>' in text
    assert 'title="fix what the check names and re-run it">re-run</td>' in text


def test_junit_names_the_action_and_an_unknown_check_is_an_error() -> None:
    root = ET.fromstring(junit.to_xml(record(), hostname="ci"))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    node = cases[("nodetune.check.node", "n-bad")].find("failure")
    assert node is not None and node.get("message", "").endswith("(action: reboot)")
    xid_case = cases[("nodetune.check.n-bad", "gpu.xid")].find("failure")
    assert xid_case is not None and "(action: reboot)" in xid_case.get("message", "")
    na = cases[("nodetune.check.node", "n-na")].find("error")
    assert na is not None and na.get("type") == "not_assessed"
    hung = cases[("nodetune.check.n-na", "gpu.count")].find("error")
    assert hung is not None and hung.get("type") == "unknown"
    assert "(action: re-run)" in hung.get("message", "")


def test_prometheus_exposes_the_action_rank_and_unknown() -> None:
    text = prom.to_text(record())
    assert 'nodetune_node_action{node="n-bad",verb="check"} 4.0' in text
    assert 'nodetune_node_action{node="n-na",verb="check"} 1.0' in text
    assert 'nodetune_node_action{node="n-ok",verb="check"} 0.0' in text
    assert 'nodetune_check_status{check="gpu.count",node="n-na",verb="check"} 3.0' in text


def test_the_terminal_table_has_an_action_column(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(cli_check, "out_console", Console(file=out, width=200,
                                                          color_system=None))
    cli_check.render(NODES)
    text = out.getvalue()
    header = next(ln for ln in text.splitlines() if ln.startswith("node"))
    assert header.split()[-1] == "action"
    rows = {ln.split()[0]: ln.split()[-1] for ln in text.splitlines()
            if ln.split() and ln.split()[0] in NODES}
    assert rows == {"n-bad": "reboot", "n-na": "re-run", "n-ok": "none"}
    assert "action: reboot (reboot the node)" in text
    assert "n-bad: bad action reboot:" in text
    assert "UNKNOWN n-na gpu.count" in text


def test_the_drain_reasons_end_with_the_action() -> None:
    checks = NODES["n-bad"]
    reason = slurm_decide.drain_reason(checks)
    assert reason.startswith("nodetune healthcheck: fabric.mtu[eth1] 1500, expected 9000;")
    assert reason.endswith(" [action: reboot]")
    act = decide(checks.verdict(), SlurmNode("n-bad", "idle"), SlurmOptions(drain=True),
                 run_of("check"))
    assert act is not None and act.action == "drain"
    assert act.reason.startswith("nodetune check ") and act.reason.endswith("[action: reboot]")
    assert act.command[-1].endswith('[action: reboot]') or "[action: reboot]" in " ".join(
        act.command)


def test_drain_reboot_reboots_through_slurm_only_nodes_whose_action_is_reboot() -> None:
    hostile = failed("fabric.mtu[eth1]", "1500\"; scontrol reboot ALL; echo '$(id)", "9000",
                     "v", "x")
    checks = NodeChecks("n-bad", (hostile, xid_result("79, GPU has fallen off the bus.")))
    asked = SlurmOptions(drain=True, drain_reboot=True)
    act = decide(checks.verdict(), SlurmNode("n-bad", "idle"), asked, run_of("check"))
    assert act is not None and act.action == "drain"
    assert act.command == ("scontrol", "reboot", "ASAP", "nextstate=RESUME",
                           f"reason={act.reason}", "n-bad")
    # one argument each on the controller's shell, the hostile reason included
    assert shlex.split(ssh.shell_command(act.command)) == list(act.command)
    # without the flag, or for a node whose action is not reboot: a plain drain
    plain = decide(checks.verdict(), SlurmNode("n-bad", "idle"), SlurmOptions(drain=True),
                   run_of("check"))
    assert plain is not None and plain.command[:3] == ("scontrol", "update", "nodename=n-bad")
    reset = NodeChecks("n-bad", (xid_result("48, pid=1, name=python"),))
    act = decide(reset.verdict(), SlurmNode("n-bad", "idle"), asked, run_of("check"))
    assert act is not None and act.command[:2] == ("scontrol", "update")
    with pytest.raises(Exception, match="--drain-reboot qualifies --drain"):
        SlurmOptions(drain_reboot=True).check()


def test_the_newer_signals_have_their_own_rung() -> None:
    from nodetune import action

    assert action.for_check("gpu.nvlink_errors[3]", failed=True) is Action.RESET_GPU
    assert action.for_check("gpu.sxid", failed=True) is Action.REBOOT
    assert action.for_check("gpu.retired_pages", failed=True) is Action.SERVICE
    assert action.for_check("fleet.versions", failed=True) is Action.RERUN
    assert action.for_check("gpu.sxid", failed=False) is Action.RERUN  # unknown
