"""An interrupted `lab up --with-torch` leaves nothing that stops the next one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from nodetune.lab import podman as lab_podman
from nodetune.lab import venv as lab_venv

pytestmark = pytest.mark.integration

# Stands for the pip of an interrupted install that `podman exec` left running in the
# node (killing the podman client does not end it): a process of the half-built venv's
# python that keeps writing numpy/f2py into it.
WRITER = """
import itertools, os, sys
venv, pidfile = sys.argv[1], sys.argv[2]
open(pidfile, "w").write(str(os.getpid()))
f2py = os.path.join(venv, "lib", "python3.11", "site-packages", "numpy", "f2py")
for i in itertools.count():
    os.makedirs(f2py, exist_ok=True)
    open(os.path.join(f2py, f"part{i % 5000}.py"), "w").close()
"""


def test_interrupted_torch_install_is_recovered(lab: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `python3 -m venv --clear` on the half-built venv failed with "Directory not
    empty: 'f2py'", and every later `lab up --with-torch` with it. Now the install stops the
    leftover process, builds beside the venv and renames it into place."""
    node = lab.nodes[0]
    venv = f"/opt/nodetune-shared/venv-interrupted-{uuid.uuid4().hex[:8]}"
    pidfile = f"{venv}.writer-pid"
    monkeypatch.setattr(lab_venv, "SHARED_VENV", venv)
    lab.sh(node, "python3", "-m", "venv", "--without-pip", venv)
    lab.sh(node, "rm", "-f", pidfile)
    lab_podman.run("exec", "-d", node, f"{venv}/bin/python", "-c", WRITER, venv, pidfile)
    try:
        lab.sh(node, "sh", "-c", f"for i in $(seq 100); do [ -s {pidfile} ] && exit 0; "
                                 "sleep 0.1; done; exit 1")
        writer = lab.sh(node, "cat", pidfile)
        alive = f"cat /proc/{writer}/cmdline 2>/dev/null | tr '\\0' ' '"
        assert lab.sh(node, "sh", "-c", alive).startswith(f"{venv}/bin/python -c")

        python = lab_venv.install_torch(node=node)

        assert python == f"{venv}/bin/python"
        for other in lab.nodes:  # on the volume every node shares
            assert lab.sh(other, python, "-c", "import torch; print(torch.__version__)")
        assert lab.sh(node, "sh", "-c", alive) == ""  # stopped (gone, or a zombie)
        assert lab.sh(node, "sh", "-c", f"ls -d {venv}.partial-* 2>/dev/null || true") == ""
        # The venv's scripts name the venv's own path, not the directory it was built in.
        assert lab.sh(node, "head", "-1", f"{venv}/bin/pip").startswith(f"#!{venv}/bin/python")
        assert lab.sh(node, python, "-m", "pip", "--version").startswith("pip ")
    finally:
        lab.sh(node, "sh", "-c", f"[ -s {pidfile} ] && kill -9 $(cat {pidfile}); "
                                 f"rm -rf {venv} {venv}.* ", check=False)
