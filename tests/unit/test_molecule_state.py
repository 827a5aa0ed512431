"""A molecule run has a state directory of its own, gone once the run has ended, failed or
been stopped (tests/molecule/state_dir.py): the scenarios tests/molecule/runs.py starts, and
scripts/ansible-next.sh's, through the same helper. Real molecule on a real scenario
(`molecule list` writes the scenario's state, in a second where `molecule test` takes
minutes), in a temporary-files directory and a HOME of the test's own, so that whatever a
run leaves in either is seen."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.molecule import runs, state_dir

SCENARIO = "net_mtu_netplan"
# The scenario's state, and where it is: what molecule wrote in the run's own directory.
LIST = ('molecule list -s "$1" >/dev/null && ls "$MOLECULE_EPHEMERAL_DIRECTORY" && '
        'echo "state in $MOLECULE_EPHEMERAL_DIRECTORY"')


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path/tmp as the temporary-files directory, tmp_path/home as HOME (molecule's
    default state directory is under $HOME/.ansible/tmp)."""
    for sub in ("tmp", "home"):
        (tmp_path / sub).mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def _state_in(out: str) -> Path:
    [line] = [line for line in out.splitlines() if line.startswith("state in ")]
    return Path(line.removeprefix("state in "))


def _nothing_left(tmp: Path) -> None:
    assert list((tmp / "tmp").iterdir()) == []
    assert list((tmp / "home").glob(".ansible/tmp/molecule.*")) == []


def test_each_scenario_run_has_a_state_directory_of_its_own_gone_after_it(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "command", lambda scenario: ["sh", "-c", LIST, "sh", scenario])
    seen = []
    for _ in range(2):
        code, out, _took = runs._attempt(SCENARIO)
        assert code == 0, out
        where = _state_in(out)
        assert where.parent == tmp / "tmp" and where.name.startswith(state_dir.PREFIX), out
        assert "state.yml" in out.split(), out  # molecule kept the scenario's state there
        assert not where.exists()
        seen.append(where)
        _nothing_left(tmp)
    assert seen[0] != seen[1]


def test_a_scenario_stopped_mid_run_leaves_no_state_directory(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ready = tmp / "ready"
    monkeypatch.setattr(runs, "command", lambda _s: [
        "sh", "-c", 'echo "$MOLECULE_EPHEMERAL_DIRECTORY" > "$1.new" && mv "$1.new" "$1" && '
                    "exec sleep 120", "sh", str(ready)])
    for name, fresh in (("_runs", {}), ("_procs", {}), ("_stopping", False), ("_pool", None)):
        monkeypatch.setattr(runs, name, fresh)
    scenario = "nodetune-no-such-scenario"  # stop()'s `molecule destroy` finds nothing to do
    runs.start([scenario])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the scenario did not start"
        time.sleep(0.05)
    where = Path(ready.read_text().strip())
    assert where.is_dir() and where.parent == tmp / "tmp"
    runs.stop()
    code, _out, _took = runs._runs[scenario].result(timeout=0)
    assert code == -signal.SIGTERM
    assert not where.exists()
    _nothing_left(tmp)


def test_the_command_line_gives_its_command_one_and_removes_it_when_it_fails_or_is_stopped(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As scripts/ansible-next.sh runs net_sysctl_lab: ``python -m tests.molecule.state_dir``."""
    cli = [sys.executable, "-m", "tests.molecule.state_dir", "--"]
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([*cli, "sh", "-c", f"{LIST}; exit 3", "sh", SCENARIO], cwd=runs.REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    where = _state_in(done.stdout)
    assert where.parent == tmp / "tmp" and "state.yml" in done.stdout.split()
    assert not where.exists()
    _nothing_left(tmp)

    # SIGTERM (the run asked to stop) is passed on; the directory goes once the command ends
    proc = subprocess.Popen([*cli, "sh", "-c", 'echo "$MOLECULE_EPHEMERAL_DIRECTORY"; '
                                               "exec sleep 120"],
                            cwd=runs.REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        where = Path(proc.stdout.readline().strip())
        assert where.is_dir() and where.parent == tmp / "tmp"
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.communicate()
    assert not where.exists()
    _nothing_left(tmp)

    usage = subprocess.run(cli[:-1], cwd=runs.REPO, capture_output=True, text=True,
                           timeout=60, check=False)
    assert usage.returncode == 2 and "ARGV" in usage.stderr


def _finished(where: Path) -> bool:
    """An async job file in ``where`` holds the job's result (Ansible's async_wrapper writes
    ``{"started": 1, ...}`` first, then the module's result with its ``rc``)."""
    for job in where.glob("j*"):
        with contextlib.suppress(OSError, ValueError):
            if "rc" in json.loads(job.read_text()):
                return True
    return False


def test_async_job_files_stay_in_the_run_s_own_directory(tmp: Path) -> None:
    """The podman driver creates and destroys instances in async tasks on this machine, with
    ``ansible_async_dir`` set to ``$HOME/.ansible_async/`` by its own set_fact (its
    create.yml and destroy.yml), and leaves the job files there. A run's HOME is its own:
    the files go with its directory. A real play of that pattern, its job left unpolled as
    the driver leaves its own (Ansible keeps the job file)."""
    play = tmp / "async.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.set_fact:\n"
        "        ansible_async_dir: \"{{ lookup('env', 'HOME') }}/.ansible_async/\"\n"
        "    - ansible.builtin.command: 'true'\n      async: 30\n      poll: 0\n")
    playbook = Path(sys.executable).parent / "ansible-playbook"
    with state_dir.own(os.environ) as env:
        where = Path(env["HOME"]) / ".ansible_async"
        assert Path(env["HOME"]).parent == Path(env[state_dir.ENV])
        done = subprocess.run(
            [str(playbook), "-i", "localhost,", str(play), "-e",
             f"ansible_python_interpreter={sys.executable}"],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        # The job file says "started" before the module runs (and unpacks its payload in
        # TMPDIR), then the result: wait for that, so that the job has ended and left
        # nothing but the file before its directory goes.
        deadline = time.monotonic() + 30
        while not _finished(where) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _finished(where), f"no finished async job file in {where}"
    assert not where.exists()
    assert not (tmp / "home" / ".ansible_async").exists()
    _nothing_left(tmp)
