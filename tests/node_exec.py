"""A command on a running lab or molecule node (a rootful, --privileged podman container),
as `podman exec` runs it, without the podman client, conmon and the OCI runtime's exec.

`podman exec NODE CMD` costs the machine about 0.14 CPU-s; util-linux's nsenter into the
container's init (every namespace, its root and working directory), with the environment
`podman exec` gives there, about 0.004 (docs/benchmarks.md § molecule's connection). A
--privileged container has every capability and no seccomp or LSM profile, so the command
runs as root in the container's namespaces as it would under `podman exec`; it is
accounted to the caller's cgroup, not the container's. The init's PID is checked against
/proc before each use (its cgroup names the container's ID, and it is PID 1 of its
namespace) and read again after a restart. Where nsenter cannot reach the container (not
installed, another PID namespace), the argv is `podman exec` itself. Test harness only:
nodetune reaches nodes over SSH.

The lab tests use `argv`; molecule's connection (tests/molecule/connection_plugins) loads
this file by its path and uses `find` and `Init`, keeping the entry between its processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


class NoSuchContainer(Exception):
    """`podman inspect` found no such container (its message is the exception's)."""


@dataclass(frozen=True)
class Init:
    """A container's init as nsenter enters it: its PID, the container's ID, and the
    environment `podman exec` gives there (``NAME=value`` each)."""

    pid: int
    cid: str
    env: tuple[str, ...]

    def alive(self) -> bool:
        """Whether the PID is still the container's init: in its cgroup, and PID 1 of its
        PID namespace (not another process of the container, restarted, that reused it)."""
        try:
            with open(f"/proc/{self.pid}/cgroup", encoding="utf-8") as fh:
                ours = self.cid in fh.read()
            with open(f"/proc/{self.pid}/status", encoding="utf-8") as fh:
                nspid = next((ln.split() for ln in fh if ln.startswith("NSpid:")), [])
        except OSError:
            return False
        return ours and nspid[-1:] == ["1"]

    def argv(self, nsenter: str, *command: str) -> list[str]:
        """The argument list that runs ``command`` in the container as `podman exec` would."""
        return [nsenter, "--target", str(self.pid), "--all", "--root", "--wd",
                "/usr/bin/env", "-i", *self.env, *command]


def find(container: str, podman: str = "podman", timeout: float | None = 60) -> Init | None:
    """The container's init, read by `podman inspect` and `podman exec ... env -0`; None
    where it cannot be entered (not running, not this PID namespace's, podman failed).
    Raises NoSuchContainer where podman says there is no such container."""
    found = subprocess.run([podman, "inspect", "--format", "{{.State.Pid}} {{.Id}}",
                            container], capture_output=True, check=False, timeout=timeout)
    if found.returncode != 0:
        if b"no such" in found.stderr.lower():
            raise NoSuchContainer(f"{container}: {os.fsdecode(found.stderr).strip()}")
        return None
    pid, _, cid = os.fsdecode(found.stdout).strip().partition(" ")
    if not pid.isdigit() or pid == "0" or not cid:
        return None
    env = subprocess.run([podman, "exec", container, "env", "-0"], capture_output=True,
                         check=False, timeout=timeout)
    if env.returncode != 0:
        return None
    init = Init(int(pid), cid, tuple(kv for kv in os.fsdecode(env.stdout).split("\0")
                                     if "=" in kv))
    return init if init.alive() else None  # another PID namespace's, or gone already


_inits: dict[str, Init] = {}


def _init(container: str) -> Init | None:
    known = _inits.get(container)
    if known is not None and known.alive():
        return known
    try:
        init = find(container)
    except NoSuchContainer:
        return None
    if init is not None:
        _inits[container] = init
    return init


def argv(container: str, *command: str) -> list[str]:
    """The argument list that runs ``command`` on ``container`` as `podman exec` would."""
    nsenter = shutil.which("nsenter")
    init = _init(container) if nsenter else None
    if nsenter is None or init is None:
        return ["podman", "exec", container, *command]
    return init.argv(nsenter, *command)
