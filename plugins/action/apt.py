"""ansible.builtin.apt, with check mode on a node that lacks python3-apt.

The builtin module needs python3-apt. In a real run it installs it itself
before it does anything else (refreshing the package lists unless told not
to), but in check mode it fails: "python3-apt must be installed to use check
mode". A node built from a trimmed image (or a GPU host whose driver came from
elsewhere) has no python3-apt, so ``apply --check --diff`` stopped at the first
apt task. This action runs the builtin module unchanged and, only in check mode
and only for that failure, reports the task as changed and ``pending`` with a
message saying what a real run would do, as the deb822_repository action does
for python3-debian.

``predict_only: true``: apt only predicts, whatever the task's mode
(plugins/plugin_utils/predict.py).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.nodetune.cluster.plugins.plugin_utils.predict import PredictingAction

LIBRARY = "python3-apt"
BUILTIN = "ansible.builtin.apt"


def library_missing(result: dict[str, Any]) -> bool:
    """Whether the builtin module failed only because python3-apt is not installed (check mode)."""
    msg = str(result.get("msg", ""))
    return bool(result.get("failed")) and msg.startswith(
        f"{LIBRARY} must be installed to use check mode")


def pending(args: dict[str, Any]) -> dict[str, Any]:
    """The check-mode result where python3-apt is missing: changed, pending, and why."""
    names = _names(args.get("name") or args.get("pkg"))
    what = ", ".join(str(n) for n in names) or "the package lists"
    return {
        "changed": True, "pending": True, "packages": [str(n) for n in names],
        "msg": (f"{LIBRARY} is not installed, so apt cannot predict this task in check mode; "
                f"a run installs {LIBRARY} first and then acts on {what}"),
    }


def _names(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


class ActionModule(PredictingAction):
    """nodetune.cluster.apt: the builtin module; in check mode without python3-apt, pending;
    ``predict_only``: in check mode, whatever the task's (plugin_utils/predict.py)."""

    MODULE = BUILTIN

    def unpredictable(self, done: dict[str, Any], args: dict[str, Any]) -> dict[str, Any] | None:
        return pending(args) if library_missing(done) else None
