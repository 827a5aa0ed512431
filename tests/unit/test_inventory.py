"""Inventory loading through Ansible's own parser, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetune.ansible.inventory import load
from nodetune.errors import InventoryError

REPO = Path(__file__).resolve().parents[2]


def _dir_inventory(tmp_path: Path) -> Path:
    root = tmp_path / "prod"
    (root / "group_vars").mkdir(parents=True)
    (root / "host_vars").mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        node-a: {ansible_host: 10.0.0.1}\n        node-b:\n"
        "    login:\n      hosts:\n        login-1:\n"
    )
    (root / "group_vars" / "gpu_nodes.yml").write_text("net_mtu_default: 9000\n")
    (root / "host_vars" / "node-b.yml").write_text("net_mtu_default: 4200\n")
    return root


def test_directory_with_group_and_host_vars(tmp_path: Path) -> None:
    inv = load(_dir_inventory(tmp_path))
    assert [h.name for h in inv.hosts] == ["node-a", "node-b", "login-1"]
    assert inv.host("node-a").vars["net_mtu_default"] == 9000
    assert inv.host("node-b").vars["net_mtu_default"] == 4200
    assert inv.host("node-a").address == "10.0.0.1"
    assert inv.host("node-b").address == "node-b"
    assert [h.name for h in inv.in_group("gpu_nodes")] == ["node-a", "node-b"]
    assert "login" in inv.groups


def test_host_vars_come_from_the_inventory_never_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's current directory adds no host variables (apply's playbooks never see
    them), and two inventories read from their own directories in one process keep their
    own: Ansible caches a no-play base directory '.' under that name."""
    for name, value in (("a", "1"), ("b", "2"), ("cwd", "99")):
        (tmp_path / name / "host_vars").mkdir(parents=True)
        (tmp_path / name / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n")
        (tmp_path / name / "host_vars" / "h1.yml").write_text(f"x: {value}\n")
    monkeypatch.chdir(tmp_path / "cwd")
    assert load(tmp_path / "a" / "hosts.yml").host("h1").vars["x"] == 1
    for name, want in (("a", 1), ("b", 2)):
        monkeypatch.chdir(tmp_path / name)
        assert load(tmp_path / name / "hosts.yml").host("h1").vars["x"] == want


def test_ini_inventory(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu_nodes]\ngpu1 ansible_host=192.0.2.1 ansible_user=ubuntu\ngpu2\n")
    inv = load(path)
    assert inv.host("gpu1").vars["ansible_user"] == "ubuntu"
    assert inv.host("gpu1").connection == "ssh"


@pytest.mark.parametrize(("pattern", "expected"), [
    ("node-b", ["node-b"]), ("gpu_nodes:!node-a", ["node-b"]), ("node-*", ["node-a", "node-b"]),
])
def test_limit_uses_ansible_patterns(tmp_path: Path, pattern: str, expected: list[str]) -> None:
    inv = load(_dir_inventory(tmp_path), limit=pattern)
    assert [h.name for h in inv.hosts] == expected


def test_missing_path_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="does not exist") as err:
        load(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)
    assert err.value.exit_code == 2


def test_unparsable_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("all:\n  hosts: [\n")
    with pytest.raises(InventoryError, match=r"cannot parse inventory .*bad\.yml") as err:
        load(bad)
    assert "bad.yml:3" in str(err.value)


def test_inventory_without_hosts(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yml"
    empty.write_text("all:\n  vars:\n    x: 1\n")
    with pytest.raises(InventoryError, match="defines no hosts"):
        load(empty)


def test_limit_matching_nothing_lists_hosts(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="--limit 'gpu9' matches no host") as err:
        load(_dir_inventory(tmp_path), limit="gpu9")
    assert "node-a" in str(err.value)


def test_example_inventory_parses() -> None:
    inv = load(REPO / "inventory" / "example")
    assert inv.in_group("gpu_nodes"), "the example inventory has a gpu_nodes group"
