"""Tests for the net_sysctl role's nodetune_sysctl module (pure functions)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.plugins import load_plugin

mod = load_plugin("plugins/modules/nodetune_sysctl.py")


def _proc(tmp_path: Path, values: dict[str, str], read_only: tuple[str, ...] = ()) -> Path:
    for key, value in values.items():
        file = tmp_path.joinpath(*key.split("."))
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(value + "\n")
        if key in read_only:
            file.chmod(0o444)
    return tmp_path


def test_normalize_folds_tabs_and_bools() -> None:
    assert mod.normalize("4096\t87380\t16777216\n") == "4096 87380 16777216"
    assert mod.normalize(True) == "1"
    assert mod.normalize(250000) == "250000"


@pytest.mark.parametrize("key", ["../etc/passwd", "net/core", "net..core", "single"])
def test_key_path_rejects_path_tricks(key: str) -> None:
    with pytest.raises(ValueError):
        mod.key_path("/proc/sys", key)


def test_read_current_reports_missing_and_read_only(tmp_path: Path) -> None:
    root = _proc(
        tmp_path,
        {"net.core.rmem_max": "4194304", "net.ipv4.tcp_rmem": "4096\t131072\t6291456"},
        read_only=("net.core.rmem_max",),
    )
    current, missing, read_only = mod.read_current(
        str(root), ["net.core.rmem_max", "net.ipv4.tcp_rmem", "net.core.default_qdisc"]
    )
    assert current == {"net.core.rmem_max": "4194304", "net.ipv4.tcp_rmem": "4096 131072 6291456"}
    assert missing == ["net.core.default_qdisc"]
    assert read_only == ["net.core.rmem_max"]


def test_plan_only_differing_settable_keys() -> None:
    current = {"a.b": "1", "a.c": "4096 131072 6291456", "a.d": "5"}
    settings = {"a.b": 1, "a.c": "4096 131072  67108864", "a.d": 7, "a.e": 3}
    assert mod.plan(settings, current, skip=["a.d"]) == {
        "a.c": {"before": "4096 131072 6291456", "after": "4096 131072 67108864"},
    }


def test_loadable_cc_finds_compressed_modules(tmp_path: Path) -> None:
    ipv4 = tmp_path / "6.1.0" / "kernel" / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "tcp_bbr.ko.xz").write_text("")
    (ipv4 / "tcp_htcp.ko").write_text("")
    (ipv4 / "udp_tunnel.ko").write_text("")
    assert mod.loadable_cc(str(tmp_path), "6.1.0") == ["bbr", "htcp"]
    assert mod.loadable_cc(str(tmp_path), "no-such-kernel") == []


def test_check_cc_lists_what_is_available() -> None:
    assert mod.check_cc("bbr", ["reno", "cubic"], ["bbr"]) is None
    message = mod.check_cc("vegas2", ["reno", "cubic"], ["bbr"])
    assert message is not None
    assert "net_sysctl_tcp_congestion_control" in message
    assert "reno, cubic" in message and "bbr" in message


def test_render_sorted_lines() -> None:
    assert mod.render({"b.x": "2", "a.y": "1"}) == "a.y = 1\nb.x = 2\n"


def test_read_only_bit_respected_by_kernel_style_mode(tmp_path: Path) -> None:
    root = _proc(tmp_path, {"net.core.wmem_max": "1"}, read_only=("net.core.wmem_max",))
    assert not os.stat(root / "net/core/wmem_max").st_mode & 0o222


def test_refused_congestion_control_names_the_allowed_ones(tmp_path: Path) -> None:
    allowed = tmp_path / "net" / "ipv4" / "tcp_allowed_congestion_control"
    allowed.parent.mkdir(parents=True)
    allowed.write_text("reno bbr\n")
    hint = mod.write_hint("net.ipv4.tcp_congestion_control",
                          PermissionError(1, "Operation not permitted"), str(tmp_path))
    assert "tcp_allowed_congestion_control (reno bbr)" in hint
    assert mod.write_hint("net.ipv4.tcp_rmem", OSError(22, "Invalid"), str(tmp_path)) == ""
