"""The apt action's decisions, on the messages ansible.builtin.apt really returns.

The action runs for real in molecule/nvidia_container_toolkit, whose verify
removes python3-apt and runs the role in check mode for another release.
"""

from __future__ import annotations

import inspect
from typing import Any

import ansible.modules.apt as builtin_apt

from tests.plugins import load_plugin

action = load_plugin("plugins/action/apt.py")


def test_the_builtin_module_still_says_what_the_action_looks_for() -> None:
    source = inspect.getsource(builtin_apt)
    assert 'f"{apt_pkg_name} must be installed to use check mode. "' in source


def test_a_missing_python3_apt_in_check_mode_is_told_from_other_failures() -> None:
    missing = {"failed": True, "msg": "python3-apt must be installed to use check mode. "
                                      "If run normally this module can auto-install it."}
    assert action.library_missing(missing)
    assert not action.library_missing({"failed": True, "msg": "No package matching 'x' is available"})
    assert not action.library_missing({"failed": True, "msg": "Failed to lock apt for exclusive operation"})
    assert not action.library_missing({"changed": True, "msg": missing["msg"]})


def test_pending_says_what_a_run_would_do() -> None:
    result: dict[str, Any] = action.pending({"name": ["a=1", "b=2"], "state": "present"})
    assert result["changed"] and result["pending"]
    assert "python3-apt is not installed" in result["msg"]
    assert "a run installs python3-apt first and then acts on a=1, b=2" in result["msg"]
    assert "acts on the package lists" in action.pending({"update_cache": True})["msg"]
