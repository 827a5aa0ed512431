"""Every yes/no nodetune reads from the inventory is read by one rule, Ansible's own.

The expected values come from the installed ansible-core (2.19 in .venv, 2.21 in the
ansible-core 2.21 pass): ``convert_bool.boolean``, which a role's argument spec checks its
``type: bool`` variables with, and the ``bool`` filter the roles' tasks read them with. Not
from a table written here. The readers nodetune has (reboot through Slurm, a role's
``*_enabled`` for validate's data interface, check's expected values, the health inputs,
the NCCL settings) all go through nodetune.ansible.truth.boolean.

An explicit null is no exception: the role's argument spec fails the play on it, its
default notwithstanding (run here: :func:`test_the_role_refuses_an_explicit_null`), so
every reader refuses it, naming host and variable; only an absent variable takes the
default.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.parsing import convert_bool
from ansible.plugins.filter.core import to_bool

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host
from nodetune.ansible.nccl_settings import HostVars, nccl_settings
from nodetune.apply.busy import _via_slurm
from nodetune.check.expect import expectations
from nodetune.collective.datapath import VAR_MTU, VAR_NCCL_IFNAME, request_for
from nodetune.errors import InputError
from nodetune.measure.node_inputs import inputs
from tests.plugins import ROOT, ansible_env

VALUES: list[Any] = [True, False, 1, 0, 2, -1, "yes", "Yes", "on", "ON", "true", "True", "1",
                     "no", "off", "false", "FALSE", "0", "y", "Y", "n", "N", "t", "f", "F",
                     " no ", " yes", "maybe", "", "10", 1.0, 0.0, 0.5, None, [], {}]
# Ansible's booleans the roles' `| bool` reads as false though the argument spec says true.
SPLIT = ("y", "Y", "t", " yes")


def _spec(value: Any) -> bool | None:
    """The argument spec's reading (convert_bool, strict); None where it fails the play."""
    try:
        return bool(convert_bool.boolean(value))
    except TypeError:
        return None


def _filter(value: Any) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(to_bool(value))


def test_the_words_are_ansibles() -> None:
    assert truth.BOOLEANS_TRUE == convert_bool.BOOLEANS_TRUE
    assert truth.BOOLEANS_FALSE == convert_bool.BOOLEANS_FALSE


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_boolean_is_ansibles_rule(value: Any) -> None:
    spec = _spec(value)
    if spec is None or value in SPLIT:
        with pytest.raises(InputError, match="net_mtu_enabled") as exc:
            truth.boolean(value, name="net_mtu_enabled", host="gpu-a07")
        assert exc.value.host == "gpu-a07"
        assert (spec is None) is (value not in SPLIT)
    else:
        assert truth.boolean(value, name="net_mtu_enabled", host="gpu-a07") is spec
        assert _filter(value) is spec  # the tasks' `| bool` reads it alike


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_readers_agree(value: Any) -> None:
    """Each reader takes what truth.boolean takes, alike, and refuses the rest naming the
    host and the variable: check and validate read the same net_mtu_enabled alike (``n``
    is false to both, an explicit null refused by both, as the role's argument spec
    refuses it)."""
    try:
        want: bool | None = truth.boolean(value, name="v", host="n1")
    except InputError:
        want = None
    readers: dict[str, Callable[[Any], object]] = {
        "apply: nodetune_reboot_via_slurm": lambda v: _via_slurm(Host("n1", ("gpu_nodes",), {
            "nodetune_slurm_controller": "ctl", "nodetune_reboot_via_slurm": v}), {}),
        "validate: net_mtu_enabled": lambda v: request_for("n1", {
            "net_mtu_enabled": v, VAR_MTU: [{"name": "eth1", "mtu": 9000}]}).source == VAR_MTU,
        "validate: nccl_config_enabled": lambda v: request_for("n1", {
            "nccl_config_enabled": v, VAR_NCCL_IFNAME: "=eth1"}).source == VAR_NCCL_IFNAME,
        "NCCL settings: nccl_config_enabled": lambda v: bool(nccl_settings(HostVars(Host(
            "n1", ("gpu_nodes",), {"nccl_config_enabled": v, VAR_NCCL_IFNAME: "=eth1"})))),
        "check: net_mtu_enabled": lambda v: expectations(
            Host("n1", ("gpu_nodes",), {"net_mtu_enabled": v})).mtu_enabled,
        "check: net_sysctl_enabled": lambda v: expectations(
            Host("n1", ("gpu_nodes",), {"net_sysctl_enabled": v})).sysctl_enabled,
        "health: nvidia_driver_peermem_enabled": lambda v: inputs(
            Host("n1", ("gpu_nodes",), {"nvidia_driver_peermem_enabled": v})).peermem_enabled.value,
    }
    for reader, read in readers.items():
        name = reader.split(": ")[1]
        if want is None:
            with pytest.raises(InputError, match=name) as exc:
                read(value)
            assert exc.value.host == "n1"
        else:
            assert read(value) is want, reader


def test_an_explicit_null_is_refused_saying_what_to_write() -> None:
    with pytest.raises(InputError, match=r"net_mtu_enabled is null.*write true or false") as exc:
        truth.boolean(None, name="net_mtu_enabled", host="gpu-a07")
    assert exc.value.host == "gpu-a07"
    # Only an absent variable takes the default; a null one is refused.
    assert truth.setting({}, "net_mtu_enabled", default=True, host="gpu-a07") is True
    with pytest.raises(InputError, match="net_mtu_enabled is null"):
        truth.setting({"net_mtu_enabled": None}, "net_mtu_enabled", default=True, host="h")


def test_the_role_refuses_an_explicit_null(tmp_path: Path) -> None:
    """The rule's ground: ansible-playbook runs net_mtu on a host whose inventory writes
    ``net_mtu_enabled:`` (YAML null) and on one that leaves it out. The null fails the
    role's argument spec (not its default, true); the absent one passes."""
    (tmp_path / "inventory.yml").write_text(
        "all:\n  vars: {ansible_connection: local, ansible_python_interpreter: "
        f"{sys.executable}}}\n  hosts:\n    null-host:\n      net_mtu_enabled:\n"
        "    absent-host: {}\n", encoding="utf-8")
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  roles: [net_mtu]\n", encoding="utf-8")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--check",
         "-i", str(tmp_path / "inventory.yml"), "-e", '{"nodetune_inputs_checked": ["net_mtu"]}',
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=ansible_env(json_output=True), cwd=ROOT,
        timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    stats = json.loads(proc.stdout)["stats"]
    assert stats["null-host"]["failures"] == 1 and stats["absent-host"]["failures"] == 0
    spec = json.loads(proc.stdout)["plays"][0]["tasks"][0]
    assert "Validating arguments against arg spec 'main'" in spec["task"]["name"]
    msg = spec["hosts"]["null-host"]["msg"]
    assert "argument 'net_mtu_enabled' is of type" in msg and "NoneType" in msg, msg
    assert not spec["hosts"]["absent-host"].get("failed")


def test_apply_refuses_what_check_refuses_the_collection_holding_the_same_rule() -> None:
    """The inputs pass (the collection's role_argument_specs action, which cannot import
    nodetune) refuses `y`/`t` for a bool option as truth.boolean does: one rule, two
    copies held equal here."""
    from nodetune.ansible import truth
    from tests.plugins import load_plugin
    words = load_plugin("plugins/plugin_utils/booleans.py")
    action = load_plugin("plugins/action/role_argument_specs.py")
    assert words.FILTER_TRUE == truth._FILTER_TRUE
    assert {w for w in truth.BOOLEANS_TRUE if isinstance(w, str)} == words.SPEC_TRUE_TEXT
    for value in ("y", "Y", "t", " yes ", "yes", "true", "on", "1", "no", "n", 1, True, None):
        try:
            truth.boolean(value, name="v", host="h")
            refused = False
        except InputError as exc:
            refused = "write true or yes" in exc.message
        assert words.two_faced(value) is refused, value
    options = {"net_mtu_enabled": {"type": "bool"}, "net_mtu_name": {"type": "str"}}
    got = action.ambiguous(options, {"net_mtu_enabled": "y", "net_mtu_name": "t"})
    assert got == ["net_mtu_enabled: 'y' is true to this argument spec but false to the "
                   "role's `| bool`; write true or yes"]
    assert action.ambiguous(options, {"net_mtu_enabled": "yes"}) == []
