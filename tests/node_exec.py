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
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class _Init:
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


_inits: dict[str, _Init] = {}


def _init(container: str) -> _Init | None:
    known = _inits.get(container)
    if known is not None and known.alive():
        return known
    found = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}} {{.Id}}",
                            container], capture_output=True, text=True, check=False,
                           timeout=60)
    pid, _, cid = found.stdout.strip().partition(" ")
    if found.returncode != 0 or not pid.isdigit() or pid == "0" or not cid:
        return None
    env = subprocess.run(["podman", "exec", container, "env", "-0"], capture_output=True,
                         text=True, check=False, timeout=60)
    if env.returncode != 0:
        return None
    init = _Init(int(pid), cid, tuple(kv for kv in env.stdout.split("\0") if "=" in kv))
    if not init.alive():  # another PID namespace's, or gone already
        return None
    _inits[container] = init
    return init


def argv(container: str, *command: str) -> list[str]:
    """The argument list that runs ``command`` on ``container`` as `podman exec` would."""
    nsenter = shutil.which("nsenter")
    init = _init(container) if nsenter else None
    if nsenter is None or init is None:
        return ["podman", "exec", container, *command]
    return [nsenter, "--target", str(init.pid), "--all", "--root", "--wd",
            "/usr/bin/env", "-i", *init.env, *command]
