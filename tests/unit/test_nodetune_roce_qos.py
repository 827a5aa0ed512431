"""The nodetune_roce_qos module (roce_qos role): read, compare, write; a real check mode.

Run through Ansible on this machine against a stand-in sysfs/configfs tree and the
stand-in mlnx_qos of the molecule scenario (molecule/roce_qos/mlnx_qos-standin.sh:
the real tool's `mlnx_qos -i IF` layout; no ConnectX NIC here).

The cases share ansible-playbook runs, in rounds: one local inventory host per case, each
with a tree, a stand-in state and log of its own (the task's environment) and its own module
arguments; a case that runs the module again (the same tree) does so in the next round.
Check mode and diff are the task's, per host (check_mode/diff keywords), as --check and
--diff would set them for a run of one.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import run_module

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "molecule" / "roce_qos" / "mlnx_qos-standin.sh"


def _tree(tmp_path: Path) -> dict[str, Path]:
    sysfs, cfg, state = tmp_path / "sys", tmp_path / "cfg", tmp_path / "standin"
    for point in ("roce_np", "roce_rp"):
        enable = sysfs / "class/net/ens1f0np0/ecn" / point / "enable"
        enable.mkdir(parents=True)
        for prio in range(8):
            (enable / str(prio)).write_text("0\n")
    (cfg / "rdma_cm").mkdir(parents=True)
    tool = tmp_path / "bin" / "mlnx_qos"
    tool.parent.mkdir()
    shutil.copy(STANDIN, tool)
    tool.chmod(0o755)
    return {"sys": sysfs, "cfg": cfg, "state": state, "tool": tool,
            "log": tmp_path / "standin.log"}


def _args(paths: dict[str, Path], **args: Any) -> dict[str, Any]:
    return {"ports": [{"dev": "mlx5_0", "port": 1, "netdev": "ens1f0np0"}],
            "trust": "dscp", "pfc_priorities": [3], "ecn_priorities": [3],
            "rdma_cm_tos": 106, "tool": str(paths["tool"]),
            "sysfs_root": str(paths["sys"]), "configfs_root": str(paths["cfg"]), **args}


def _round(tmp_path: Path,
           cases: dict[str, tuple[dict[str, Path], dict[str, Any], bool]]) -> dict[str, Any]:
    """One ansible-playbook run of the module: a host per case (its tree, its module
    arguments, whether check mode and diff); each case's own task result."""
    return run_module(tmp_path, "nodetune_roce_qos", {
        case: (args, {"environment": {"MLNX_QOS_STANDIN_STATE": str(paths["state"]),
                                      "MLNX_QOS_STANDIN_LOG": str(paths["log"])},
                      "check_mode": check, "diff": check})
        for case, (paths, args, check) in cases.items()})


def _requests(paths: dict[str, Path]) -> list[str]:
    return paths["log"].read_text().splitlines() if paths["log"].exists() else []


def _state(paths: dict[str, Path]) -> list[str]:
    ecn = [(paths["sys"] / "class/net/ens1f0np0/ecn" / point / "enable" / str(p)).read_text()
           .strip() for point in ("roce_np", "roce_rp") for p in range(8)]
    tos = paths["cfg"] / "rdma_cm/mlx5_0/ports/1/default_roce_tos"
    return ["".join(ecn), tos.read_text().strip() if tos.exists() else "absent"]


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's runs, in three rounds (three ansible-playbook runs), and what the
    stand-in saw and the trees held after each round where a test asserts on it.

    busy_apply and busy_check are a node running jobs (live false; busy_check in check
    mode); busy_apply then has a call with live (an idle node), then one with live false."""
    tmp = tmp_path_factory.mktemp("roce_qos_module")
    trees = {case: _tree(tmp / case) for case in
             ("plan", "applies", "differs", "no_ecn", "no_tool", "bogus", "busy_apply",
              "busy_check")}
    shutil.rmtree(trees["no_ecn"]["sys"] / "class/net/ens1f0np0/ecn")
    first = _round(tmp / "round1", {
        "plan": (trees["plan"], _args(trees["plan"]), True),
        "applies": (trees["applies"], _args(trees["applies"]), False),
        "differs": (trees["differs"], _args(trees["differs"]), False),
        "no_ecn": (trees["no_ecn"], _args(trees["no_ecn"]), False),
        "no_tool": (trees["no_tool"],
                    _args(trees["no_tool"], tool=str(tmp / "missing-tool")), False),
        "bogus": (trees["bogus"], _args(trees["bogus"], trust="bogus"), False),
        "busy_apply": (trees["busy_apply"], _args(trees["busy_apply"], live=False), False),
        "busy_check": (trees["busy_check"], _args(trees["busy_check"], live=False), True),
    })
    applied = {"requests": _requests(trees["applies"]), "state": _state(trees["applies"])}
    busy = {case: {"requests": _requests(trees[case]), "state": _state(trees[case])}
            for case in ("busy_apply", "busy_check")}
    second = _round(tmp / "round2", {
        "applies": (trees["applies"], _args(trees["applies"]), False),
        "differs": (trees["differs"],
                    _args(trees["differs"], pfc_priorities=[3, 4], ecn_priorities=[3, 4]),
                    False),
        "busy_apply": (trees["busy_apply"], _args(trees["busy_apply"]), False),
    })
    applied_again = {"requests": _requests(trees["applies"])}
    idle = {"requests": _requests(trees["busy_apply"]), "state": _state(trees["busy_apply"])}
    third = _round(tmp / "round3", {
        "applies": (trees["applies"], _args(trees["applies"]), True),
        "busy_apply": (trees["busy_apply"], _args(trees["busy_apply"], live=False), False),
    })
    return {"tmp": tmp, "trees": trees, "first": first, "second": second, "third": third,
            "applied": applied, "applied_again": applied_again, "busy": busy, "idle": idle}


def test_check_mode_reports_the_plan_and_changes_nothing(rounds: dict[str, Any]) -> None:
    paths, res = rounds["trees"]["plan"], rounds["first"]["plan"]
    tmp_path = paths["sys"].parent
    assert res["changed"], res
    assert [c[3:] for c in res["commands"]] == [["--trust", "dscp"],
                                                ["--pfc", "0,0,0,1,0,0,0,0"]]
    assert [w["path"].removeprefix(str(tmp_path)) for w in res["writes"]] == [
        "/sys/class/net/ens1f0np0/ecn/roce_np/enable/3",
        "/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3",
        "/cfg/rdma_cm/mlx5_0/ports/1/default_roce_tos"]
    assert "trust pcp" in res["diff"]["before"] and "trust dscp" in res["diff"]["after"]
    # Nothing set: no set-request reached the tool, no file was written.
    assert _requests(paths) == []
    assert _state(paths) == ["0" * 16, "absent"]


def test_applies_once_then_changes_nothing(rounds: dict[str, Any]) -> None:
    first = rounds["first"]["applies"]
    assert first["changed"] and not first.get("failed"), first
    assert rounds["applied"]["requests"] == ["ens1f0np0 --trust dscp",
                                             "ens1f0np0 --pfc 0,0,0,1,0,0,0,0"]
    assert rounds["applied"]["state"] == ["0001000000010000", "106"]
    again = rounds["second"]["applies"]
    assert not again["changed"], again
    assert again["commands"] == [] and again["writes"] == []
    assert len(rounds["applied_again"]["requests"]) == 2
    checked = rounds["third"]["applies"]
    assert not checked["changed"], checked


def test_only_what_differs_is_set(rounds: dict[str, Any]) -> None:
    res = rounds["second"]["differs"]
    assert res["changed"]
    assert [c[3:] for c in res["commands"]] == [["--pfc", "0,0,0,1,1,0,0,0"]]
    assert {w["path"].rsplit("/", 3)[-3] + "/" + w["path"].rsplit("/", 1)[-1]
            for w in res["writes"]} == {"roce_np/4", "roce_rp/4"}


def test_a_driver_without_the_ecn_tree_is_reported_not_written(rounds: dict[str, Any]) -> None:
    paths, res = rounds["trees"]["no_ecn"], rounds["first"]["no_ecn"]
    assert not res.get("failed"), res
    assert len(res["missing"]) == 2
    assert not (paths["sys"] / "class/net/ens1f0np0/ecn").exists()


def test_a_failing_tool_fails_the_task(rounds: dict[str, Any]) -> None:
    res = rounds["first"]["no_tool"]
    assert res.get("failed"), res
    res = rounds["first"]["bogus"]
    assert res.get("failed") and "trust" in res["msg"], res


def test_live_false_changes_nothing_and_lists_what_waits(rounds: dict[str, Any]) -> None:
    """A node running jobs: no set-request, no file written, the same in check mode; each
    change waits in `deferred` for a later call with live (the default) to make it."""
    for case in ("busy_apply", "busy_check"):
        paths, res = rounds["trees"][case], rounds["first"][case]
        assert not res["changed"] and not res.get("failed"), res
        assert res["deferred"] == [
            "ens1f0np0 trust pcp → dscp, PFC 0,0,0,0,0,0,0,0 → 0,0,0,1,0,0,0,0",
            f"{paths['sys']}/class/net/ens1f0np0/ecn/roce_np/enable/3 0 → 1",
            f"{paths['sys']}/class/net/ens1f0np0/ecn/roce_rp/enable/3 0 → 1",
            f"{paths['cfg']}/rdma_cm/mlx5_0/ports/1/default_roce_tos (absent) → 106"], res
        assert len(res["commands"]) == 2 and len(res["writes"]) == 3
        assert rounds["busy"][case]["requests"] == []
        assert rounds["busy"][case]["state"] == ["0" * 16, "absent"]
    # The next call on an idle node makes the changes that waited.
    done = rounds["second"]["busy_apply"]
    assert done["changed"] and "deferred" not in done, done
    assert rounds["idle"]["requests"] == ["ens1f0np0 --trust dscp",
                                          "ens1f0np0 --pfc 0,0,0,1,0,0,0,0"]
    assert rounds["idle"]["state"] == ["0001000000010000", "106"]
    assert rounds["third"]["busy_apply"]["deferred"] == []
