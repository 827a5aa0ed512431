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


@pytest.mark.parametrize("msg", [
    # ansible-core 2.20/2.21's module, verbatim: in check mode (seen on an Ubuntu 24.04 GPU
    # node without python3-debian, `apply --check`), and in a run without install_python_debian.
    "python3-debian must be installed to use check mode. If run with install_python_debian, "
    "this module can auto-install it.",
    "python3-debian is not installed, and install_python_debian is False",
])
def test_a_missing_python3_debian_is_told_on_later_ansible_core_too(msg: str) -> None:
    assert action.library_missing({"failed": True, "msg": msg})
    assert not action.library_missing({"failed": True, "msg": msg.replace("debian", "apt")})


def test_package_lists_without_the_package_are_told_from_other_apt_failures() -> None:
    assert action.not_listed({"failed": True, "msg": "No package matching 'python3-debian' is available"})
    assert not action.not_listed({"failed": True, "msg": "Failed to lock apt for exclusive operation"})
    assert not action.not_listed({"changed": True})


def test_diff_entry_names_the_file_on_both_sides() -> None:
    assert action.sources_diff("/p", "a\n", "b\n") == {
        "before_header": "/p", "after_header": "/p", "before": "a\n", "after": "b\n"}
