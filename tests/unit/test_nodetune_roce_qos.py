"""The nodetune_roce_qos module (roce_qos role): read, compare, write; a real check mode.

Run through Ansible on this machine against a stand-in sysfs/configfs tree and the
stand-in mlnx_qos of the molecule scenario (molecule/roce_qos/mlnx_qos-standin.sh:
the real tool's `mlnx_qos -i IF` layout; no ConnectX NIC here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.plugins import collections_path

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


def _run(paths: dict[str, Path], *extra: str, **args: Any) -> dict[str, Any]:
    module_args = {"ports": [{"dev": "mlx5_0", "port": 1, "netdev": "ens1f0np0"}],
                   "trust": "dscp", "pfc_priorities": [3], "ecn_priorities": [3],
                   "rdma_cm_tos": 106, "tool": str(paths["tool"]),
                   "sysfs_root": str(paths["sys"]), "configfs_root": str(paths["cfg"]), **args}
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": collections_path(),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "MLNX_QOS_STANDIN_STATE": str(paths["state"]),
           "MLNX_QOS_STANDIN_LOG": str(paths["log"])}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,",
         "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "nodetune.cluster.nodetune_roce_qos", "-a", json.dumps(module_args), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    return dict(json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"])


def _requests(paths: dict[str, Path]) -> list[str]:
    return paths["log"].read_text().splitlines() if paths["log"].exists() else []


def _state(paths: dict[str, Path]) -> list[str]:
    ecn = [(paths["sys"] / "class/net/ens1f0np0/ecn" / point / "enable" / str(p)).read_text()
           .strip() for point in ("roce_np", "roce_rp") for p in range(8)]
    tos = paths["cfg"] / "rdma_cm/mlx5_0/ports/1/default_roce_tos"
    return ["".join(ecn), tos.read_text().strip() if tos.exists() else "absent"]


def test_check_mode_reports_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    paths = _tree(tmp_path)
    res = _run(paths, "--check", "--diff")
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


def test_applies_once_then_changes_nothing(tmp_path: Path) -> None:
    paths = _tree(tmp_path)
    first = _run(paths)
    assert first["changed"] and not first.get("failed"), first
    assert _requests(paths) == ["ens1f0np0 --trust dscp", "ens1f0np0 --pfc 0,0,0,1,0,0,0,0"]
    assert _state(paths) == ["0001000000010000", "106"]
    again = _run(paths)
    assert not again["changed"], again
    assert again["commands"] == [] and again["writes"] == []
    assert len(_requests(paths)) == 2
    checked = _run(paths, "--check")
    assert not checked["changed"], checked


def test_only_what_differs_is_set(tmp_path: Path) -> None:
    paths = _tree(tmp_path)
    _run(paths)
    res = _run(paths, pfc_priorities=[3, 4], ecn_priorities=[3, 4])
    assert res["changed"]
    assert [c[3:] for c in res["commands"]] == [["--pfc", "0,0,0,1,1,0,0,0"]]
    assert {w["path"].rsplit("/", 3)[-3] + "/" + w["path"].rsplit("/", 1)[-1]
            for w in res["writes"]} == {"roce_np/4", "roce_rp/4"}


def test_a_driver_without_the_ecn_tree_is_reported_not_written(tmp_path: Path) -> None:
    paths = _tree(tmp_path)
    shutil.rmtree(paths["sys"] / "class/net/ens1f0np0/ecn")
    res = _run(paths)
    assert not res.get("failed"), res
    assert len(res["missing"]) == 2
    assert not (paths["sys"] / "class/net/ens1f0np0/ecn").exists()


def test_a_failing_tool_fails_the_task(tmp_path: Path) -> None:
    paths = _tree(tmp_path)
    res = _run(paths, tool=str(tmp_path / "missing-tool"))
    assert res.get("failed"), res
    res = _run(paths, trust="bogus")
    assert res.get("failed") and "trust" in res["msg"], res
