"""The one door to podman: every lab command goes through ``run``."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from nodetune.errors import LabError


@dataclass(frozen=True, slots=True)
class LabNode:
    """One running lab container."""

    name: str
    address: str
    state: str
    fabric_address: str = ""



def run(*args: str, check: bool = True, input_: bytes | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    podman = shutil.which("podman")
    if podman is None:
        raise LabError(
            "podman is not installed; on Debian/Ubuntu run `sudo apt-get install podman runc` "
            "(or scripts/bootstrap.sh, which installs everything the lab needs)"
        )
    try:
        proc = subprocess.run(
            [podman, *args], capture_output=True, text=input_ is None, input=input_,
            timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"`podman {' '.join(args[:2])}` did not finish in {timeout:.0f} s") from None
    out = proc.stdout if isinstance(proc.stdout, str) else proc.stdout.decode(errors="replace")
    err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode(errors="replace")
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise LabError(f"`podman {' '.join(args[:3])}` failed: {err.strip()[-600:]}")
    return result


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab runs rootful podman so that nodes get routable addresses and their own "
            "privileged network namespace: run it as root (sudo -E nodetune lab up)"
        )
