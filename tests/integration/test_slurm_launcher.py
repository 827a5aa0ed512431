"""``validate --launcher slurm`` in the lab's real Slurm (Debian's slurmctld/slurmd 22.05,
real munge): node 1 is the controller salloc, sbcast, srun and scancel run on; nodes 2-5
are the fleet under test, reached through slurmd only.

Proofs (issue 27): the Slurm launcher names the same node bad as the SSH launcher with
one node slowed; it works with sshd stopped on every compute node, where the SSH
launcher exits 3 naming them; Ctrl-C in the middle of a Slurm-launched fleet exits 130
with a record, an empty squeue and no worker left; an unknown partition exits 2 with
Slurm's own words and drains nothing.

And ``--image BUNDLE`` through Slurm's own OCI support (issue 31) with Debian's ``crun``
(a real apt install) on two of the nodes: an OCI bundle made from each node's own root
filesystem (as test_image.py makes its podman image: the node's Python and libraries,
without torch), the lab's shared torch venv bound in read-only and ``/tmp`` (where the
run's directory lies) bound in; host network, IPC and UTS, as Slurm's containers guide
asks ("Custom container networks are not supported"); a second bundle keeps ``crun
spec``'s default 64 MB ``/dev/shm``. Slurm's ``oci.conf`` (22.05 keys ``RunTimeQuery``,
``RunTimeKill``, ``RunTimeDelete``, ``RunTimeRun`` with Slurm's ``%n.%u.%j.%s.%t``
container id; oci.conf(5) and Slurm's containers guide, read 2026-11-27) goes beside
slurm.conf and slurmd is restarted; all of it is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune import records
from nodetune.ansible.inventory import load
from nodetune.lab import faults as lab_faults
from nodetune.lab import nodes as lab_mod
from nodetune.lab import slurm as lab_slurm
from tests import node_exec
from tests.conftest import sigint_default
from tests.integration.leftovers import leftovers

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
# One 16 MiB size: at 200 mbit a gloo pair measures about 0.02 GB/s, under lab-gloo's 0.05.
FAST = ["--profile", "lab-gloo", "--sizes", "16M", "--iters", "5", "--warmup", "1",
        "--timeout", "90", "--seed", "1"]  # --seed last: --all drops it


@pytest.fixture(scope="module")
def slab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Five lab nodes with torch and Slurm; the lab's size is restored afterwards."""
    before = len([n for n in lab_mod.status(lab.root).nodes if n.state == "running"])
    lab_mod.up(lab.root, nodes=5, with_torch=True, with_slurm=True)
    names = tuple(h.name for h in load(lab.inventory).hosts)
    assert len(names) == 5
    try:
        yield {"inventory": lab.inventory, "ctl": names[0], "nodes": names[1:],
               "runs": tmp_path_factory.mktemp("slurm-launcher-runs")}
    finally:
        for node in names:
            lab_faults.clear(node)
        lab_mod.up(lab.root, nodes=max(2, before), shrink=True, with_torch=True,
                   with_slurm=True)


def validate(slab: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [str(NODETUNE), "validate", str(slab["inventory"]), "--limit", ",".join(slab["nodes"]),
         *args, "--json"], capture_output=True, text=True, timeout=600, cwd=REPO, check=False,
        env=_env(slab))
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _env(slab: dict[str, Any]) -> dict[str, str]:
    return {**os.environ, records.RUNS_ENV: str(slab["runs"])}


def squeue(slab: dict[str, Any]) -> str:
    """Every job and every step Slurm lists (``<id> <name>`` lines; empty: none)."""
    return "\n".join(subprocess.run(
        node_exec.argv(slab["ctl"], "squeue", "-h", *steps, "-o", "%i %j"),
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        for steps in ([], ["-s"])).strip()


def verdicts(doc: dict[str, Any]) -> dict[str, str]:
    return {n: v["verdict"] for n, v in doc["nodes"].items()}


def test_the_fleets_ssh_verdicts_under_slurm_and_no_ssh_to_compute_nodes(slab: dict[str, Any]) -> None:
    """Four nodes, the third slowed, every sshd stopped: under Slurm the fleet gives the
    verdicts and the plan that test_fleet's slowed-node case proves over SSH for a fleet of
    the same shape (four nodes, the third slowed, the same sizes and seed: the third bad in
    two rounds of four pair tests, the rest good), without SSH to a compute node; over SSH
    the same nodes are unreachable. test_fleet is in the plain part (NODETUNE_TEST_PART)."""
    nodes = slab["nodes"]
    slow = nodes[2]
    lab_faults.apply(slow, "slow-link")
    try:
        for node in nodes:
            lab_faults.apply(node, "sshd-stopped")
        code, by_slurm, err = validate(slab, *FAST, "--launcher", "slurm")
        assert code == 1, err
        assert verdicts(by_slurm) == {n: "bad" if n == slow else "good" for n in nodes}, (
            by_slurm["pairs"])
        assert by_slurm["fleet"]["rounds"] == 2 and by_slurm["fleet"]["pair_tests"] == 4
        assert by_slurm["launcher"] == "slurm"
        job = by_slurm["slurm_job"]
        assert job["cancelled"] and job["controller"] == slab["ctl"]
        steps = [s for s in job["steps"] if s["name"].startswith("nodetune-pair-")]
        assert len(steps) == len(by_slurm["pairs"]) == 4
        assert all(s["step"].startswith(f"{job['job_id']}.") for s in steps)
        assert sorted(sorted(s["nodes"]) for s in steps) == sorted(
            sorted(p["hosts"]) for p in by_slurm["pairs"])
        assert squeue(slab) == "" and leftovers(nodes) == {}
        code, doc, err = validate(slab, *FAST, "--skip-checks")
        assert code == 3, err
        assert {n: v["verdict"] for n, v in doc["nodes"].items()} == dict.fromkeys(
            nodes, "unreachable")
    finally:
        for node in nodes:
            lab_faults.clear(node)


def test_ctrl_c_mid_fleet_cancels_the_job(slab: dict[str, Any]) -> None:
    nodes = slab["nodes"]
    proc = subprocess.Popen(
        [str(NODETUNE), "validate", str(slab["inventory"]), "--limit", ",".join(nodes),
         *FAST, "--sizes", "1M:64M", "--iters", "20", "--launcher", "slurm", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=_env(slab),
        preexec_fn=sigint_default)  # Ctrl-C must reach nodetune
    deadline = time.monotonic() + 180
    while "nodetune-pair" not in squeue(slab):  # a pair step is running
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["status"] == "interrupted" and doc["slurm_job"]["cancelled"], doc
    assert (slab["runs"] / doc["run_id"] / "report.json").is_file()
    assert squeue(slab) == "" and leftovers(nodes) == {}


def test_slurm_refusals_exit_2_or_3_with_slurms_words_and_drain_nothing(
        slab: dict[str, Any]) -> None:
    nodes = slab["nodes"]
    code, doc, err = validate(slab, *FAST, "--launcher", "slurm", "--partition", "nosuch",
                              "--drain", "--drain-unreachable")
    assert code == 2, err
    assert "Invalid partition name specified" in doc["error"]["message"], doc
    # A job of someone else's holds one node: the allocation is not granted in time.
    held = subprocess.run(["podman", "exec", slab["ctl"], "salloc", "--no-shell", "-N1", "-w",
                           nodes[0], "-J", "holder"], capture_output=True, text=True,
                          check=True, timeout=60)
    try:
        code, doc, err = validate(slab, *FAST, "--launcher", "slurm", "--slurm-wait", "3",
                                  "--allow-busy", "--drain", "--drain-unreachable")
        assert code == 3, err
        assert "Unable to allocate resources" in doc["error"]["message"], doc
        assert "slurm_job" not in doc and "slurm" not in doc
        assert squeue(slab).split()[1:] == ["holder"], squeue(slab)
    finally:
        subprocess.run(["podman", "exec", slab["ctl"], "scancel", "-n", "holder"],
                       check=False, timeout=60)
    state = lab_slurm.sinfo(slab["ctl"])
    assert not [n for n in nodes if "drain" in state[n].display_state.lower()], (held, state)
    assert squeue(slab) == ""


def test_all_is_one_group_across_every_node_with_either_launcher(slab: dict[str, Any]) -> None:
    nodes = slab["nodes"]
    for launcher in ("ssh", "slurm"):
        # --all takes no fleet option (--seed included): one group has no pairing
        code, doc, err = validate(slab, *FAST[:-2], "--all", "--launcher", launcher)
        assert code == 0, err
        assert doc["group"] == "all" and doc["result"]["hosts"] == list(nodes)
        assert doc["result"]["world"] == len(nodes) and doc["result"]["verdict"] == "pass"
        assert verdicts(doc) == dict.fromkeys(nodes, "good")
        if launcher == "slurm":
            (step,) = doc["slurm_job"]["steps"]
            assert sorted(step["nodes"]) == sorted(nodes) and doc["slurm_job"]["cancelled"]
    assert squeue(slab) == "" and leftovers(nodes) == {}


def check(slab: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [str(NODETUNE), "check", str(slab["inventory"]), "--limit", ",".join(slab["nodes"]),
         "--skip-allreduce", "--dcgm-level", "0", "--timeout", "90", *args, "--json"],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False, env=_env(slab))
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def failed_checks(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {n: sorted(c["name"] for c in checks if c["status"] == "fail")
            for n, checks in doc["checks"].items()}


def run(node: str, argv: list[str]) -> str:
    return subprocess.run(node_exec.argv(node, *argv), capture_output=True, text=True,
                          check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def healthcheck(slab: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The node-local check installed by apply (slurm.conf left alone) on every compute
    node, once for the module's check tests; removed afterwards."""
    nodes = slab["nodes"]
    try:
        res = subprocess.run(
            [str(NODETUNE), "apply", str(slab["inventory"]), "--limit", ",".join(nodes),
             "--playbook", "slurm_healthcheck.yml", "--json"], capture_output=True, text=True,
            timeout=900, cwd=REPO, check=False, env=_env(slab))
        assert res.returncode == 0, res.stderr[-3000:]
        yield slab
    finally:
        for node in nodes:
            subprocess.run(node_exec.argv(node, "rm", "-rf", "/etc/nodetune"), check=False,
                           timeout=60)


def test_check_in_one_srun_step_gives_the_ssh_verdicts_and_names_a_drifted_mtu(
        healthcheck: dict[str, Any]) -> None:
    """The node-local check runs on every node in one step of one exclusive job, with sshd
    stopped on every compute node."""
    slab = healthcheck
    nodes = slab["nodes"]
    drifted = nodes[1]
    mtu = run(drifted, ["cat", "/sys/class/net/eth1/mtu"]).strip()
    run(drifted, ["ip", "link", "set", "eth1", "mtu", "1400"])
    try:
        code, by_ssh, err = check(slab)
        assert by_ssh["launcher"] == "ssh" and "slurm_job" not in by_ssh
        for node in nodes:
            lab_faults.apply(node, "sshd-stopped")
        slurm_code, by_slurm, err = check(slab, "--launcher", "slurm")
        assert slurm_code == code == 1, (by_ssh.get("nodes"), by_slurm.get("error"),
                                         by_slurm.get("nodes"), err[-2000:])
        assert verdicts(by_slurm) == verdicts(by_ssh)
        assert failed_checks(by_slurm) == failed_checks(by_ssh)
        assert verdicts(by_slurm)[drifted] == "bad"
        (mtu_row,) = [c for c in by_slurm["checks"][drifted] if c["name"] == "fabric.mtu[eth1]"]
        assert mtu_row["status"] == "fail" and mtu_row["measured"] == "1400", mtu_row
        job = by_slurm["slurm_job"]
        (step,) = [s for s in job["steps"] if s["name"] == "nodetune-check"]
        assert sorted(step["nodes"]) == sorted(nodes) and step["step"].startswith(
            f"{job['job_id']}.")
        assert job["cancelled"] and squeue(slab) == "" and leftovers(nodes) == {}
    finally:
        run(drifted, ["ip", "link", "set", "eth1", "mtu", mtu])
        for node in nodes:
            lab_faults.clear(node)


BUNDLE = "/srv/nodetune-bundle"
CRUN = "crun --root=/run/nodetune-crun"
OCI_SETUP = Path(__file__).with_name("oci_bundle.sh").read_text()
OCI_UNDO = (f"rm -rf {BUNDLE} {BUNDLE}-shm64 /etc/slurm/oci.conf /run/nodetune-crun; "
            "systemctl restart slurmd")
IMAGE_FAST = ["--profile", "lab-gloo", "--sizes", "1M:4M", "--iters", "5", "--warmup", "1",
              "--timeout", "90", "--launcher", "slurm"]


def _sh(node: str, script: str) -> str:
    proc = subprocess.run(node_exec.argv(node, "sh", "-c", script), capture_output=True,
                          text=True, check=False, timeout=600)
    assert proc.returncode == 0, f"{node}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def olab(slab: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """crun, the two bundles and oci.conf on two of the nodes (the pair); an inventory
    with ``nodetune_container_runtime: oci``. All of it is removed afterwards."""
    nodes = slab["nodes"][:2]
    inv = slab["runs"].parent / "oci-inventory"
    shutil.copytree(Path(slab["inventory"]), inv)
    target = inv / "group_vars" / "gpu_nodes.yml"
    assert not target.exists()
    target.write_text("nodetune_container_runtime: oci\n"
                      "nodetune_container_python: /opt/nodetune-shared/venv/bin/python\n")
    try:
        for node in nodes:
            _sh(node, OCI_SETUP + "\nsystemctl restart slurmd\n")
        deadline = time.monotonic() + 60
        while not all(lab_slurm.sinfo(slab["ctl"])[n].state.startswith("idle")
                      for n in nodes):
            assert time.monotonic() < deadline, lab_slurm.sinfo(slab["ctl"])
            time.sleep(0.5)
        yield {**slab, "nodes": nodes, "inventory": inv}
    finally:
        for node in nodes:
            subprocess.run(node_exec.argv(node, "sh", "-c", OCI_UNDO), check=False,
                           timeout=120)


def validate_image(olab: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [str(NODETUNE), "validate", str(olab["inventory"]), "--limit", ",".join(olab["nodes"]),
         *IMAGE_FAST, *args, "--json"], capture_output=True, text=True, timeout=600, cwd=REPO,
        check=False, env=_env(olab))
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def nothing_left(olab: dict[str, Any]) -> None:
    """No job or step in squeue, no worker or run dir, no crun container on any node."""
    assert squeue(olab) == ""
    assert leftovers(olab["nodes"]) == {}
    for node in olab["nodes"]:
        assert _sh(node, f"{CRUN} list -q 2>/dev/null; true") == ""


def test_oci_bundle_gives_the_bare_verdict_and_names_the_image(olab: dict[str, Any]) -> None:
    code, bare, err = validate_image(olab)
    assert code == 0, err
    code, boxed, err = validate_image(olab, "--image", BUNDLE)
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
    code, doc, err = validate_image(olab, "--image", f"{BUNDLE}-shm64")
    assert code == 1, err
    assert doc["status"] == "fail" and doc["error"]["host"] in olab["nodes"]
    assert "/dev/shm inside the container is 64.0 MiB" in doc["error"]["message"]
    assert "result" not in doc  # nothing was measured
    assert {n: c["shm"] for n, c in doc["container"].items()} == dict.fromkeys(
        olab["nodes"], "64.0 MiB")  # the record keeps the checklist
    nothing_left(olab)
    code, doc, err = validate_image(olab, "--image", "/srv/nodetune-absent")
    assert code == 3, err
    assert doc["error"]["host"] in olab["nodes"]
    assert "OCI bundle /srv/nodetune-absent is not on the node" in doc["error"]["message"]
    nothing_left(olab)


def own_failures(doc: dict[str, Any], node: str) -> list[str]:
    return [n for n in failed_checks(doc)[node] if not n.startswith("container.")]


def test_check_image_runs_the_checklist_in_the_bundle_and_drains_no_node_for_it(
        olab: dict[str, Any], healthcheck: dict[str, Any]) -> None:
    """check --image under --launcher slurm: the container checklist in the OCI bundle
    after the node-local check, in its allocation; a bundle with a 64 MB /dev/shm fails
    container.shm on both nodes, named, and --drain drains no node for it (a node is
    drained only for faults of its own: the lab's nodes are not all tuned alike)."""
    nodes = olab["nodes"]
    code, doc, err = check(olab, "--launcher", "slurm", "--image", BUNDLE)
    assert code in (0, 1) and "error" not in doc, (err[-2000:], doc.get("error"))
    for node in nodes:
        rows = {c["name"]: c for c in doc["checks"][node] if c["name"].startswith("container.")}
        assert rows["container.image"]["measured"].startswith("sha256:")
        # the SSH path's rules: torch and /dev/shm pass; no RDMA device, no NCCL (CPU torch)
        assert {n: r["status"] for n, r in rows.items()} == {
            "container.image": "pass", "container.torch": "pass", "container.shm": "pass",
            "container.rdma": "skip", "container.libibverbs": "skip", "container.nccl": "skip"}
    assert code == (1 if any(own_failures(doc, n) for n in nodes) else 0)
    steps = [s["name"] for s in doc["slurm_job"]["steps"]]
    assert steps == ["nodetune-check", "nodetune-probe", "nodetune-probe-image"], steps
    nothing_left(olab)
    try:
        code, doc, err = check(olab, "--launcher", "slurm", "--image", f"{BUNDLE}-shm64",
                               "--drain")
        assert code == 1, (err[-2000:], doc.get("error"))
        actions = {a["node"]: a for a in doc["slurm"]["actions"]}
        assert sorted(actions) == sorted(nodes), actions
        for node in nodes:
            assert "container.shm" in failed_checks(doc)[node]
            (shm,) = [c for c in doc["checks"][node] if c["name"] == "container.shm"]
            assert "/dev/shm inside the container is 64.0 MiB" in shm["message"]
            a = actions[node]
            if own_failures(doc, node):  # drained for its own faults, named alone
                assert a["action"] == "drain" and "container." not in a["reason"], a
            else:
                assert a["action"] == "skip", a
                assert "the training image's, not the node's: container.shm" in a["reason"]
        state = lab_slurm.sinfo(olab["ctl"])
        assert {n for n in nodes if "drain" in state[n].display_state.lower()} == {
            n for n in nodes if own_failures(doc, n)}, state
        nothing_left(olab)
    finally:
        for node in nodes:
            subprocess.run(["podman", "exec", olab["ctl"], "scontrol", "update",
                            f"nodename={node}", "state=resume"], check=False, timeout=60)
