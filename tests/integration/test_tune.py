"""`nodetune tune` on the real two-node lab over real SSH, with gloo on CPU.

gloo reads no NCCL_* variable, so every setting is the same to it: the runs go as tune
orders them, are reported with their spread, and nothing is recommended.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import load
from tests.integration.test_validate import leftovers

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--sizes", "1M:4M", "--iters", "5", "--warmup", "2"]

pytestmark = pytest.mark.integration


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NODETUNE), "tune", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


@pytest.fixture(scope="module")
def pair(lab: Any) -> tuple[Path, str, str]:
    """The suite lab's inventory (``lab up --with-torch`` set nodetune_python) and its nodes."""
    inventory = Path(lab.inventory)
    hosts = load(inventory).hosts
    assert all(h.vars.get("nodetune_python") for h in hosts)
    return inventory, hosts[0].name, hosts[1].name


@pytest.fixture(scope="module")
def tuned(pair: tuple[Path, str, str], lab: Any,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str],
                                                             dict[str, Any], Path]:
    """One tune of the default against NCCL_ALGO=Ring, twice each, with --write."""
    inventory, a, b = pair
    target = tmp_path_factory.mktemp("tune") / "nccl.yml"
    proc = run_cli(str(inventory), "--pair", f"{a},{b}", "--algo", "Ring", "--repeats", "2",
                   *FAST, "--write", str(target))
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"run record: (\S+)", proc.stderr)
    assert found, proc.stderr
    record = Path(found[1])
    doc: dict[str, Any] = json.loads((record / "report.json").read_text())
    return proc, doc, target


def test_runs_are_interleaved_and_each_gets_its_settings(tuned: Any, lab: Any) -> None:
    proc, doc, _ = tuned
    assert doc["verb"] == "tune" and doc["status"] == "ok" and doc["exit_code"] == 0
    assert doc["order"] == ["default", "NCCL_ALGO=Ring", "NCCL_ALGO=Ring", "default"]
    assert [(r["repeat"], r["combo"]) for r in doc["runs"]] == [
        (0, "default"), (0, "NCCL_ALGO=Ring"), (1, "NCCL_ALGO=Ring"), (1, "default")]
    for run in doc["runs"]:
        assert run["backend"] == "gloo" and run["transport"] == "gloo/TCP"
        assert [s["bytes"] for s in run["sizes"]] == [1 << 20, 4 << 20]
        assert all(s["wrong"] == 0 and s["busbw"] > 0 for s in run["sizes"])
        for env in run["env"].values():  # the setting reaches the ranks of both nodes
            assert env.get("NCCL_ALGO") == ("Ring" if run["combo"] != "default" else None)
            assert env["GLOO_SOCKET_IFNAME"] == "eth1"
    # the stderr progress follows the same order
    started = re.findall(r"run (\d)/4 \(repeat (\d)\): (\S+)", proc.stderr)
    assert started == [("1", "1", "default"), ("2", "1", "NCCL_ALGO=Ring"),
                       ("3", "2", "NCCL_ALGO=Ring"), ("4", "2", "default")]
    assert not leftovers(lab)


def test_report_has_busbw_per_size_with_its_spread(tuned: Any) -> None:
    proc, doc, _ = tuned
    judged = {j["combo"]: j for j in doc["judged"]}
    assert set(judged) == {"default", "NCCL_ALGO=Ring"}
    for combo, j in judged.items():
        runs = [r for r in doc["runs"] if r["combo"] == combo]
        for i, s in enumerate(j["sizes"]):
            measured = sorted(r["sizes"][i]["busbw"] for r in runs)
            assert sorted(s["runs"]) == measured and len(measured) == 2
            assert s["low"] == measured[0] and s["high"] == measured[1]
            assert s["low"] <= s["median"] <= s["high"]
    assert "busbw median" in proc.stdout and "spread %" in proc.stdout
    assert re.search(r"NCCL_ALGO=Ring\s+4 MiB\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+", proc.stdout)
    assert judged["NCCL_ALGO=Ring"]["verdict"] == "not read by gloo"


def test_gloo_recommends_nothing_and_writes_nothing(tuned: Any) -> None:
    proc, doc, target = tuned
    assert doc["recommendation"]["combo"] is None
    assert "gloo" in doc["recommendation"]["reason"]
    assert doc["snippet"] is None and doc["written"] is None
    assert not target.exists()
    assert "no recommendation: measured with gloo" in proc.stdout
    assert "nccl_config_extra" not in proc.stdout


@pytest.mark.parametrize(("args", "named"), [
    (["--pair", "{a},nope"], "host 'nope' is not a node"),
    (["--pair", "{a},{b}", "--algo", "foo"], "--algo 'foo': 'foo' is not an NCCL algorithm"),
    (["--pair", "{a},{b}", "--topo-file", "/nonexistent/topo.xml"],
     "{a}: --topo-file /nonexistent/topo.xml: no readable file there"),
])
def test_bad_input_exits_2_naming_it_before_any_run(pair: tuple[Path, str, str], lab: Any,
                                                     args: list[str], named: str) -> None:
    inventory, a, b = pair
    proc = run_cli(str(inventory), *[x.format(a=a, b=b) for x in args], *FAST, "--json")
    assert proc.returncode == 2, proc.stderr
    assert named.format(a=a) in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and "runs" not in doc
    assert not leftovers(lab)


def test_write_to_an_existing_file_is_refused_before_any_run(pair: tuple[Path, str, str],
                                                              tmp_path: Path) -> None:
    inventory, a, b = pair
    target = tmp_path / "nccl.yml"
    target.write_text("kept: true\n")
    proc = run_cli(str(inventory), "--pair", f"{a},{b}", *FAST, "--write", str(target), "--json")
    assert proc.returncode == 2 and "exists; pass --force" in proc.stderr
    assert target.read_text() == "kept: true\n"
    assert "runs" not in json.loads(proc.stdout)
