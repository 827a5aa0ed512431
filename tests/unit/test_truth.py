"""Every yes/no nodetune reads from the inventory agrees with the plays' ``| bool``.

The expected values come from ansible-core's own ``bool`` filter, imported from the
installed ansible-core (2.19 in .venv, 2.21 in the ansible-core 2.21 pass), not from a
table written here; the readers nodetune has (reboot through Slurm, a role's
``*_enabled``, check's expected values) go through nodetune.ansible.truth.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from ansible.plugins.filter.core import to_bool

from nodetune.ansible import truth
from nodetune.ansible.inventory import Host
from nodetune.apply.busy import _via_slurm
from nodetune.validate.datapath import _enabled

VALUES: list[Any] = [True, False, 1, 0, 2, "yes", "Yes", "on", "ON", "true", "True", "1",
                     "no", "off", "false", "FALSE", "0", "y", "n", "t", "f", "maybe", "", " yes",
                     1.0, 0.0, None]


def _ansible(value: Any) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(to_bool(value))


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_as_bool_is_ansibles_bool_filter(value: Any) -> None:
    assert truth.as_bool(value) is _ansible(value)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_known_values_are_the_ones_the_filter_takes_without_a_warning(value: Any) -> None:
    found = truth.known(value)
    if found is not None:
        assert found is _ansible(value)
    else:
        assert value in (2, "y", "n", "t", "f", "maybe", "", " yes", 1.0, 0.0, None)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_readers_agree_with_the_play(value: Any) -> None:
    host = Host("n1", ("gpu_nodes",), {"nodetune_slurm_controller": "ctl", "nodetune_reboot_via_slurm": value})
    assert _via_slurm(host, {}) is _ansible(value)
    assert _enabled(value) is (value is None or _ansible(value))
