"""The deb822_repository action's decisions, on the results Ansible's modules really return.

The action itself runs for real in molecule/ofed_doca (check mode, --diff, a
missing library, missing package lists); these pin what it reads from them.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.basic import missing_required_lib

from tests.plugins import load_plugin

action = load_plugin("plugins/action/deb822_repository.py")


def test_sources_path_is_the_file_the_builtin_module_writes() -> None:
    assert action.sources_path("nodetune-cuda") == "/etc/apt/sources.list.d/nodetune-cuda.sources"


@pytest.mark.parametrize("name", ["NodeTune", "nodetune cuda", "../etc/passwd", "a_b", "", "-x"])
def test_names_that_are_not_their_own_file_name_are_refused(name: str) -> None:
    with pytest.raises(AnsibleActionFail, match="lower-case"):
        action.sources_path(name)


def test_a_missing_python3_debian_is_told_from_other_failures() -> None:
    # The builtin module's own message for the missing library.
    assert action.library_missing({"failed": True, "msg": missing_required_lib("python3-debian")})
    assert not action.library_missing({"failed": True, "msg": missing_required_lib("apt")})
    assert not action.library_missing({"failed": True, "msg": "Could not fetch signed_by key"})
    assert not action.library_missing({"changed": False, "msg": missing_required_lib("python3-debian")})


def test_package_lists_without_the_package_are_told_from_other_apt_failures() -> None:
    assert action.not_listed({"failed": True, "msg": "No package matching 'python3-debian' is available"})
    assert not action.not_listed({"failed": True, "msg": "Failed to lock apt for exclusive operation"})
    assert not action.not_listed({"changed": True})


def test_diff_entry_names_the_file_on_both_sides() -> None:
    assert action.sources_diff("/p", "a\n", "b\n") == {
        "before_header": "/p", "after_header": "/p", "before": "a\n", "after": "b\n"}
