# The molecule scenarios' connection to their podman instances: each command in the
# instance's namespaces, modules pipelined. Test harness only (molecule/*/molecule.yml name
# it); never shipped in the collection.
#
# containers.podman.podman (the podman driver's default) cannot pipeline: per task and
# host it runs podman four times (mount, mkdir of a temporary directory, chmod, exec)
# beside the file copy, and that podman client time was most of a scenario's. Here a
# module's code goes to the node's Python on its standard input, as Ansible pipelines over
# SSH (the way `nodetune apply` reaches real nodes); files (copy, template) go the same way.
#
# How a command gets in: the instances are rootful, --privileged containers (every
# capability, no seccomp or LSM profile), so `podman exec` runs a command as root in the
# container's namespaces with the environment `podman exec` gives. util-linux's nsenter
# does the same without the podman client, conmon and the OCI runtime's exec (about 0.14
# CPU-s of the machine per call against 0.004: docs/benchmarks.md § molecule's connection):
# `nsenter --target PID --all --root --wd` into the container's init, then `env -i` with
# the environment `podman exec` gives there (read once, by `podman exec ... env -0`). The
# one difference: the command is accounted to the caller's cgroup, not the container's.
# How the init is found, checked against /proc and entered is tests/node_exec.py's, which
# the lab tests' read-back of node state uses too; it is loaded here by its path (ansible
# loads this plugin by its own, without the repository on sys.path). What is this plugin's:
# the init's PID and that environment (less PWD) are kept per scenario in molecule's
# ephemeral directory, checked before every command (the PID still the container's init:
# its cgroup names the container's ID, and it is PID 1 of its namespace), and read again
# when the container was re-created or restarted; the first command into a fresh instance
# waits for its boot to end. Where nsenter cannot reach the container (no nsenter, another
# PID namespace, no ephemeral directory), each command is one `podman exec`, as before.
from __future__ import annotations

DOCUMENTATION = """
name: nodetune_podman
short_description: podman exec with pipelining, for nodetune's molecule scenarios
description:
  - Runs commands in a running podman container with C(podman exec), modules pipelined on
    its standard input, files copied through it.
author: nodetune
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
  podman_executable:
    description: The podman client.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase


class Connection(ConnectionBase):
    """Commands in a running podman container's namespaces, every module pipelined."""

    transport = "nodetune_podman"
    has_pipelining = True
    always_pipeline_modules = True

    _podman = ""
    _container = ""
    _entry: tuple[str, Any] | None = None

    def _connect(self) -> Connection:
        """Resolve podman and the container once; every command of this connection uses them."""
        super()._connect()
        if not self._connected:
            podman = shutil.which(self.get_option("podman_executable"))
            if not podman:
                raise AnsibleError(f"{self.get_option('podman_executable')}: not found in PATH")
            self._podman, self._container = podman, self.get_option("remote_addr")
            self._entry = _entry(podman, self._container)
            self._connected = True
        return self

    def _run(self, argv: list[str], in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        container = self._container
        entry = self._entry if self._entry is None or _alive(self._entry) else _entry(
            self._podman, container, again=True)
        self._entry = entry
        if entry is None:
            cmd = [self._podman, "exec", *(["-i"] if in_data is not None else []), container,
                   *argv]
        else:
            cmd = [*_argv(entry), *argv]
        argv_b = [to_bytes(a, errors="surrogate_or_strict") for a in cmd]
        if in_data is None:
            proc = subprocess.run(argv_b, stdin=subprocess.DEVNULL, capture_output=True,
                                  check=False)
        else:
            proc = subprocess.run(argv_b, input=in_data, capture_output=True, check=False)
        if proc.returncode in (125, 126, 127) and b"no such container" in proc.stderr.lower():
            raise AnsibleConnectionFailure(f"{container}: {to_native(proc.stderr).strip()}")
        return proc.returncode, proc.stdout, proc.stderr

    def exec_command(self, cmd: str, in_data: bytes | None = None,
                     sudoable: bool = True) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._run(shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as fh:
            data = fh.read()
        rc, _, err = self._run(["sh", "-c", 'cat > "$1"', "put_file", out_path], data)
        if rc != 0:
            raise AnsibleError(f"cannot copy {in_path} to {out_path}: {to_native(err)}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        rc, out, err = self._run(["cat", in_path])
        if rc != 0:
            raise AnsibleError(f"cannot fetch {in_path}: {to_native(err)}")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as fh:
            fh.write(out)

    def close(self) -> None:
        super().close()
        self._connected = False


# The longest the first command waits for a fresh instance's boot to end.
BOOT_WAIT_S = 300


def _node_exec() -> ModuleType:
    """tests/node_exec.py, by its path (this file's is tests/molecule/connection_plugins/),
    once per process."""
    name = "nodetune_tests_node_exec"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parents[2] / "node_exec.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"{name}: cannot load tests/node_exec.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclass looks its module up there
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


node_exec = _node_exec()


def _argv(entry: tuple[str, Any]) -> list[str]:
    """The argv prefix that runs a command in the instance as `podman exec` would."""
    nsenter, init = entry
    return list(init.argv(nsenter))


def _alive(entry: tuple[str, Any]) -> bool:
    """Whether the entry's PID is still the init of the container it was read from."""
    return bool(entry[1].alive())


def _init(pid: int, cid: str, env: dict[str, str]) -> Any:
    return node_exec.Init(pid, cid, tuple(f"{k}={v}" for k, v in env.items()))


def _cache_path(container: str) -> str | None:
    """Where this scenario keeps a container's entry: molecule's ephemeral directory."""
    base = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not base or not os.path.isdir(base) or "/" in container or container.startswith("."):
        return None
    return os.path.join(base, f"nodetune-podman-{container}.json")


def _entry(podman: str, container: str, again: bool = False) -> tuple[str, Any] | None:
    """nsenter and the container's init (PID, ID, `podman exec` environment less PWD);
    None where nsenter cannot be used (each command is then a `podman exec`)."""
    nsenter, path = shutil.which("nsenter"), _cache_path(container)
    if nsenter is None or path is None:
        return None
    if not again:
        try:
            with open(path, encoding="utf-8") as fh:
                kept = json.load(fh)
            entry = (str(kept["nsenter"]), _init(int(kept["pid"]), str(kept["id"]),
                                                 dict(kept["env"])))
            if _alive(entry):
                return entry
        except (OSError, ValueError, KeyError, TypeError):
            pass
    try:
        found = node_exec.find(container, podman, timeout=None)
    except node_exec.NoSuchContainer as exc:
        raise AnsibleConnectionFailure(str(exc)) from None
    if found is None:
        return None
    env = dict(kv.split("=", 1) for kv in found.env if not kv.startswith("PWD="))
    entry = (nsenter, _init(found.pid, found.cid, env))
    # A freshly started instance is still booting: systemd-tmpfiles empties /tmp at boot,
    # and a module's payload written there first would vanish under it. nsenter reaches
    # the instance sooner than `podman exec` did, so the first command waits for the boot
    # (its end, whatever its state: a degraded or non-systemd instance goes on at once).
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run([*_argv(entry), "systemctl", "is-system-running", "--wait"],
                       capture_output=True, check=False, timeout=BOOT_WAIT_S)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"nsenter": nsenter, "pid": found.pid, "id": found.cid, "env": env}, fh)
    os.replace(tmp, path)
    return entry
