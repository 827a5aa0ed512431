"""A full disk under the runs folder: every verb exits 3 naming the path, leaves no
half-written file, and still prints its JSON document.

The disk is real: a tmpfs of 256 KiB this test mounts under its own temp dir,
fills, and unmounts (root only, as the lab's tests are).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_nodetune


@contextlib.contextmanager
def _small_fs(tmp_path: Path, options: str) -> Iterator[Path]:
    """A tmpfs of this test's own under ``tmp_path`` with a ``runs`` folder; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "nodetune-test-full", str(mnt)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        (mnt / "runs").mkdir()
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A runs folder on a filesystem with no byte left (directories can still be made)."""
    with _small_fs(tmp_path, "size=256k,mode=0755") as mnt:
        _fill(mnt)
        yield mnt / "runs"


@pytest.fixture()
def no_inodes(tmp_path: Path) -> Iterator[Path]:
    """A runs folder on a filesystem where no new directory fits."""
    with _small_fs(tmp_path, "size=256k,nr_inodes=2,mode=0755") as mnt:
        yield mnt / "runs"


def inventory(tmp_path: Path, hosts: dict[str, dict[str, object]]) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def here(tmp_path: Path) -> Path:
    """This machine, checked locally (read-only); facts gathers nothing on a full disk."""
    return inventory(tmp_path, {"here": {"ansible_connection": "local",
                                         "ansible_python_interpreter": sys.executable,
                                         "net_sysctl_enabled": False}})


def unreachable(tmp_path: Path) -> Path:
    known = tmp_path / "known_hosts"
    known.write_text("")
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 1,
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"}
    return inventory(tmp_path, {"a": gone, "b": gone})


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if not p.is_dir())


VERBS = {
    # verb: (inventory, extra arguments, what the run measured before the write failed)
    "check": (here, ["--skip-allreduce"], "checks"),
    "validate": (unreachable, ["--timeout", "5"], None),
    "facts": (here, [], None),
    "apply": (unreachable, ["--check"], None),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_full_disk_is_exit_3_naming_the_path_and_leaves_no_partial_file(
        verb: str, tmp_path: Path, full_disk: Path) -> None:
    make_inventory, extra, measured = VERBS[verb]
    res = run_nodetune(verb, str(make_inventory(tmp_path)), "--json", *extra,
                       runs_dir=full_disk, timeout=300)
    assert res.code == 3, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stdout
    doc = res.json()
    assert doc["verb"] == verb and doc["exit_code"] == 3 and doc["status"] == "error"
    assert doc["error"]["type"] == "RecordError"
    (run_dir,) = full_disk.iterdir()
    assert str(run_dir) in doc["error"]["message"]
    assert "No space left on device" in doc["error"]["message"]
    assert str(run_dir) in res.stderr
    if measured:
        assert doc[measured], "the document keeps what the run measured"
    # Nothing half-written: no report.json(.tmp), no hidden temp file, no runner leftovers.
    assert files_under(full_disk) == []


def test_bad_input_on_a_full_disk_is_still_reported_and_exit_3(
        tmp_path: Path, full_disk: Path) -> None:
    res = run_nodetune("validate", str(unreachable(tmp_path)), "--json", "--min-busbw", "-1",
                       runs_dir=full_disk)
    assert res.code == 3, res.stdout + res.stderr
    doc = res.json()
    assert doc["error"]["type"] == "RecordError"
    assert doc["error"]["previous"]["type"] == "InputError"
    assert "--min-busbw" in res.stderr and str(full_disk) in res.stderr
    assert files_under(full_disk) == []


def test_no_room_for_a_run_directory_is_exit_3(tmp_path: Path, no_inodes: Path) -> None:
    res = run_nodetune("check", str(here(tmp_path)), "--json", runs_dir=no_inodes)
    assert res.code == 3, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["error"]["type"] == "RecordError"
    assert f"cannot create a run directory under {no_inodes}" in doc["error"]["message"]
    assert list(no_inodes.iterdir()) == []


def _fill(mnt: Path) -> None:
    """Write until the filesystem has no byte left."""
    with (mnt / "filler").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass


def test_runs_open_on_a_full_disk_is_exit_3(tmp_path: Path) -> None:
    """An old record's page cannot be written: infrastructure, not bad input."""
    with _small_fs(tmp_path, "size=256k,mode=0755") as mnt:
        run = mnt / "runs" / "20260101T000000Z-check"
        run.mkdir()
        (run / "report.json").write_text(json.dumps(
            {"schema_version": 1, "verb": "check", "run_id": run.name, "status": "pass",
             "exit_code": 0}))
        _fill(mnt)
        res = run_nodetune("runs", run.name, "--open", "--json", runs_dir=mnt / "runs")
        assert res.code == 3, res.stdout + res.stderr
        assert res.json()["error"]["type"] == "RecordError"
        assert files_under(run) == ["report.json"]
