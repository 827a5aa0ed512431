"""fabric.rdma_bw end to end on the lab: `nodetune lab fault NODE rdma-port` plants a stand-in
ACTIVE RDMA port (sysfs layout) and a stand-in ib_write_bw (perftest's command line, its TCP
rendezvous between the two nodes over real SSH, its report format) on both nodes: a
container has no ConnectX NIC, so the stand-in reports the bandwidth the fault gives its
NIC. `check --rdma-peer` passes a port at full rate and fails a slow one, naming the node;
`validate --rdma-bw` reports each node's port in report.json and leaves both nodes of the
pair unresolved (a pair cannot tell which end is slow), exit 1, nothing drained."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune.lab import faults as lab_faults
from nodetune.validate.rdma import CANNOT_TELL
from tests.integration.test_validate import FAST, REPO, report_of, run_cli, validate_lab

__all__ = ["validate_lab"]  # fixtures this module uses
pytestmark = pytest.mark.integration

NAME = "fabric.rdma_bw[mlx5_0]"
NODETUNE = REPO / ".venv" / "bin" / "nodetune"


@pytest.fixture(scope="module")
def ports(lab: Any) -> Iterator[tuple[str, str]]:
    """Both lab nodes with the stand-in port and ib_write_bw at full rate; cleared after."""
    a, b = lab.nodes[0], lab.nodes[1]
    try:
        for node in (a, b):
            print(lab_faults.apply(node, "rdma-port"))
        yield a, b
    finally:
        for node in (a, b):
            print(lab_faults.apply(node, "clear"))


def left_on(lab: Any) -> dict[str, str]:
    """ib_write_bw processes or pid files left on any node."""
    found = {}
    for node in lab.nodes:
        # Two commands: a pattern in one shell line would match that shell itself.
        text = lab.sh(node, "sh", "-c", "pgrep -af '[i]b_write_bw -d' || true") + lab.sh(
            node, "sh", "-c", "ls /tmp/ | grep '^nodetune-ib_write_bw[.]' || true")
        if text.strip():
            found[node] = text
    return found


def check(lab: Any, peer: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([str(NODETUNE), "check", str(lab.inventory), "--skip-allreduce",
                           "--rdma-peer", peer, "--json"], capture_output=True, text=True,
                          timeout=300, cwd=REPO, check=False)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def failed(doc: dict[str, Any], node: str) -> set[str]:
    return {c["name"] for c in doc["checks"][node] if c["status"] == "fail"}


def test_check_rdma_peer_passes_full_rate_and_fails_a_slow_port(
        lab: Any, ports: tuple[str, str]) -> None:
    a, b = ports
    _, doc, err = check(lab, a)
    (r,) = [c for c in doc["checks"][b] if c["name"] == NAME]
    assert r["status"] == "pass", (r, err)
    assert r["measured"] == f"392 Gb/s (host memory, 65536 B, with {a})"
    assert r["expected"] == ">= 360 Gb/s (0.9 x 400)" and "Azure" in r["source"]
    before = failed(doc, b)
    try:
        print(lab_faults.apply(b, "rdma-port", rate="120gbit"))
        code, doc, err = check(lab, a)
        assert code == 1, err
        # The slow port is the one new failure, named by node, device and Gb/s.
        assert failed(doc, b) - before == {NAME}
        (r,) = [c for c in doc["checks"][b] if c["name"] == NAME]
        assert r["message"] == f"mlx5_0 to {a}: 120 Gb/s, below 360 (host memory)"
        assert doc["nodes"][b]["verdict"] == "bad"
        assert NAME in doc["nodes"][b]["details"]["failed_checks"]
    finally:
        print(lab_faults.apply(b, "rdma-port"))  # back to full rate
    assert left_on(lab) == {}


def test_validate_rdma_bw_reports_each_port_and_leaves_the_pair_unresolved(
        lab: Any, validate_lab: Path, ports: tuple[str, str]) -> None:
    a, b = ports
    print(lab_faults.apply(b, "rdma-port", rate="120gbit"))
    try:
        proc = run_cli(str(validate_lab), *FAST, "--profile", "lab-gloo", "--rdma-bw",
                       "--json")
    finally:
        print(lab_faults.apply(b, "rdma-port"))
    doc = report_of(proc)
    assert proc.returncode == 1, proc.stderr
    assert doc["result"]["verdict"] == "pass", doc["result"]  # the all_reduce itself passed
    (ra,), (rb,) = doc["rdma_bw"][a], doc["rdma_bw"][b]
    assert (ra["name"], ra["status"]) == (NAME, "pass") and f"with {b}" in ra["measured"]
    assert (rb["name"], rb["status"]) == (NAME, "fail") and rb["measured"].startswith("120 Gb/s")
    slow = (f"{b}: {NAME} 120 Gb/s (host memory, 65536 B, with {a}), expected >= 360 Gb/s "
            "(0.9 x 400)")
    assert doc["nodes"][b]["verdict"] == "unresolved"
    assert doc["nodes"][b]["reason"] == f"{slow} ({CANNOT_TELL})"
    assert doc["nodes"][a]["verdict"] == "unresolved"
    assert doc["nodes"][a]["reason"] == f"partner {slow} ({CANNOT_TELL})"
    assert doc["status"] == "fail" and doc["exit_code"] == 1
    assert left_on(lab) == {}
