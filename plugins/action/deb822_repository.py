"""ansible.builtin.deb822_repository, with its library ensured and ``--diff`` of the sources file.

Ansible's module configures an apt repository and its key in one call, which
reads, compares and writes both (the three roles' repositories were a
directory, a download and a template before). Two things it leaves to the
caller, this action does:

- **Its library.** The module needs python3-debian on the node. Where the
  module reports it missing, the action installs it with ``ansible.builtin.apt``
  from the package lists as they are (refreshed only if they do not list it,
  so a broken repository elsewhere cannot stop the repair of this one) and runs
  the module again. In check mode nothing is installed: the repository counts
  as changed (``pending``), since it cannot be compared yet. Where the library
  is there, which is every run after the first, this costs nothing.
- **A diff.** The module reports none, and nodetune keeps ``--diff`` exact: in
  diff mode the action reads the sources file first and returns its change.

Outside diff mode, on a node with the library, it is the module alone: one call.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# The module names its files after ``name``; this action takes only names that
# are their own file name, so the sources file read for the diff is the one the
# module writes.
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
SOURCES_DIR = "/etc/apt/sources.list.d"
LIBRARY = "python3-debian"
BUILTIN = "ansible.builtin.deb822_repository"


def sources_path(name: str) -> str:
    """The sources file ``ansible.builtin.deb822_repository`` writes for ``name``."""
    if not NAME.match(name):
        raise AnsibleActionFail(
            f"name must be lower-case letters, digits and '-' (it names the sources "
            f"and key files), got {name!r}")
    return f"{SOURCES_DIR}/{name}.sources"


def sources_diff(path: str, before: str, after: str) -> dict[str, str]:
    """One diff entry, as Ansible's callbacks print it."""
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def library_missing(result: dict[str, Any]) -> bool:
    """Whether the builtin module failed only because python3-debian is not installed.

    ansible-core 2.19 says so with ``missing_required_lib``; from 2.20 the module
    says "python3-debian must be installed to use check mode. ..." in check mode
    and "python3-debian is not installed, and install_python_debian is False"
    otherwise.
    """
    msg = str(result.get("msg", ""))
    return bool(result.get("failed")) and (
        ("Failed to import the required Python library" in msg and f"({LIBRARY})" in msg)
        or msg.startswith((f"{LIBRARY} must be installed to use check mode",
                           f"{LIBRARY} is not installed, and install_python_debian is False")))


def not_listed(result: dict[str, Any]) -> bool:
    """Whether apt failed because its package lists do not have the package."""
    return bool(result.get("failed")) and "No package matching" in str(result.get("msg", ""))


class ActionModule(ActionBase):
    """nodetune.cluster.deb822_repository: the builtin module, its library, and a diff."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        path = sources_path(str(args.get("name", "")))
        before = None
        if self._task.diff and args.get("state", "present") == "present":
            read = self._module("ansible.builtin.slurp", {"src": path}, task_vars)
            if not read.get("failed"):
                before = base64.b64decode(read["content"]).decode("utf-8", "replace")
            elif str(read.get("msg", "")).startswith("File not found"):
                before = ""
            else:
                return {**result, "failed": True,
                        "msg": f"could not read {path} for the diff: {read.get('msg')}"}
        done = self._module(BUILTIN, args, task_vars)
        installed = False
        if library_missing(done):
            if self._task.check_mode:
                result.update(changed=True, pending=True, dest=path, msg=(
                    f"{LIBRARY} is not installed, so {path} cannot be compared yet; "
                    f"a run would install {LIBRARY} and then configure the repository"))
                return result
            install = self._install_library(task_vars)
            if install.get("failed"):
                return {**result, "failed": True,
                        "msg": f"installing {LIBRARY} for {BUILTIN} failed: {install.get('msg')}"}
            installed = True
            done = self._module(BUILTIN, args, task_vars)
        result.update(done)
        if installed:
            result.update(changed=True, installed=[LIBRARY])
        if before is not None and not done.get("failed") and done.get("repo") is not None:
            result["diff"] = [sources_diff(path, before, done["repo"])]
        return result

    def _install_library(self, task_vars: dict[str, Any]) -> dict[str, Any]:
        """apt install python3-debian; the lists are refreshed only if they lack it."""
        args = {"name": LIBRARY, "state": "present"}
        install = self._module("ansible.builtin.apt", args, task_vars)
        if not_listed(install):
            install = self._module("ansible.builtin.apt", {**args, "update_cache": True},
                                   task_vars)
        return install

    def _module(self, name: str, args: dict[str, Any],
                task_vars: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = self._execute_module(name, module_args=args, task_vars=task_vars)
        return found
