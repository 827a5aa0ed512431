"""``validate --image BUNDLE --launcher slurm`` through Slurm's own OCI support, in the
lab's real Slurm (Debian's slurmd 22.05) and Debian's ``crun`` (a real apt install).

Each compute node gets an OCI bundle made from its own root filesystem (as
test_image.py makes its podman image: the node's Python and libraries, without torch),
with the lab's shared torch venv bind-mounted read-only and ``/tmp`` (where the run's
directory lies) bound in; host network and IPC, as Slurm's containers guide asks
("Custom container networks are not supported"). A second bundle keeps ``crun spec``'s
default 64 MB ``/dev/shm``. Slurm's ``oci.conf`` (22.05 keys: ``RunTimeQuery``,
``RunTimeKill``, ``RunTimeDelete``, ``RunTimeRun``, with Slurm's ``%n.%u.%j.%s.%t``
container id pattern; Slurm's oci.conf(5) and containers guide, read 2026-11-27) is
written beside slurm.conf and slurmd restarted; all of it is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune import records
from nodetune.ansible.inventory import load
from nodetune.lab import nodes as lab_mod
from nodetune.lab import slurm as lab_slurm
from tests.integration.leftovers import leftovers

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--profile", "lab-gloo", "--sizes", "1M:4M", "--iters", "5", "--warmup", "1",
        "--timeout", "90", "--launcher", "slurm"]
BUNDLE = "/srv/nodetune-bundle"
CRUN = "crun --root=/run/nodetune-crun"
SETUP = (Path(__file__).with_name("oci_bundle.sh")).read_text()
UNDO = (f"rm -rf {BUNDLE} {BUNDLE}-shm64 /etc/slurm/oci.conf /run/nodetune-crun; "
        "systemctl restart slurmd")


def _sh(node: str, script: str) -> str:
    proc = subprocess.run(["podman", "exec", node, "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=600)
    assert proc.returncode == 0, f"{node}: {proc.stderr}"
    return proc.stdout.strip()


def _idle(ctl: str, nodes: tuple[str, ...]) -> None:
    """Wait for slurmd to register again after its restart (sinfo: idle)."""
    deadline = 60
    for _ in range(deadline * 2):
        states = lab_slurm.sinfo(ctl)
        if all(states[n].state.startswith("idle") for n in nodes if n in states):
            return
        subprocess.run(["sleep", "0.5"], check=True)
    raise AssertionError(f"slurmd did not come back idle: {lab_slurm.sinfo(ctl)}")


@pytest.fixture(scope="module")
def olab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three lab nodes with torch and Slurm; crun, the bundles and oci.conf on the two
    compute nodes. Everything is removed, and the lab's size restored, afterwards."""
    before = len([n for n in lab_mod.status(lab.root).nodes if n.state == "running"])
    lab_mod.up(lab.root, nodes=3, with_torch=True, with_slurm=True)
    names = tuple(h.name for h in load(lab.inventory).hosts)
    ctl, nodes = names[0], names[1:]
    root = tmp_path_factory.mktemp("slurm-image")
    inv = root / "inventory"
    shutil.copytree(Path(lab.inventory), inv)
    target = inv / "group_vars" / "gpu_nodes.yml"
    assert not target.exists()
    target.write_text("nodetune_container_runtime: oci\n"
                      "nodetune_container_python: /opt/nodetune-shared/venv/bin/python\n")
    try:
        for node in nodes:
            _sh(node, SETUP + "\nsystemctl restart slurmd\n")
        _idle(ctl, nodes)
        yield {"inventory": inv, "ctl": ctl, "nodes": nodes, "runs": root / "runs"}
    finally:
        for node in nodes:
            subprocess.run(["podman", "exec", node, "sh", "-c", UNDO], check=False,
                           timeout=120)
        lab_mod.up(lab.root, nodes=max(2, before), shrink=True, with_torch=True,
                   with_slurm=True)


def validate(olab: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [str(NODETUNE), "validate", str(olab["inventory"]), "--limit", ",".join(olab["nodes"]),
         *FAST, *args, "--json"], capture_output=True, text=True, timeout=600, cwd=REPO,
        check=False, env={**os.environ, records.RUNS_ENV: str(olab["runs"])})
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def nothing_left(olab: dict[str, Any]) -> None:
    """No job or step in squeue, no worker or run dir, no crun container on any node."""
    listed = subprocess.run(["podman", "exec", olab["ctl"], "squeue", "-h", "-s"],
                            capture_output=True, text=True, check=True, timeout=60).stdout
    assert listed.strip() == ""
    assert leftovers(olab["nodes"]) == {}
    for node in olab["nodes"]:
        assert _sh(node, f"{CRUN} list -q 2>/dev/null; true") == ""


def test_oci_bundle_gives_the_bare_verdict_and_names_the_image(olab: dict[str, Any]) -> None:
    code, bare, err = validate(olab)
    assert code == 0, err
    code, boxed, err = validate(olab, "--image", BUNDLE)
    assert code == 0, err
    assert boxed["status"] == bare["status"] == "pass"
    assert {n: v["verdict"] for n, v in boxed["nodes"].items()} == {
        n: v["verdict"] for n, v in bare["nodes"].items()} == dict.fromkeys(olab["nodes"], "good")
    assert all(s["wrong"] == 0 for s in boxed["result"]["sizes"])
    steps = [s["name"] for s in boxed["slurm_job"]["steps"]]
    assert steps[:2] == ["nodetune-probe", "nodetune-probe-image"]
    assert any(s.startswith("nodetune-pair-") for s in steps)
    assert set(boxed["container"]) == set(olab["nodes"])
    for node in boxed["container"].values():
        assert node["runtime"] == "oci" and node["image"] == BUNDLE
        assert node["digest"].startswith("sha256:") and node["torch"].startswith("2.")
        assert node["shm"] == "1.0 GiB"  # the node's own, bound in
        assert {r["name"]: r["status"] for r in node["checks"]}["container.shm"] == "pass"
    nothing_left(olab)


def test_small_shm_fails_named_and_a_missing_bundle_is_exit_3(olab: dict[str, Any]) -> None:
    code, doc, err = validate(olab, "--image", f"{BUNDLE}-shm64")
    assert code == 1, err
    assert doc["status"] == "fail" and doc["error"]["host"] in olab["nodes"]
    assert "/dev/shm inside the container is 64.0 MiB" in doc["error"]["message"]
    assert "result" not in doc  # nothing was measured
    assert {n: c["shm"] for n, c in doc["container"].items()} == dict.fromkeys(
        olab["nodes"], "64.0 MiB")  # the record keeps the checklist
    nothing_left(olab)
    code, doc, err = validate(olab, "--image", "/srv/nodetune-absent")
    assert code == 3, err
    assert doc["error"]["host"] in olab["nodes"]
    assert "OCI bundle /srv/nodetune-absent is not on the node" in doc["error"]["message"]
    nothing_left(olab)
