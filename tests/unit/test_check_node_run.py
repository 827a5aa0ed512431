"""The one runner the node probe and the health reader run their tools through
(:mod:`nodetune.check.node_run`): a tool that hangs has its process group killed, one that
crashes or cannot start is ``unknown``, and none runs once the time given is spent.

Faked at the hardware's edge only, and named so: a stand-in ``nvidia-smi`` (a real shell
script) that hangs with a child of its own, and one that dies of SIGSEGV.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodetune.check import (
    health,
    node_health,
    node_probe,
    node_program,
    node_run,
    node_sample,
    probe,
    sample,
)
from tests.unit.test_check_probe import script
from tests.unit.test_check_unknown import CRASH, HANG, gone

RUNNER = (Path(node_run.__file__)).read_text()


def test_a_tool_that_hangs_is_killed_with_its_process_group(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    tool = tmp_path / "nvidia-smi"
    script(tool, HANG)  # stand-in nvidia-smi that never answers
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("CHILD_PID", str(pid_file))
    t0 = time.monotonic()
    res = node_run.run([str(tool), "-q", "-x"], 1.0)
    took = time.monotonic() - t0
    assert took < 8, took
    assert res["rc"] is None
    assert res["unknown"] == "nvidia-smi gave no answer within 1 s (its process group was killed)"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child), f"the stand-in's child {child} outlived the timeout"


def test_a_tool_that_crashes_or_cannot_start_is_unknown(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    script(tool, CRASH)  # stand-in nvidia-smi that dies of SIGSEGV
    assert node_run.run([str(tool), "-q", "-x"], 5.0)["unknown"] == \
        "nvidia-smi died of signal 11"
    tool.chmod(0o644)
    res = node_run.run([str(tool)], 5.0)
    assert res["rc"] is None and res["unknown"].startswith("nvidia-smi could not start: ")
    script(tool, "echo partial; exit 3\n")  # an answer, even a failing one, is not unknown
    res = node_run.run([str(tool)], 5.0)
    assert "unknown" not in res and (res["rc"], res["stdout"]) == (3, "partial\n")


def test_no_tool_starts_once_the_deadline_is_spent(tmp_path: Path) -> None:
    started = tmp_path / "started"
    tool = tmp_path / "nvidia-smi"
    script(tool, f'touch "{started}"\n')
    res = node_run.run([str(tool)], 30.0, time.monotonic() + 0.5)  # less than a second left
    assert res["unknown"] == ("nvidia-smi not run: the probe's time was spent on tools that "
                              "did not answer")
    assert not started.exists()
    assert node_run.run([str(tool)], 30.0)["rc"] == 0 and started.exists()  # 0: no deadline


def test_a_tool_gets_only_what_is_left_of_the_deadline(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    script(tool, "exec sleep 60\n")
    t0 = time.monotonic()
    res = node_run.run([str(tool)], 30.0, time.monotonic() + 1.5)
    assert time.monotonic() - t0 < 8
    assert res["unknown"].startswith("nvidia-smi gave no answer within 1.")


def test_keep_holds_the_last_characters_of_the_output(tmp_path: Path) -> None:
    tool = tmp_path / "lspci"
    script(tool, "printf 'head-'; printf 'tail'\n")
    assert node_run.run([str(tool)], 5.0, keep=4)["stdout"] == "tail"
    assert node_run.run([str(tool)], 5.0)["stdout"] == "head-tail"


def test_both_programs_run_their_tools_through_it(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's runner is node_run's within the probe's deadline, the reader's keeps
    its output cap; both carry node_run's text when shipped to a node."""
    tool = tmp_path / "nvidia-smi"
    script(tool, "exit 0\n")
    monkeypatch.setattr(node_probe, "DEADLINE", time.monotonic())
    assert "time was spent" in node_probe.run([str(tool)], 5.0)["unknown"]
    assert node_health.OUT_LIMIT == 200000
    assert repr(RUNNER) in probe.source() and repr(RUNNER) in health.source()


def test_the_shipped_reader_runs_without_the_package(tmp_path: Path) -> None:
    """``python -I -S -c SOURCE`` away from the checkout (nothing of nodetune importable),
    as on a node: the reader's tools still run, through the runner it carries."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    script(bin_ / "lspci", CRASH)  # stand-in lspci that dies of SIGSEGV
    request = {"kernel_log": str(tmp_path / "none"), "rdma_sysfs": str(tmp_path / "none"),
               "pci_sysfs": str(tmp_path / "none"), "timeout": 5}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", health.source(),
                           json.dumps(request)], capture_output=True, text=True, timeout=60,
                          check=True, cwd=tmp_path,
                          env={"PATH": f"{bin_}:{os.environ['PATH']}"})
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert doc["lspci"]["unknown"] == "lspci died of signal 11"


def _port(root: Path, device: str, port: str) -> None:
    """One port of /sys/class/infiniband's layout (sysfs-class-infiniband), ACTIVE."""
    (root / device / "ports" / port / "counters").mkdir(parents=True)
    (root / device / "ports" / port / "state").write_text("4: ACTIVE\n")
    (root / device / "ports" / port / "rate").write_text("400 Gb/sec (4X NDR)\n")


def test_every_node_program_lists_the_rdma_ports_with_node_facts_script(tmp_path: Path) -> None:
    """Which RDMA ports a node has is one rule, node_facts' rdma_ports: the roles' fact and
    the probe (rdma_devices), the health reader and the sampler, shipped or imported, list
    the same ports in the same order: devices and ports in name order, a port's directory
    named by digits, the plain-named devices' (the programs pass no other name on)."""
    ib = tmp_path / "sys" / "class" / "infiniband"
    for device, port in (("mlx5_2", "1"), ("mlx5_10", "2"), ("mlx5_10", "10"),
                         ("mlx5_10", "1"), ("mlx5_0", "1"), ("bad name", "1")):
        _port(ib, device, port)
    (ib / "mlx5_2" / "ports" / "x").mkdir()  # not a port
    (ib / "mlx5_3" / "ports").mkdir(parents=True)  # a device without ports
    want = [("mlx5_0", "1"), ("mlx5_10", "1"), ("mlx5_10", "10"), ("mlx5_10", "2"),
            ("mlx5_2", "1")]
    fact: dict[str, Any] = {}
    node_run.fact_script("", fact)
    fact["SYS"] = str(tmp_path / "sys")
    assert [(d, p) for d, found in fact["rdma_ports"](str(ib)) for p, _ in found
            if d != "bad name"] == want
    assert [(p["device"], p["port"]) for p in node_probe.rdma(fact["rdma_devices"]())] == want
    assert [(p["device"], p["port"]) for p in node_health.rdma_counters(str(ib))] == want
    assert list(node_sample.ports(str(ib))) == [f"{d}/{p}" for d, p in want]
    # Shipped, each carries the script as the probe does, and the reader lists them so.
    text = repr(node_program.fact_text())
    assert text in probe.source() and text in health.source() and text in sample.source()
    request = {"kernel_log": str(tmp_path / "none"), "rdma_sysfs": str(ib),
               "pci_sysfs": str(tmp_path / "none"), "timeout": 5}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", health.source(),
                           json.dumps(request)], capture_output=True, text=True, timeout=60,
                          check=True, cwd=tmp_path, env={"PATH": str(tmp_path / "none")})
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert [(p["device"], p["port"]) for p in doc["rdma_counters"]] == want


def test_the_node_programs_load_the_fact_script_once_through_node_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lazy loading of node_facts' fact script is one rule, node_run.fact_loader: the
    script runs the first time a program asks for it, once, in a namespace of its own
    (the probe's main() asks first thing, to point it at its ROOT)."""
    ran: list[str] = []
    real = node_run.fact_script

    def counted(source: str, space: dict[str, Any]) -> None:
        ran.append(source)
        real(source, space)

    monkeypatch.setattr(node_run, "fact_script", counted)
    fact = node_run.fact_loader("X = 1\n")
    assert ran == []
    assert fact() is fact() and fact()["X"] == 1 and ran == ["X = 1\n"]
    other = node_run.fact_loader("")
    assert other() is not fact() and "rdma_ports" in other()
    for program in (node_health, node_probe, node_sample):
        assert program.fact.__code__ is fact.__code__  # node_run's loader, not one of its own


def test_every_shipped_program_carries_node_run_in_place_of_its_import() -> None:
    """Shipped to a node, each program makes node_run from the text it carries where it
    imports it in the package (node_program.embed, the one place that does): nothing of
    nodetune is imported there, and a program without that line is refused, not shipped."""
    carried = repr(node_program.text("node_run.py"))
    for name, shipped in (("probe", probe.source()), ("health", health.source()),
                          ("sample", sample.source())):
        assert carried in shipped, name
        imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(shipped))
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(ast.parse(shipped))
                     if isinstance(node, ast.ImportFrom)}
        assert "nodetune" not in imported, name
    with pytest.raises(ValueError, match="no line 'NOT_A_SLOT = \"\"'"):
        node_program.embed("node_probe.py", NOT_A_SLOT="x")
    with pytest.raises(ValueError, match=re.escape("node_run.py has no line 'from nodetune")):
        node_program.embed("node_run.py")
