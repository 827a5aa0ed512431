"""A probe that hangs or crashes gives ``unknown``, never ``pass``: the node is "not
assessed" (exit 5) and is not drained for that alone.

Faked at the hardware's edge only, and named so: a stand-in ``nvidia-smi`` (a real shell
script on PATH) that hangs with a child of its own, and one that dies of SIGSEGV; the
node probe itself runs for real, as on a node (tests/unit/test_check_probe.py's tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import (
    dcgm,
    gpu,
    gpu_read,
    nvidia_smi,
    pcie_acs,
    probe,
    slurm_decide,
    timesync,
)
from nodetune.check.expect import expectations
from nodetune.check.model import NodeChecks, Status, failed, passed, unknown
from nodetune.check.run import exit_code, judge, report_sections
from nodetune.errors import ExitCode
from nodetune.slurm.act import decide
from nodetune.slurm.model import SlurmOptions
from nodetune.slurm.state import SlurmNode
from nodetune.verdicts import NodeState
from tests.unit.test_check_probe import VARS, node, script  # noqa: F401 - node: a fixture
from tests.unit.test_slurm_policy import run_of

HANG = ('sleep 120 &\necho $! > "$CHILD_PID"\nwait\n')  # the child would outlive a plain kill
CRASH = 'kill -SEGV $$\n'


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (gone, or a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _probe_with(node: Path, body: str, timeout: float,  # noqa: F811
                budget: float = 30) -> tuple[tuple[Any, ...], float]:
    script(node / "bin" / "nvidia-smi", body)
    exp = expectations(Host("gpu-1", ("gpu_nodes",),
                            {**VARS, "nodetune_python": str(node / "bin/python-with-torch")}))
    req = {**probe.request(exp, timeout=30), "root": str(node / "node"), "timeout": timeout,
           "budget": budget}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", probe.source(), json.dumps(req)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PATH": f"{node / 'bin'}:{os.environ['PATH']}",
                              "CHILD_PID": str(node / "child.pid")})
    parsed = probe.parse("gpu-1", json.loads(out.stdout))
    return judge(parsed, exp, gpu_read.read(parsed.nvidia)), time.monotonic() - t0


def test_a_hung_nvidia_smi_leaves_the_gpu_checks_unknown_and_the_node_not_assessed(
        node: Path) -> None:  # noqa: F811
    results, took = _probe_with(node, HANG, 1.5)
    assert took < 20, took
    by = {r.name: r for r in results}
    for name in gpu.GPU_NAMES:
        assert by[name].status is Status.UNKNOWN, by[name]
        assert "nvidia-smi gave no answer within 1.5 s" in by[name].message
    assert gone(int((node / "child.pid").read_text()))
    assert by["fabric.mtu[ens1f0np0]"].status is Status.PASS  # the other reads went on
    checks = NodeChecks("gpu-1", results)
    verdict = checks.verdict()
    assert verdict.state is NodeState.NOT_ASSESSED
    assert verdict.reason.startswith(f"{len(gpu.GPU_NAMES)} check(s) not assessed: gpu.count (")
    assert verdict.to_dict()["verdict"] == "not_assessed"
    assert exit_code({"gpu-1": checks}) is ExitCode.NOT_ASSESSED
    assert report_sections({"gpu-1": checks})["summary"]["not_assessed"] == 1


def test_a_crashed_nvidia_smi_is_unknown_not_a_missing_gpu(node: Path) -> None:  # noqa: F811
    results, _ = _probe_with(node, CRASH, 10)
    count = next(r for r in results if r.name == "gpu.count")
    assert count.status is Status.UNKNOWN
    assert count.message == "could not be assessed: nvidia-smi died of signal 11"


def test_a_failure_outranks_not_assessed() -> None:
    checks = NodeChecks("n1", (unknown("gpu.count", "hung"),
                               failed("fabric.mtu[eth1]", "1500", "9000", "v", "x")))
    assert checks.verdict().state is NodeState.BAD
    assert checks.verdict().reason.endswith("; 1 not assessed")
    assert exit_code({"n1": checks}) is ExitCode.CHECK_FAILED
    ok = NodeChecks("n2", (passed("gpu.count", "8", "8", "v"),))
    assert exit_code({"n2": ok, "n3": NodeChecks("n3", (unknown("gpu.count", "x"),))}) \
        is ExitCode.NOT_ASSESSED
    assert exit_code({"n2": ok}) is ExitCode.OK


def test_dcgmi_nvlink_and_the_time_tools_hung_are_unknown() -> None:
    why = "dcgmi gave no answer within 5 s (its process group was killed)"
    res = dcgm.judge({"tool": "/usr/bin/dcgmi", "level": 1, "rc": None, "unknown": why})
    assert (res.status, res.message) == (Status.UNKNOWN, f"could not be assessed: {why}")
    smi = nvidia_smi.SmiLog("580", "13.0", ())
    assert gpu.judge_nvlink(smi, "nvidia-smi died of signal 6").status is Status.UNKNOWN
    hung = {"rc": None, "stdout": "", "stderr": "", "unknown": "chronyc gave no answer"}
    res = timesync.judge({"chronyc": "/usr/bin/chronyc", "chrony": hung}, 100.0, "limit")
    assert res.status is Status.UNKNOWN and "chronyc gave no answer" in res.message
    # A time tool that answered badly is still a warning about the clock, as before.
    said = {"rc": 1, "stdout": "", "stderr": "506 Cannot talk to daemon"}
    assert timesync.judge({"chronyc": "/usr/bin/chronyc", "chrony": said}, 100.0,
                          "limit").status is Status.WARN


NOT_ASSESSED = NodeChecks("n1", (unknown("gpu.count", "could not be assessed: nvidia-smi hung"),
                                 passed("fabric.mtu[eth1]", "9000", "9000", "v")))


def test_the_health_check_does_not_drain_a_node_not_assessed_unless_asked() -> None:
    idle = SlurmNode("n1", "idle")
    decision = slurm_decide.decide(NOT_ASSESSED, idle, None)
    assert decision.action == "none" and "not assessed (gpu.count)" in decision.reason
    asked = slurm_decide.decide(NOT_ASSESSED, idle, None, drain_unknown=True)
    assert asked.action == "drain" and asked.checks == ("gpu.count",)
    assert asked.reason == "nodetune healthcheck: gpu.count not assessed [action: re-run]"
    # A node this program drained is not resumed by a run that could not assess it.
    ours = SlurmNode("n1", "idle+drain", "nodetune healthcheck: gpu.count 7, expected 8")
    kept = slurm_decide.decide(NOT_ASSESSED, ours, ours.reason, ("gpu.count",))
    assert kept.action == "none" and not kept.forget


def test_the_controller_does_not_drain_a_node_not_assessed_unless_asked() -> None:
    verdict = NOT_ASSESSED.verdict()
    run = run_of("check")
    skip = decide(verdict, SlurmNode("n1", "idle"), SlurmOptions(drain=True), run)
    assert skip is not None and skip.action == "skip" and "--drain-unknown" in skip.reason
    drain = decide(verdict, SlurmNode("n1", "idle"),
                   SlurmOptions(drain=True, drain_unknown=True), run)
    assert drain is not None and drain.action == "drain"
    assert drain.reason.endswith("[action: re-run]")
    with pytest.raises(Exception, match="--drain-unknown qualifies --drain"):
        SlurmOptions(drain_unknown=True).check()


def test_a_hung_mlnx_qos_leaves_its_ports_unknown_not_drifted(node: Path) -> None:  # noqa: F811
    script(node / "bin" / "mlnx_qos", HANG)  # stand-in mlnx_qos that never answers
    results, _ = _probe_with(node, 'case "$1" in -q) exit 9;; esac\n', 1.5)
    roce = [r for r in results if r.name.startswith("fabric.roce[")]
    assert roce and all(r.status is Status.UNKNOWN for r in roce), roce
    assert "mlnx_qos gave no answer within 1.5 s" in roce[0].message


def test_a_hung_lspci_is_unknown() -> None:
    why = "lspci gave no answer within 15 s (its process group was killed)"
    res = pcie_acs.judge({"rc": None, "stdout": "", "stderr": why, "unknown": why})
    assert res.status is Status.UNKNOWN and res.message == f"could not be assessed: {why}"
    failed_run = pcie_acs.judge({"rc": 1, "stdout": "", "stderr": "no access"})
    assert failed_run.status is Status.SKIP  # an answer that says no is a skip, as before


def test_tools_that_hang_one_after_another_share_the_probes_budget(node: Path) -> None:  # noqa: F811
    """nvidia-smi, mlnx_qos and chronyc all hang (stand-ins): each may take its own 2 s,
    but together they get the probe's 3 s, and what comes after is not run, saying why."""
    script(node / "bin" / "mlnx_qos", HANG)
    script(node / "bin" / "chronyc", HANG)
    results, took = _probe_with(node, HANG, 2, budget=3)
    assert took < 8, took  # without the budget: 2 s per tool, six tools or more
    by = {r.name: r for r in results}
    assert "nvidia-smi gave no answer within 2 s" in by["gpu.count"].message
    assert all(r.status is Status.UNKNOWN for r in results if r.name.startswith(
        ("gpu.", "fabric.roce[", "node.time_sync")) and r.name not in ("gpu.nvlink",)), [
        (r.name, r.status) for r in results]
    assert "not run: the probe's time was spent" in by["node.time_sync"].message
