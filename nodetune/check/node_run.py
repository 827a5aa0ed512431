"""How the node-side programs run a tool, read a file and find a PCI function: stdlib only,
Python >= 3.8.

The node probe (:mod:`nodetune.check.node_probe`), the health reader
(:mod:`nodetune.check.node_health`) and the sampler (:mod:`nodetune.check.node_sample`) run
every tool they read through :func:`run` and every file through :func:`read`; the reader
and the sampler find the GPUs' and RDMA devices' PCI functions, and the bridge above each,
with :func:`nvidia_gpus` and :func:`pci_function`. Each runs node_facts' fact script
(``roles/node_facts/files/nodetune.fact``) as a namespace with :func:`fact_script`, for the
readers it shares with the roles (the RDMA ports: its ``rdma_ports``), the first time it
asks for it (:func:`fact_loader`).
Each program imports this module; shipped to a node, where the package is not,
:func:`nodetune.check.node_program.embed` makes the module from this file's text in that
import's place.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

PCI_ADDR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def read(path: str, limit: int = 4096) -> str | None:
    """The first ``limit`` characters of the file at ``path``, stripped; None where it
    cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit).strip()
    except OSError:
        return None


def nvidia_gpus(pci_root: str) -> list[str]:
    """The NVIDIA (vendor 0x10de) display/3D controllers (PCI class 0x03xxxx) among the
    functions under ``pci_root`` (``/sys/bus/pci/devices``): their paths there, sorted."""
    return [dev for dev in sorted(glob.glob(pci_root + "/*"))
            if PCI_ADDR.match(os.path.basename(dev)) and read(dev + "/vendor") == "0x10de"
            and (read(dev + "/class") or "").startswith("0x03")]


def pci_function(path: str) -> tuple[str, str, str] | None:
    """The PCI function a sysfs device link (``/sys/class/infiniband/DEV/device``) leads
    to: its address, its directory, and the directory of the bridge just above it (its
    link partner, where the link's errors may be counted; "" where the parent is not a PCI
    function). None where ``path`` does not lead to a PCI function."""
    real = os.path.realpath(path)
    addr = os.path.basename(real)
    if not PCI_ADDR.match(addr):
        return None
    above = os.path.dirname(real)
    return addr, real, above if PCI_ADDR.match(os.path.basename(above)) else ""


def fact_script(source: str, space: dict[str, Any]) -> None:
    """Run node_facts' fact script in ``space``, as a namespace whose functions a program
    calls (and whose globals, ``SYS`` and ``PROC``, it may set there): its ``__name__`` is
    not ``"__main__"`` there, so it prints no fact. ``source``: its text, which the program
    carries (its ``FACT_SOURCE`` slot); "" where the program is imported as part of the
    package, which reads the role's file (:func:`nodetune.check.node_program.fact_text`)."""
    if not source:
        from nodetune.check import node_program  # off the node only: the package's

        source = node_program.fact_text()
    exec(compile(source, "nodetune.fact", "exec"), space)  # noqa: S102 - the role's script


def fact_loader(source: str) -> Callable[[], dict[str, Any]]:
    """A program's way to the fact script's functions: a function that runs the script
    (``source``, as :func:`fact_script` takes it) as a namespace of its own the first time
    it is called, and gives that namespace every time."""
    space: dict[str, Any] = {}

    def fact() -> dict[str, Any]:
        if not space:
            fact_script(source, space)
        return space

    return fact


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group ``proc`` leads (what it started too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            proc.kill()


def run(argv: list[str], timeout: float, deadline: float = 0.0,
        keep: int = 0) -> dict[str, Any]:
    """Run a tool in a process group of its own, for at most ``timeout`` seconds.

    A tool that does not answer in time has its whole group killed (what it started
    too), and one that cannot start or dies of a signal is not an answer either: each
    sets ``unknown`` to the reason, which the controller turns into an ``unknown`` check.

    ``deadline`` (a :func:`time.monotonic` time; 0: none) is when every tool of the run
    must have answered, so that tools that hang one after the other cannot together
    outlast the controller's wait: a tool gets at most what is left, and is not started
    once less than a second is. ``keep`` is how many characters of the tool's output are
    kept, the last ones (0: all).
    """
    name = os.path.basename(argv[0]) if argv else "?"
    if deadline:
        left = deadline - time.monotonic()
        if left < 1:
            why = f"{name} not run: the probe's time was spent on tools that did not answer"
            return {"rc": None, "stdout": "", "stderr": why, "unknown": why}
        timeout = min(timeout, round(left, 1))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        why = f"{name} could not start: {str(exc)[:300]}"
        return {"rc": None, "stdout": "", "stderr": why, "unknown": why}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        why = f"{name} gave no answer within {timeout:g} s (its process group was killed)"
        return {"rc": None, "stdout": "", "stderr": why, "unknown": why}
    stdout = out.decode("utf-8", "replace")
    res: dict[str, Any] = {"rc": proc.returncode,
                           "stdout": stdout[-keep:] if keep else stdout,
                           "stderr": err.decode("utf-8", "replace")[-2000:]}
    if proc.returncode < 0:
        res["unknown"] = f"{name} died of signal {-proc.returncode}"
    return res
