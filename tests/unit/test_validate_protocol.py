"""The worker's line protocol: one definition, both sides, and hostile output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodetune.collective.launch import worker_files
from nodetune.measure import protocol
from tests.conftest import IN_OWN_PIDS, own_pids_or_skip


def test_encode_decode_round_trip() -> None:
    line = protocol.encode("size", bytes=1024, busbw=1.5, text="a \"quoted\"\nline")
    assert line.startswith(protocol.MARK) and line.endswith("\n")
    assert line.count("\n") == 1, "one event, one line, even with a newline in a field"
    assert protocol.decode(line.rstrip("\n")) == {
        "event": "size", "bytes": 1024, "busbw": 1.5, "text": "a \"quoted\"\nline"}


@pytest.mark.parametrize("line", [
    "", "NCCL INFO Channel 00/02", "@@nodetune", "@@nodetune ", "@@nodetune {not json",
    '@@nodetune {"event": "size", "bytes": 1', "@@nodetune [1, 2]", '@@nodetune "size"',
    "@@nodetune null", '@@nodetune {"no_event": 1}', '@@nodetune {"event": 7}',
    ' @@nodetune {"event": "done"}', '@@nodetune\t{"event": "done"}',
])
def test_anything_else_is_not_an_event(line: str) -> None:
    assert protocol.decode(line) is None


def test_last_events_keeps_the_last_of_each_kind() -> None:
    lines = ["noise", protocol.encode("probe", n=1), "@@nodetune {torn",
             protocol.encode("reaped", count=2), protocol.encode("probe", n=2)]
    got = protocol.last_events(line.rstrip("\n") for line in lines)
    assert got == {"probe": {"event": "probe", "n": 2}, "reaped": {"event": "reaped", "count": 2}}


def test_uploaded_worker_speaks_it_on_a_node_without_nodetune(tmp_path: Path) -> None:
    # As on a node: the two uploaded files in a directory, a bare interpreter (-S -E: no
    # site-packages, so no nodetune package to fall back on), the worker's serve verb with
    # stdin closed: it answers the probe and, with no torch, ends. In a PID namespace of
    # its own: serve sweeps earlier runs' processes from /proc, which on this machine holds
    # the lab's nodes' too (tests/conftest.py: IN_OWN_PIDS).
    own_pids_or_skip()
    for name, data in worker_files().items():
        (tmp_path / name).write_bytes(data)
    out = subprocess.run([*IN_OWN_PIDS, sys.executable, "-S", "-E", "nodetune_worker.py", "serve"],
                         cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120,
                         stdin=subprocess.DEVNULL).stdout
    probe = protocol.last_events(out.splitlines())["probe"]
    assert probe["python"] == sys.version.split()[0]
    assert "torch_error" in probe  # -S hides torch too: reported, not raised
    # The worker's lines are the protocol's lines, byte for byte, each of them.
    lines = [ln for ln in out.splitlines() if ln.startswith(protocol.MARK)]
    assert lines
    for line in lines:
        doc = json.loads(line[len(protocol.MARK):])
        assert line + "\n" == protocol.encode(doc.pop("event"), **doc)
