"""Keep files as given, in one module call: read, compare, write where they differ.

Shared by the collection's modules that persist what they set live
(nodetune_sysctl, nodetune_mtu), so a converged node costs one call per role.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any


def read_file(path: str) -> str | None:
    """A file's text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def sync_files(module: Any, files: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Write or remove each of ``files`` where it differs; return (changed paths, diffs).

    Check mode compares and reports only.
    """
    changed: list[str] = []
    diffs: list[dict[str, Any]] = []
    for spec in files:
        path = str(spec["path"])
        before = read_file(path)
        if spec.get("state", "present") == "absent":
            if before is not None:
                changed.append(path)
                diffs.append({"before": {"path": path, "state": "file"},
                              "after": {"path": path, "state": "absent"}})
                if not module.check_mode:
                    os.unlink(path)
            continue
        content = str(spec["content"])
        if before != content:
            changed.append(path)
            diffs.append({"before": before or "", "after": content,
                          "before_header": path, "after_header": path})
            if not module.check_mode:
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ansible_tmp")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as handle:
                        handle.write(content)
                    module.atomic_move(tmp, path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
        if os.path.lexists(path):
            attr_diff: dict[str, Any] = {"before": {"path": path}, "after": {"path": path}}
            if module.set_fs_attributes_if_different(
                    module.load_file_common_arguments(module.params, path=path), False, attr_diff):
                if path not in changed:
                    changed.append(path)
                diffs.append(attr_diff)
    return changed, diffs
