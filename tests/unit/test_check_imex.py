"""gpu.imex: `nvidia-imex-ctl -N -j` read by the real health reader through a stand-in
nvidia-imex-ctl (the tool at the hardware's edge) that prints
tests/fixtures/check/health/imex-ctl-N-j.json (a stand-in: its README names the
documented layout), and variants of it derived in code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodetune.check import health, imex
from nodetune.check.model import Status

HEALTH = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "health"
UP = json.loads((HEALTH / "imex-ctl-N-j.json").read_text())


def answer(doc: Any, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    return {"tool": "/usr/bin/nvidia-imex-ctl", "rc": rc,
            "stdout": doc if isinstance(doc, str) else json.dumps(doc), "stderr": stderr}


def read(tmp_path: Path, script: str | None) -> dict[str, Any]:
    """The health reader's ``imex`` entry with ``script`` as nvidia-imex-ctl (None: none)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    path = os.environ["PATH"]
    if script is not None:
        tool = bin_ / "nvidia-imex-ctl"
        tool.write_text("#!/bin/sh\n" + script)
        tool.chmod(0o755)
        path = f"{bin_}:{path}"
    request = {"kernel_log": str(tmp_path / "none"), "rdma_sysfs": str(tmp_path / "ib"),
               "pci_sysfs": str(tmp_path / "pci"), "timeout": 5}
    out = subprocess.run([sys.executable, "-S", "-c", health.source(), json.dumps(request)],
                         capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PATH": path})
    return json.loads(out.stdout)["imex"]


def test_the_reader_runs_N_j_and_an_up_domain_passes(tmp_path: Path) -> None:
    got = read(tmp_path, f'[ "$1 $2" = "-N -j" ] && cat {HEALTH}/imex-ctl-N-j.json\n')
    r = imex.judge(got)
    assert r.status is Status.PASS, r
    assert r.measured == "domain UP, 2/2 nodes READY"


def test_without_the_tool_it_skips(tmp_path: Path) -> None:
    got = read(tmp_path, None) if not _on_path() else None
    r = imex.judge(got)
    assert r.status is Status.SKIP and "no IMEX on this node" in r.message


def _on_path() -> bool:
    return any((Path(d) / "nvidia-imex-ctl").exists()
               for d in os.environ["PATH"].split(os.pathsep) if d)


def test_a_down_domain_fails_and_a_node_not_ready_warns() -> None:
    down = json.loads(json.dumps(UP))
    down["status"] = "DOWN"
    down["nodes"]["1"]["status"] = "UNAVAILABLE"
    r = imex.judge(answer(down))
    assert r.status is Status.FAIL
    assert "IMEX domain is DOWN: gpu-node-2 UNAVAILABLE" in r.message
    part = json.loads(json.dumps(UP))
    part["nodes"]["0"]["status"] = "UNAVAILABLE"
    r = imex.judge(answer(part))
    assert r.status is Status.WARN and "gpu-node-1 UNAVAILABLE" in r.message


def test_no_answer_is_not_a_pass() -> None:
    r = imex.judge(answer("", rc=255, stderr="failed to read /etc/nvidia-imex/config.cfg"))
    assert r.status is Status.WARN and "exit 255" in r.message
    assert imex.judge(answer("Domain State: UP")).status is Status.WARN


def test_a_hung_nvidia_imex_ctl_is_unknown_not_a_pass(tmp_path: Path) -> None:
    """Stand-in nvidia-imex-ctl that never answers: the reader's timeout (5 s here) ends
    it and the check is unknown, with the reason."""
    got = read(tmp_path, "sleep 60\n")
    assert got["rc"] is None and got["unknown"]
    r = imex.judge(got)
    assert r.status is Status.UNKNOWN
    assert r.message.startswith("nvidia-imex-ctl -N -j: ")
