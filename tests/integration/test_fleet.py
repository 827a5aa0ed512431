"""Fleet validation on a real four-node lab over SSH, with real faults (tc tbf, sshd stopped).

The session lab has two nodes; this module grows it to four and gives it back
as it found it, so the other integration tests keep their two-node lab.
"""

from __future__ import annotations

import importlib.resources
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from prometheus_client.parser import text_string_to_metric_families

from nodetune import records
from nodetune.ansible.inventory import load
from nodetune.lab import faults as lab_faults
from nodetune.lab import nodes as lab_mod
from tests import node_exec
from tests.cdp import Browser
from tests.conftest import sigint_default
from tests.integration.leftovers import leftovers
from tests.integration.test_report_browser import GEOMETRY

# One marker per pair and size as drawn: its colour, where it sits, its rendered size.
POINTS = """JSON.stringify({
  points: [...document.querySelectorAll('svg.plot circle')].map(c => {
    const r = c.getBoundingClientRect();
    return {fill: c.getAttribute('fill'), y: r.top + r.height / 2, w: r.width}; }),
  threshold: [...document.querySelectorAll('svg.plot line.hline')].map(
    h => h.getBoundingClientRect().top)
})"""

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
# One 16 MiB size: at 200 mbit a gloo pair measures about 0.02 GB/s there, under
# the lab-gloo profile's 0.05 GB/s; a healthy lab pair is several times above it.
FAST = ["--profile", "lab-gloo", "--sizes", "16M", "--iters", "5", "--warmup", "1",
        "--timeout", "90", "--skip-checks"]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lab4(lab: Any) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """Four running lab nodes with torch; the lab's size is restored afterwards."""
    before = len([n for n in lab_mod.status(lab.root).nodes if n.state == "running"])
    lab_mod.up(lab.root, nodes=4, with_torch=True)
    names = tuple(h.name for h in load(lab.inventory).hosts)
    assert len(names) == 4
    try:
        yield lab.inventory, names
    finally:
        for node in names:
            lab_faults.clear(node)
        lab_mod.up(lab.root, nodes=max(2, before), shrink=True, with_torch=True)


@pytest.fixture
def faults(lab4: tuple[Path, tuple[str, ...]]) -> Iterator[list[str]]:
    """Nodes a test breaks; every fault on them is cleared afterwards, pass or fail."""
    broken: list[str] = []
    yield broken
    for node in broken:
        lab_faults.clear(node)


def validate(*args: str, timeout: float = 900) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([str(NODETUNE), "validate", *args, "--json"], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_slowed_node_is_named_bad_in_two_rounds_the_rest_good(
        lab4: tuple[Path, tuple[str, ...]], faults: list[str], tmp_path: Path) -> None:
    inventory, names = lab4
    slow = names[2]
    faults.append(slow)
    lab_faults.apply(slow, "slow-link")
    junit, metrics = tmp_path / "fleet.xml", tmp_path / "fleet.prom"
    code, doc, err = validate(str(inventory), *FAST, "--seed", "1", "--junit", str(junit),
                              "--prom-textfile", str(metrics))
    assert code == 1, err
    verdicts = {n: v["verdict"] for n, v in doc["nodes"].items()}
    assert verdicts == {n: "bad" if n == slow else "good" for n in names}, doc["nodes"]
    assert "good" in doc["nodes"][slow]["reason"] and len(doc["nodes"][slow]["partners"]) == 2
    assert doc["fleet"]["rounds"] == 2 and doc["fleet"]["pair_tests"] == 4  # N/2 + 2k
    assert next(iter(doc["nodes"])) == slow  # bad first
    for pair in doc["pairs"]:
        assert pair["verdict"] == ("fail" if slow in pair["hosts"] else "pass"), pair
        assert pair["threshold_gbps"] == 0.05 and pair["sizes"][0]["bytes"] == 16 << 20
        assert (pair["busbw_gbps"] < 0.05) == (slow in pair["hosts"])
    assert leftovers(names) == {}
    check_reports(doc, slow, names, junit=junit, metrics=metrics)


def check_reports(doc: dict[str, Any], slow: str, names: tuple[str, ...], *, junit: Path,
                  metrics: Path) -> None:
    """The run's report.html (looked at in Chromium), JUnit file and metrics name ``slow``."""
    page = records.runs_dir(REPO) / doc["run_id"] / "report.html"
    with Browser(width=1200, height=900) as browser:
        browser.load(page)
        seen = json.loads(browser.evaluate(GEOMETRY))
        drawn = json.loads(browser.evaluate(POINTS))
        problems = browser.console_problems()
    assert problems == []
    # One size per pair: each pair is a marker; the slowed node's pairs (red) sit under the
    # 0.05 GB/s threshold line, the healthy ones above it.
    assert len(seen["lines"]) == len(doc["pairs"]) and seen["svg"]["w"] > 500
    points = drawn["points"]
    assert len(points) == len(doc["pairs"]) and all(p["w"] > 0 for p in points), points
    (threshold,) = drawn["threshold"]
    slow_pairs = sum(slow in p["hosts"] for p in doc["pairs"])
    assert sorted(p["y"] > threshold for p in points) == sorted(
        [True] * slow_pairs + [False] * (len(points) - slow_pairs))
    assert all((p["fill"] == "#d62728") == (p["y"] > threshold) for p in points), drawn
    rows = seen["rows"]
    assert (rows[0]["node"], rows[0]["verdict"]) == (slow, "bad")
    assert rows[0]["top"] < min(r["top"] for r in rows[1:])
    assert seen["banner"]["top"] < seen["svg"]["top"] and slow in seen["banner"]["text"]
    assert seen["scripts"] == 0 and seen["images"] == 0

    xsd = importlib.resources.files("ub_test_reports") / "schemas" / "JUnit.xsd"
    tree = etree.parse(str(junit))
    schema = etree.XMLSchema(etree.parse(str(xsd)))
    assert schema.validate(tree), schema.error_log
    suites = tree.getroot().findall("testsuite")
    node_cases = suites[0].findall("testcase")
    assert sorted(c.get("name") for c in node_cases) == sorted(names)
    failing = [c for c in node_cases if c.find("failure") is not None]
    assert [c.get("name") for c in failing] == [slow]
    assert not [c for c in node_cases if c.find("error") is not None]
    pair_failures = [c.get("name") for c in suites[1].findall("testcase")
                     if c.find("failure") is not None]
    assert pair_failures and all(slow in name for name in pair_failures)

    families = {f.name: f for f in text_string_to_metric_families(metrics.read_text())}
    healthy = {s.labels["node"]: s.value for s in families["nodetune_node_healthy"].samples}
    assert healthy == {n: 0.0 if n == slow else 1.0 for n in names}
    busbw = families["nodetune_validate_busbw_gbps"].samples
    assert {(s.labels["node"], s.labels["bytes"]) for s in busbw} >= {
        (n, str(16 << 20)) for n in names}
    assert all(s.value < 0.05 for s in busbw if slow in (s.labels["node"], s.labels["peer"]))


def test_partners_name_a_slowed_repaired_node_in_one_round(
        lab4: tuple[Path, tuple[str, ...]], faults: list[str]) -> None:
    inventory, names = lab4
    repaired = names[3]
    faults.append(repaired)
    lab_faults.apply(repaired, "slow-link")
    code, doc, err = validate(str(inventory), *FAST, "--limit", repaired,
                              "--partners", ",".join(names[:2]))
    assert code == 1, err
    assert doc["fleet"]["rounds"] == 1 and doc["fleet"]["pair_tests"] == 1
    node = doc["nodes"][repaired]
    assert node["verdict"] == "bad" and "known-good partner" in node["reason"]
    partner = node["partners"][0]
    assert partner in names[:2] and doc["nodes"][partner]["verdict"] == "good"


def test_stopped_sshd_is_unreachable_and_not_paired(
        lab4: tuple[Path, tuple[str, ...]], faults: list[str]) -> None:
    inventory, names = lab4
    down = names[1]
    faults.append(down)
    lab_faults.apply(down, "sshd-stopped")
    code, doc, err = validate(str(inventory), *FAST, "--limit", ",".join(names[:3]))
    assert code == 3, err
    assert doc["nodes"][down]["verdict"] == "unreachable"
    assert "preflight" in doc["nodes"][down]["reason"]
    assert all(down not in p["hosts"] for p in doc["pairs"])
    others = [n for n in names[:3] if n != down]
    assert [doc["nodes"][n]["verdict"] for n in others] == ["good", "good"]


def test_ctrl_c_mid_fleet_leaves_nothing_running_on_any_node(
        lab4: tuple[Path, tuple[str, ...]]) -> None:
    inventory, names = lab4
    # Large sizes so the pairs are still measuring when the interrupt comes, and a phase
    # limit past the test's own waits: on a loaded machine the first pair must not reach
    # its limit while the second is still starting.
    args = ["--profile", "lab-gloo", "--sizes", "64M", "--iters", "50", "--warmup", "1",
            "--timeout", "600", "--skip-checks", "--json"]
    proc = subprocess.Popen([str(NODETUNE), "validate", str(inventory), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(_running_workers(names)) < 4:
            assert proc.poll() is None, proc.communicate()
            time.sleep(1)
        assert len(_running_workers(names)) == 4, "the pairs never all started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "interrupted" and doc["fleet"]["interrupted"] is True
    assert all(p["reason"].startswith("interrupted") for p in doc["pairs"]), doc["pairs"]
    assert leftovers(names) == {}


def _running_workers(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if subprocess.run(
        node_exec.argv(n, "pgrep", "^nodetune-rank"),
        capture_output=True, check=False, timeout=60).returncode == 0]
