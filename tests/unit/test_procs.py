"""RunMark: a run's processes are found by their mark and ended, whoever their parent now is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nodetune.procs import RunMark


def _wait_for(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_an_orphan_in_a_session_of_its_own_is_found_and_ended() -> None:
    # Like an ansible-core worker's task once ansible-playbook is killed: the process that
    # started it is gone, it belongs to init, in a session of its own.
    mark = RunMark()
    starter = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; "
         "p = subprocess.Popen(['sleep', '31.4'], start_new_session=True, "
         "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"],
        env={**os.environ, **mark.env}, capture_output=True, text=True, check=True)
    orphan = int(starter.stdout)
    bystander = subprocess.Popen(["sleep", "31.5"], start_new_session=True)  # no mark
    try:
        _wait_for(lambda: mark.pids() == [orphan])
        assert mark.pids() == [orphan]
        assert mark.end(grace=2) == [orphan]
        _wait_for(lambda: not Path(f"/proc/{orphan}").exists() or not mark.pids())
        assert mark.pids() == []
        assert bystander.poll() is None, "a process without the mark is left alone"
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_ignoring_sigterm_gets_sigkill() -> None:
    mark = RunMark()
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
         "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
        env={**os.environ, **mark.env}, stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert mark.end(grace=0.5) == [child.pid]
        assert child.wait(timeout=5) == -9
    finally:
        if child.poll() is None:
            child.kill()


def test_marks_differ_and_nothing_to_end_is_harmless() -> None:
    assert RunMark().value != RunMark().value
    assert RunMark().end() == []
    nowhere = RunMark(proc=Path("/nonexistent"))
    assert nowhere.pids() == [] and nowhere.end() == []
