"""check's registry of state checks (run.STATE_CHECKS) stays complete, and a read of its own
reaches its check through the probe's generic sections without a field of Probe."""

from __future__ import annotations

import ast
from pathlib import Path

from nodetune.check import probe_parse, run

CHECK = Path(run.__file__).parent
# Check modules (a NAME and a judge) that are not state checks, and where they are judged.
NOT_STATE = {
    "dcgm": "health.judge (signals)",
    "hca_pcie": "health.judge (signals)",
    "imex": "health.judge (signals)",
    "nvlink_errors": "health.judge (signals)",
    "pcie_acs": "health.judge (signals)",
    "pcie_aer": "health.judge (signals)",
    "sxid": "health.judge (signals)",
    "xid": "health.judge (signals)",
    "nccl": "allreduce.checks (gpu.allreduce)",
    "effective": "allreduce.checks (nccl.effective)",
    "sample": "sample.start (--sample)",
    "retired_pages": "gpu.judge_probe (state, with the other GPU checks)",
    "roce_cc": "fabric.judge_probe (state, between fabric.roce and fabric.nccl)",
}


def _defines(tree: ast.Module) -> set[str]:
    """The module-level functions and assigned names of a module."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _modules() -> dict[str, set[str]]:
    return {p.stem: _defines(ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(CHECK.glob("*.py"))}


def test_every_check_module_is_a_state_check_or_named_as_not_one() -> None:
    modules = _modules()
    state = [fn.__module__.removeprefix("nodetune.check.") for fn in run.STATE_CHECKS]
    assert all(fn.__name__ == "judge_probe" for fn in run.STATE_CHECKS)
    assert len(set(state)) == len(state), "a module twice in STATE_CHECKS"
    checks = {m for m, names in modules.items() if {"NAME", "judge"} <= names}
    assert checks - set(state) - set(NOT_STATE) == set(), \
        "a check module neither in run.STATE_CHECKS nor in NOT_STATE"
    assert set(NOT_STATE) <= checks, "NOT_STATE names a module that is no check module"
    assert not set(NOT_STATE) & set(state)
    with_probe = {m for m, names in modules.items() if "judge_probe" in names}
    assert with_probe == set(state), "a judge_probe that run.STATE_CHECKS does not call"


def test_a_read_of_its_own_is_kept_as_a_section() -> None:
    parsed = probe_parse.parse("n", {
        "hostname": "n", "nvidia": {"pci_gpus": 0}, "shm": {"bytes": 1},
        "new_read": {"value": 3}, "time_sync": {"chronyc": None},
        "bad name!": {"x": 1}, "not_an_object": [1, 2], "also_not": "text"})
    assert parsed.sections == {"new_read": {"value": 3}, "time_sync": {"chronyc": None}}
    assert parsed.section("new_read") == {"value": 3}
    assert parsed.section("absent") == {}
    assert parsed.nvidia == {"pci_gpus": 0}  # a field of its own is not a section too


def test_the_state_checks_come_in_report_order() -> None:
    from nodetune.ansible.inventory import Host
    from nodetune.check.expect import expectations

    names = [r.name for r in run.judge(probe_parse.parse("n", {}), expectations(Host("n", (), {})))]
    assert names[:8] == ["gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.pcie",
                         "gpu.clocks", "gpu.nvlink", "gpu.retired_pages"]
    assert names[8:12] == ["software.torch", "software.cuda", "software.nccl", "software.shm"]
    assert names[-2:] == ["node.time_sync", "node.global_env"]
