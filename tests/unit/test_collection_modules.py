"""The collection's shared modules (plugins/modules): modprobe and dnf_versionlock."""

from __future__ import annotations

from pathlib import Path

from tests.plugins import load_plugin

modprobe = load_plugin("plugins/modules/modprobe.py")
versionlock = load_plugin("plugins/modules/dnf_versionlock.py")

# The entry format dnf4's versionlock plugin writes and lists: name-epoch:version-release.*
# ("!" marks an exclude, which locks nothing).
VERSIONLOCK_LIST = """\
nvidia-container-toolkit-0:1.17.8-1.*
nvidia-container-toolkit-base-0:1.17.8-1.*
!kernel-0:5.14.0-503.14.1.el9_5.*
"""


def test_loaded_modules_reads_first_field(tmp_path: Path) -> None:
    proc = tmp_path / "modules"
    proc.write_text("tcp_bbr 20480 3 - Live 0x0\nmlx5_ib 471040 0 - Live 0x0\n")
    assert modprobe.loaded_modules(str(proc)) == {"tcp_bbr", "mlx5_ib"}


def test_loaded_modules_absent_file_is_empty(tmp_path: Path) -> None:
    assert modprobe.loaded_modules(str(tmp_path / "none")) == set()


def test_builtin_modules_and_presence(tmp_path: Path) -> None:
    release = tmp_path / "6.1.0-test"
    release.mkdir()
    (release / "modules.builtin").write_text(
        "kernel/net/ipv4/tcp_cubic.ko\nkernel/drivers/net/dummy-x.ko\n")
    builtin = modprobe.builtin_modules(str(tmp_path), "6.1.0-test")
    assert builtin == {"tcp_cubic", "dummy_x"}
    assert modprobe.is_present("tcp_cubic", set(), builtin)
    assert modprobe.is_present("dummy-x", set(), builtin)
    assert modprobe.is_present("tcp_bbr", {"tcp_bbr"}, builtin)
    assert not modprobe.is_present("tcp_bbr", {"tcp_htcp"}, builtin)


def test_sys_module_lists_entries(tmp_path: Path) -> None:
    (tmp_path / "tcp_cubic").mkdir()
    (tmp_path / "nf-conntrack").mkdir()
    assert modprobe.sys_modules(str(tmp_path)) == {"tcp_cubic", "nf_conntrack"}
    assert modprobe.sys_modules(str(tmp_path / "absent")) == set()


def test_module_name_rejects_options_and_paths() -> None:
    for bad in ("-r", "a b", "../x", "x;y", ""):
        assert not modprobe.NAME_RE.match(bad)
    assert modprobe.NAME_RE.match("tcp_bbr")


def test_versionlock_parses_locks_and_skips_excludes() -> None:
    locks = versionlock.parse_locks(VERSIONLOCK_LIST + "Last metadata expiration check: 0:01:02 ago\n")
    assert [name for name, _ in locks] == [
        "nvidia-container-toolkit", "nvidia-container-toolkit-base"]


def test_versionlock_specs_to_add_matches_names_and_globs() -> None:
    locks = versionlock.parse_locks(VERSIONLOCK_LIST)
    assert versionlock.specs_to_add(["nvidia-container-toolkit"], locks) == []
    assert versionlock.specs_to_add(["nvidia-container-*"], locks) == []
    assert versionlock.specs_to_add(["libnvidia-*", "nvidia-container-toolkit-base"], locks) == [
        "libnvidia-*"]
    assert versionlock.specs_to_add(["kernel"], locks) == ["kernel"]


def test_versionlock_spec_pattern() -> None:
    assert versionlock.SPEC_RE.match("cuda-drivers*")
    assert versionlock.SPEC_RE.match("libnvidia-compute-550")
    assert not versionlock.SPEC_RE.match("x; rm -rf /")
    assert not versionlock.SPEC_RE.match("a b")
