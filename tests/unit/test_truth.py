"""Every yes/no nodetune reads from the inventory is read by one rule, Ansible's own.

The expected values come from the installed ansible-core (2.19 in .venv, 2.21 in the
ansible-core 2.21 pass): ``convert_bool.boolean``, which a role's argument spec checks its
``type: bool`` variables with, and the ``bool`` filter the roles' tasks read them with. Not
from a table written here. The readers nodetune has (reboot through Slurm, a role's
``*_enabled`` for validate's data interface, check's expected values, the health inputs,
the NCCL settings) all go through nodetune.ansible.truth.boolean.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils.parsing import convert_bool
from ansible.plugins.filter.core import to_bool

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host
from nodetune.apply.busy import _via_slurm
from nodetune.check.expect import expectations
from nodetune.errors import InputError
from nodetune.measure.node_inputs import inputs
from nodetune.validate.datapath import _enabled

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
    is false to both). An explicit null aside: validate reads it as unset (on), check
    refuses it."""
    try:
        want: bool | None = truth.boolean(value, name="v", host="n1")
    except InputError:
        want = None
    readers: dict[str, Callable[[Any], object]] = {
        "apply: nodetune_reboot_via_slurm": lambda v: _via_slurm(Host("n1", ("gpu_nodes",), {
            "nodetune_slurm_controller": "ctl", "nodetune_reboot_via_slurm": v}), {}),
        "validate: net_mtu_enabled": lambda v: _enabled(v, "net_mtu_enabled", "n1"),
        "check: net_mtu_enabled": lambda v: expectations(
            Host("n1", ("gpu_nodes",), {"net_mtu_enabled": v})).mtu_enabled,
        "check: net_sysctl_enabled": lambda v: expectations(
            Host("n1", ("gpu_nodes",), {"net_sysctl_enabled": v})).sysctl_enabled,
        "health: nvidia_driver_peermem_enabled": lambda v: inputs(
            Host("n1", ("gpu_nodes",), {"nvidia_driver_peermem_enabled": v})).peermem_enabled.value,
    }
    for reader, read in readers.items():
        name = reader.split(": ")[1]
        if want is None and not (value is None and reader == "validate: net_mtu_enabled"):
            with pytest.raises(InputError, match=name) as exc:
                read(value)
            assert exc.value.host == "n1"
        else:
            assert read(value) is (True if value is None else want), reader

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
