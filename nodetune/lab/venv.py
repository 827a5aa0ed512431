"""torch on lab nodes, for `nodetune validate`: one CPU venv on the volume every node mounts."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile

from nodetune.errors import LabError
from nodetune.lab.config import PREFIX, Say
from nodetune.lab.podman import run as _podman

log = logging.getLogger(__name__)


TORCH_REQUIREMENT = "torch==2.13.0"
SHARED_VENV = "/opt/nodetune-shared/venv"
LAB_PYTHON_VAR = "nodetune_python"


def install_torch(*, requirement: str = TORCH_REQUIREMENT, node: str = f"{PREFIX}1",
                  venv: str | None = None, progress: Say = lambda _m: None) -> str:
    """Install a CPU torch once into ``venv`` (SHARED_VENV), on the volume every lab node mounts.

    The wheels (torch and its dependencies, plus numpy) are fetched on this
    machine with this machine's pip and its configuration, which resolve
    ``torch==2.13.0`` to a local CPU wheel; a node installs them with
    ``--no-index``. pip inside a node has neither that configuration nor,
    behind a TLS-intercepting proxy, the CA that PyPI's certificate chains to.
    Idempotent: a venv that already imports torch is kept.

    The venv is built beside its place (``VENV.partial-<random>``) and renamed
    into place once torch imports from it, so an interrupted install never
    leaves a half-built venv where nodes look for one. The next install stops
    what an interrupted one left running in the node (``podman exec`` does not
    end its command when the client is killed), removes its leftovers and a
    venv that does not import torch, and builds afresh (:data:`_VENV_SCRIPT`).

    Returns:
        The venv's python, for the ``nodetune_python`` inventory variable.

    Raises:
        LabError: the wheels cannot be fetched or installed.
    """
    import sys

    venv = venv or SHARED_VENV
    python = f"{venv}/bin/python"
    if _podman("exec", node, python, "-c", "import torch", check=False).returncode == 0:
        return python
    progress(f"installing {requirement} into {venv} (once, shared by every lab node)")
    with tempfile.TemporaryDirectory(prefix="nodetune-wheels-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
             "--python-version", "3.11", "--implementation", "cp",
             "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux2014_x86_64", "-d", tmp, requirement, "numpy"],
            capture_output=True, text=True, check=False, timeout=1200,
        )
        if proc.returncode != 0:
            raise LabError(f"cannot download {requirement} wheels for the lab nodes: "
                           f"{proc.stderr.strip()[-400:]}")
        staging = f"/tmp/nodetune-wheels-{os.getpid()}"  # noqa: S108 - inside the node
        _podman("exec", node, "rm", "-rf", staging)
        _podman("cp", tmp, f"{node}:{staging}")
        try:
            _podman("exec", "-i", node, "python3", "-", venv, staging, requirement, "numpy",
                    input_=_VENV_SCRIPT.encode(), timeout=1200)
        finally:
            _podman("exec", node, "rm", "-rf", staging, check=False)
    return python


# Run by the node's python3 as `python3 - VENV WHEELS REQUIREMENT...`: stop and remove
# what an interrupted install left (its processes name VENV or VENV.partial-* in their
# argv), build VENV.partial-<random>, point its scripts at VENV, check that torch
# imports, and rename it to VENV.
_VENV_SCRIPT = r"""
import os, secrets, shutil, signal, subprocess, sys, time
venv, wheels, reqs = sys.argv[1], sys.argv[2], sys.argv[3:]
parent, base = os.path.split(venv)
me = os.getpid()

def lingering():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (me, os.getppid()):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == venv or a.startswith((venv + "/", venv + ".")) for a in argv):
            yield int(pid)

for _ in range(50):
    pids = list(lingering())
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.1)
else:
    sys.exit(f"processes of an earlier install of {venv} do not stop: {pids}")
if os.path.lexists(venv):  # a venv without torch: set aside first (a rename cannot race)
    os.rename(venv, f"{venv}.partial-old-{secrets.token_hex(4)}")
for name in os.listdir(parent):
    if name.startswith(base + ".partial-"):
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
tmp = f"{venv}.partial-{secrets.token_hex(4)}"
subprocess.run([sys.executable, "-m", "venv", tmp], check=True)
# --no-compile: byte-compiling all of torch's modules took three quarters of the install's
# CPU time (28 of 36 s on a 2-core machine); the import below compiles the ones used.
subprocess.run([f"{tmp}/bin/python", "-m", "pip", "install", "-q", "--no-index", "--no-compile",
                "--disable-pip-version-check", "--find-links", wheels, *reqs], check=True)
for name in os.listdir(f"{tmp}/bin"):  # scripts and activate name the venv's path
    path = f"{tmp}/bin/{name}"
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as fh:
            data = fh.read()
        if tmp.encode() in data:
            with open(path, "wb") as fh:
                fh.write(data.replace(tmp.encode(), venv.encode()))
subprocess.run([f"{tmp}/bin/python", "-c", "import torch"], check=True)
os.rename(tmp, venv)
"""
