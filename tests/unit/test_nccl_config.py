"""Tests for the nccl_config role's filter plugin."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]




mod = load_plugin("plugins/filter/nccl_config.py")
KNOWN = yaml.safe_load((ROOT / "roles/nccl_config/vars/main.yml").read_text())[
    "__nccl_config_known"
]
SOURCES = {"NCCL_IB_GID_INDEX": "nccl_config_ib_gid_index", "NCCL_IB_TC": "nccl_config_ib_tc"}


def test_valid_settings_pass() -> None:
    settings = {
        "NCCL_SOCKET_IFNAME": "^lo,docker",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_IB_GID_INDEX": 3,
        "NCCL_IB_TC": "106",
        "NCCL_NET_GDR_LEVEL": "PHB",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_DISABLE": True,
    }
    assert mod.nccl_config_check(settings, KNOWN, SOURCES) == {"errors": [], "warnings": []}


def test_type_errors_name_the_variable() -> None:
    result = mod.nccl_config_check(
        {"NCCL_IB_GID_INDEX": "three", "NCCL_IB_TC": 300, "NCCL_DEBUG": "LOUD"}, KNOWN, SOURCES
    )
    assert result["errors"] == [
        "nccl_config_ib_gid_index (NCCL_IB_GID_INDEX): 'three' is not an integer",
        "nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255",
        "nccl_config_extra.NCCL_DEBUG (NCCL_DEBUG): 'LOUD' is not one of VERSION, WARN, INFO, TRACE",
    ]


def test_gdr_level_takes_names_or_numbers() -> None:
    assert mod.nccl_config_check({"NCCL_NET_GDR_LEVEL": 2}, KNOWN, {})["errors"] == []
    assert mod.nccl_config_check({"NCCL_NET_GDR_LEVEL": "FAR"}, KNOWN, {})["errors"] == [
        "nccl_config_extra.NCCL_NET_GDR_LEVEL (NCCL_NET_GDR_LEVEL): 'FAR' is not an integer or one of LOC, PIX, PXB, PHB, SYS",
    ]


def test_unknown_keys_warn_bad_names_and_lines_fail() -> None:
    result = mod.nccl_config_check(
        {"NCCL_NEW_THING": 1, "CUDA_VISIBLE_DEVICES": 0, "NCCL_ALGO": "Ring\nX=1"}, KNOWN, {}
    )
    assert result["warnings"] == [
        "nccl_config_extra.NCCL_NEW_THING: NCCL_NEW_THING is not a variable nodetune knows; written as given, check the NCCL docs",
    ]
    assert len(result["errors"]) == 2
    assert "'CUDA_VISIBLE_DEVICES' is not an NCCL_* variable name" in result["errors"][0]
    assert "single non-empty line" in result["errors"][1]


MARKER = "# {mark} nodetune nccl_config"
BLOCK = "#\n# Ansible managed\n#\nNCCL_IB_TC=106"
KEPT = "# BEGIN nodetune nccl_config\n" + BLOCK + "\n# END nodetune nccl_config\n"


def _state(content: str | None, mode: str = "0644", uid: int = 0) -> dict[str, object]:
    return {"path": "/etc/nccl.conf", "content": content, "mode": mode, "uid": uid, "gid": 0}


def test_a_file_already_as_blockinfile_would_leave_it_needs_no_call() -> None:
    kept = mod.nccl_config_block_kept
    assert kept(_state(KEPT), "/etc/nccl.conf", MARKER, BLOCK, "0644", 0, 0)
    # Lines of others around the block stay as they are: still nothing to change.
    assert kept(_state("NCCL_DEBUG=WARN\n" + KEPT + "# theirs\n"), "/etc/nccl.conf", MARKER,
                BLOCK, "0644", 0, 0)


def test_any_difference_blockinfile_would_make_needs_the_call() -> None:
    kept = mod.nccl_config_block_kept
    args = ("/etc/nccl.conf", MARKER, BLOCK, "0644", 0, 0)
    for state in (
        None,                                                     # no file, or unreadable
        _state(None),                                             # too large to report
        _state(""),                                               # empty: block missing
        _state(KEPT.replace("NCCL_IB_TC=106", "NCCL_IB_TC=104")),  # value drifted
        _state(KEPT.replace("106\n", "106\nNCCL_X=1\n")),          # a line added in the block
        _state(KEPT.replace("# END nodetune nccl_config\n", "")),  # END marker gone
        _state(KEPT + KEPT.replace("106", "1")),                   # the last block is stale
        _state(KEPT, mode="0600"),                                # mode drifted
        _state(KEPT, uid=1000),                                   # owner drifted
        {**_state(KEPT), "path": "/etc/other.conf"},              # another file
    ):
        assert not kept(state, *args), state
