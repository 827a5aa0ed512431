"""ansible.builtin.deb822_repository, with ``--diff`` of the sources file it writes.

Ansible's module configures an apt repository and its key in one call, which
reads, compares and writes both (the three roles' repositories were a
directory, a download and a template before). It reports no diff, though, and
nodetune keeps ``--diff`` exact: in diff mode this action first reads the
sources file as it is and returns its change beside the module's own result.
Outside diff mode it is the module alone, one call.
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


class ActionModule(ActionBase):
    """nodetune.cluster.deb822_repository: the builtin module plus a diff."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        path = sources_path(str(args.get("name", "")))
        present = args.get("state", "present") == "present"
        before = None
        if self._task.diff and present:
            read = self._execute_module("ansible.builtin.slurp", module_args={"src": path},
                                        task_vars=task_vars)
            if not read.get("failed"):
                before = base64.b64decode(read["content"]).decode("utf-8", "replace")
            elif "not found" in str(read.get("msg", "")):
                before = ""
            else:
                return {**result, **read}
        done = self._execute_module("ansible.builtin.deb822_repository", module_args=args,
                                    task_vars=task_vars)
        result.update(done)
        if before is not None and not done.get("failed") and done.get("repo") is not None:
            result["diff"] = [sources_diff(path, before, done["repo"])]
        return result
