# The molecule scenarios' connection to their podman instances: `podman exec` with
# pipelining. Test harness only (molecule/*/molecule.yml name it); never shipped in the
# collection.
#
# containers.podman.podman (the podman driver's default) cannot pipeline: per task and
# host it runs podman four times (mount, mkdir of a temporary directory, chmod, exec)
# beside the file copy, and that podman client time was most of a scenario's. Here a
# module's code goes to the node's Python on the standard input of one `podman exec -i`,
# as Ansible pipelines over SSH (the way `nodetune apply` reaches real nodes); files
# (copy, template) go the same way, one `podman exec -i` each. Nothing runs differently
# on the node: the same modules, as root, in the instance's own namespaces.
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

import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase


class Connection(ConnectionBase):
    """`podman exec` into a running container, every module pipelined."""

    transport = "nodetune_podman"
    has_pipelining = True
    always_pipeline_modules = True

    _podman = ""
    _container = ""

    def _connect(self) -> Connection:
        """Resolve podman and the container once; every command of this connection uses them."""
        super()._connect()
        if not self._connected:
            podman = shutil.which(self.get_option("podman_executable"))
            if not podman:
                raise AnsibleError(f"{self.get_option('podman_executable')}: not found in PATH")
            self._podman, self._container = podman, self.get_option("remote_addr")
            self._connected = True
        return self

    def _run(self, argv: list[str], in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        container = self._container
        cmd = [self._podman, "exec", *(["-i"] if in_data is not None else []), container, *argv]
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
