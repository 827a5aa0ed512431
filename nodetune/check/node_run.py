"""How the node-side programs run a tool and read a file: stdlib only, Python >= 3.8.

The node probe (:mod:`nodetune.check.node_probe`), the health reader
(:mod:`nodetune.check.node_health`) and the sampler (:mod:`nodetune.check.node_sample`) run
every tool they read through :func:`run` and every file through :func:`read`:
:func:`nodetune.check.node_program.embed` puts this file's text into the program, which
runs it as a namespace (``RUN``); imported as part of the package, a program uses this
module itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any


def read(path: str, limit: int = 4096) -> str | None:
    """The first ``limit`` characters of the file at ``path``, stripped; None where it
    cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit).strip()
    except OSError:
        return None


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
