"""``validate --image`` and ``check --image`` on the real two-node lab, in nested podman.

Each lab node gets Debian's own ``podman`` package (a real install with apt, as a site
installs it) and an image made from the node's own root filesystem (``tar | podman
import``: Python, its libraries and /etc, about 85 MB, since vfs copies the image for
every container): the same Python as the node, without torch. The lab's shared torch
venv is mounted where the worker expects it (``nodetune_container_mounts``), as a site
mounts a venv or a dataset. Storage is ``vfs``: the lab node's root is itself an
overlay, on which the kernel refuses to stack another overlay mount.

Not here: a node with RDMA devices. Their argv carries ``--ulimit memlock=-1:-1``, and
podman 4.3 inside a lab node refuses any ``--ulimit`` (crun: ``setrlimit RLIMIT_NOFILE:
Operation not permitted``: it sets its default nofile/nproc beside it, above the lab
container's own hard limits); the RDMA rules are unit-tested
(tests/unit/test_validate_container.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.slow_link import SlowLink
from tests.integration.test_validate import leftovers

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--sizes", "1M:4M", "--iters", "5", "--warmup", "2", "--profile", "lab-gloo"]
IMAGE = "localhost/nodetune-lab-root:test"
VENV_MOUNT = "/opt/nodetune-shared:/opt/nodetune-shared:ro"

pytestmark = pytest.mark.integration

SETUP = f"""set -e
export DEBIAN_FRONTEND=noninteractive
command -v podman >/dev/null || {{ apt-get update -qq && \
  apt-get install -y -qq --no-install-recommends podman crun uidmap >/dev/null 2>&1; }}
mkdir -p /etc/containers
printf '[storage]\\ndriver = "vfs"\\nrunroot = "/run/containers/storage"\\n\
graphroot = "/var/lib/containers/storage"\\n' > /etc/containers/storage.conf
cd / && tar -c --exclude=test --exclude=__pycache__ --exclude='perl*' \
  etc bin sbin lib lib64 usr/bin/python3* usr/bin/dash usr/bin/sh usr/lib/python3* \
  "usr/lib/$(uname -m)-linux-gnu" usr/lib64 2>/dev/null | podman import - {IMAGE} >/dev/null
"""


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NODETUNE), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


def containers(lab: Any) -> dict[str, str]:
    """The containers any nodetune run left on each node (by its label)."""
    found = {n: lab.sh(n, "podman", "ps", "-a", "--filter", "label=nodetune.run",
                       "--format", "{{.Names}} {{.Status}}") for n in lab.nodes}
    return {n: left for n, left in found.items() if left}


def inventory(lab: Any, root: Path, **extra: str) -> Path:
    """A copy of the lab's inventory with the container variables (and ``extra``)."""
    inv = root / "inventory"
    shutil.copytree(Path(lab.inventory), inv)
    target = inv / "group_vars" / "gpu_nodes.yml"
    assert not target.exists()
    target.parent.mkdir(exist_ok=True)
    lines = ["nodetune_container_python: /opt/nodetune-shared/venv/bin/python",
             f"nodetune_container_mounts: ['{VENV_MOUNT}']",
             *(f"{k}: {v}" for k, v in extra.items())]
    target.write_text("\n".join(lines) + "\n")
    return inv


@pytest.fixture(scope="module")
def image_lab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """podman and the image on every node (both at once); the image is removed after."""
    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        list(pool.map(lambda n: lab.sh(n, "sh", "-c", SETUP), lab.nodes))
    yield lab, tmp_path_factory.mktemp("image")
    # The suite's lab goes on to other modules: leave it as it was found. podman keeps its
    # locks in /dev/shm (libpod_lock), which the later checks of /dev/shm's free space see,
    # and its units would make them again when a later test reboots the node: remove it all.
    def remove(n: str) -> None:
        lab.sh(n, "sh", "-c", "podman rm -af -t 0 >/dev/null 2>&1; "
               "podman system reset --force >/dev/null 2>&1; "
               "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq --autoremove "
               "podman crun uidmap >/dev/null 2>&1; rm -f /dev/shm/libpod*", check=False)
    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        list(pool.map(remove, lab.nodes))
    for n in lab.nodes:
        assert not lab.sh(n, "sh", "-c", "command -v podman; ls /dev/shm | grep -i libpod; "
                          "true").strip(), n


def test_image_gives_the_bare_verdicts_and_names_the_image(image_lab: Any) -> None:
    lab, root = image_lab
    inv = inventory(lab, root / "good")
    bare = run_cli("validate", str(inv), *FAST, "--json")
    boxed = run_cli("validate", str(inv), *FAST, "--image", IMAGE, "--json")
    assert bare.returncode == 0 and boxed.returncode == 0, boxed.stderr
    b, c = json.loads(bare.stdout), json.loads(boxed.stdout)
    assert c["status"] == b["status"] == "pass"
    assert {n: v["verdict"] for n, v in c["nodes"].items()} == {
        n: v["verdict"] for n, v in b["nodes"].items()} == dict.fromkeys(lab.nodes, "good")
    assert c["result"]["transport"]["kind"] == b["result"]["transport"]["kind"] == "gloo/TCP"
    assert all(s["wrong"] == 0 for s in c["result"]["sizes"])
    assert set(c["container"]) == set(lab.nodes)
    for node in c["container"].values():
        assert node["image"] == IMAGE and node["digest"].startswith("sha256:")
        assert node["torch"].startswith("2.") and node["runtime"] == "podman"
        assert node["shm"] == "1.0 GiB" and node["ipc"] == "host"  # the lab node's own
        assert {r["name"]: r["status"] for r in node["checks"]}["container.shm"] == "pass"
    assert "not in" not in boxed.stderr
    assert not containers(lab) and not leftovers(lab)


def test_default_64m_shm_fails_naming_dev_shm_and_the_node(image_lab: Any) -> None:
    lab, root = image_lab
    inv = inventory(lab, root / "shm", nodetune_container_shm_size="64m")
    proc = run_cli("validate", str(inv), *FAST, "--image", IMAGE, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "fail" and doc["error"]["host"] in lab.nodes
    assert "/dev/shm inside the container is 64.0 MiB" in doc["error"]["message"]
    assert "result" not in doc  # nothing was measured
    assert not containers(lab) and not leftovers(lab)
    # check --image: the same checklist, one result per node
    checked = run_cli("check", str(inv), "--image", IMAGE, "--skip-allreduce", "--json")
    rows = {n: {r["name"]: r for r in rs} for n, rs in json.loads(checked.stdout)["checks"].items()}
    assert set(rows) == set(lab.nodes), checked.stderr
    for got in rows.values():
        assert got["container.image"]["status"] == "pass"
        assert got["container.shm"]["status"] == "fail"
        assert got["container.shm"]["measured"] == "64.0 MiB"
        assert got["container.torch"]["status"] == "pass"
    assert not containers(lab)


def test_missing_image_is_exit_3_naming_the_node(image_lab: Any) -> None:
    lab, root = image_lab
    inv = inventory(lab, root / "missing")
    proc = run_cli("validate", str(inv), *FAST, "--image", "localhost/nodetune-absent:x",
                   "--json")
    assert proc.returncode == 3, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["host"] in lab.nodes
    assert "localhost/nodetune-absent:x is not on the node and podman pull failed" in (
        error["message"])
    assert not containers(lab) and not leftovers(lab)


def test_timeout_removes_the_running_containers(image_lab: Any) -> None:
    lab, root = image_lab
    inv = inventory(lab, root / "timeout")
    # 1 MiB x 1000 over a fabric rate-limited to 1 Mbit/s on one node (`lab fault
    # slow-link`): each all_reduce takes about 8 s, well inside the ranks' own 30 s
    # (gloo's timeout is --timeout), while the size, the only progress validate hears of,
    # would take hours: the controller names the stall. The ranks wait on the link
    # instead of burning both cores. (15 s left too little for the image's own start on a
    # loaded 2-core machine: a slow container start is the image's timeout, ImageTimeout,
    # not the measurement's.)
    with SlowLink(lab.nodes[1], "1mbit"):
        proc = run_cli("validate", str(inv), "--image", IMAGE, "--sizes", "1M:1M", "--iters",
                       "1000", "--warmup", "0", "--timeout", "30", "--json")
    assert proc.returncode == 4, proc.stderr
    assert json.loads(proc.stdout)["error"]["type"] == "NodeTimeout"
    assert not containers(lab) and not leftovers(lab)

