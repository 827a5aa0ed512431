"""Descendants: a process group below this one, in a session of its own, is found and ended."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from nodetune.procs import Descendants


def test_a_child_in_its_own_session_is_found_and_ended() -> None:
    # Like an ansible-core worker: its own session, a task process below it.
    child = subprocess.Popen([sys.executable, "-c", "import subprocess; "
                              "subprocess.run(['sleep', '30'])"], start_new_session=True)
    try:
        below = Descendants()
        deadline = time.monotonic() + 10
        while child.pid not in below.groups and time.monotonic() < deadline:
            below.refresh()
            time.sleep(0.05)
        assert child.pid in below.groups, "the child's group (its own session) is seen"
        while len(below.groups[child.pid]) < 2 and time.monotonic() < deadline:
            below.refresh()  # and the sleep below it
            time.sleep(0.05)
        assert below.alive() == [child.pid]
        assert below.end(grace=2) == [child.pid]
        assert child.wait(timeout=5) != 0
        assert below.alive() == []
    finally:
        if child.poll() is None:
            child.kill()


def test_nothing_to_end_and_no_proc_is_harmless() -> None:
    assert Descendants().end() == []
    nowhere = Descendants(proc=Path("/nonexistent"))
    nowhere.refresh()
    assert nowhere.alive() == [] and nowhere.end() == []
