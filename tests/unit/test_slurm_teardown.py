"""Tearing down the Slurm launcher's allocation never replaces what the run measured: a
failed scancel, squeue or controller connection is recorded beside the verdict, and a job
is "cancelled" only when squeue showed it gone.

The allocation runs through the local session against stand-ins for Slurm's commands
(salloc, srun, sbcast, scancel, squeue, scontrol: shell scripts on PATH that answer as
Slurm 22.05 does on the lab); the real commands are exercised in
tests/integration/test_slurm_launcher.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nodetune.errors import SlurmError, SSHError
from nodetune.remote.session import CommandResult
from nodetune.slurm import allocation
from nodetune.slurm.allocation import Allocation
from nodetune.slurm.commands import AllocOptions, NodeCommand
from nodetune.slurm.model import SlurmOptions, SlurmPlan

GRANTED = "salloc: Granted job allocation 42\nsalloc: Waiting for resource configuration\n"
GONE_22_05 = "slurm_load_jobs error: Invalid job id specified\n"


class Controller:
    """Stands in for the controller's session: each command's answer, or an exception."""

    def __init__(self, **answers: CommandResult | Exception) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def run(self, argv: list[str], timeout: float) -> CommandResult:
        self.asked.append(argv)
        answer = self.answers.get(argv[0], CommandResult(exit_status=0, stdout="", stderr=""))
        if isinstance(answer, Exception):
            raise answer
        return answer


def _alloc(session: Controller) -> Allocation:
    return Allocation(session=session, where="ctl", job="42",  # type: ignore[arg-type]
                      names={"a": "a"}, run_id="ab" * 16, workdir="/tmp/x", timeout_s=0.0)


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocation, "CANCEL_WAIT_S", 0.0)
    monkeypatch.setattr(allocation, "KILL_WAIT_MARGIN_S", 0.0)


def test_a_failed_squeue_is_not_a_cancelled_job() -> None:
    alloc = _alloc(Controller(squeue=CommandResult(
        exit_status=1, stdout="", stderr="squeue: error: Unable to contact slurm controller "
                                          "(connect failure)\n")))
    with pytest.raises(SlurmError, match="whether job 42 ended is unknown") as err:
        allocation.cancel(alloc)
    assert "Unable to contact slurm controller" in err.value.message
    assert not alloc.cancelled


def test_a_job_slurmctld_no_longer_knows_is_gone() -> None:
    alloc = _alloc(Controller(squeue=CommandResult(exit_status=1, stdout="",
                                                   stderr=GONE_22_05)))
    allocation.cancel(alloc)
    assert alloc.cancelled


@pytest.mark.parametrize("answers", [
    {"scancel": CommandResult(exit_status=1, stdout="",
                              stderr="scancel: error: Kill job error on job id 42: "
                                     "Unable to contact slurm controller\n")},
    {"scancel": SSHError("connection to ctl lost", host="ctl")},
    {"squeue": CommandResult(exit_status=0, stdout="42 COMPLETING a\n", stderr="")},
])
def test_a_teardown_problem_is_recorded_never_raised(
        answers: dict[str, CommandResult | Exception]) -> None:
    alloc = _alloc(Controller(**answers))
    said: list[str] = []
    allocation.tear_down(alloc, {}, said.append)
    assert not alloc.cancelled and alloc.teardown_error
    assert alloc.to_dict()["teardown_error"] == alloc.teardown_error
    assert said == [f"job 42 not shown cancelled: {alloc.teardown_error}"]


def _stand_ins(tmp_path: Path, scancel: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "salloc": f"printf '{GRANTED}' >&2",
        "srun": "exit 0",
        "sbcast": "exit 0",
        "scontrol": "echo 'KillWait = 0 sec'",
        "squeue": "exit 0",
        "scancel": scancel,
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n# stand-in for Slurm's {name}\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _plan() -> SlurmPlan:
    return SlurmPlan(options=SlurmOptions(), controller=None, names={"a": "a", "b": "b"})


def test_a_failed_scancel_leaves_the_runs_result_standing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _stand_ins(tmp_path, "echo 'scancel: error: Unable to contact slurm "
                                   "controller (connect failure)' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    said: list[str] = []
    with allocation.allocated(_plan(), AllocOptions(), files={}, progress=said.append,
                              reap=lambda _r, _w: {"a": NodeCommand({}, ["true"])}) as alloc:
        verdict = "pass"  # what the run measured inside the allocation
    assert verdict == "pass"
    assert not alloc.cancelled
    assert "Unable to contact slurm controller" in (alloc.teardown_error or "")
    assert alloc.to_dict()["teardown_error"] == alloc.teardown_error
    assert said[-1].startswith("job 42 not shown cancelled: ")


def test_the_runs_own_error_stands_over_a_failed_teardown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _stand_ins(tmp_path, "exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(KeyError, match="the run's own"), allocation.allocated(
            _plan(), AllocOptions(), files={},
            reap=lambda _r, _w: {"a": NodeCommand({}, ["true"])}) as alloc:
        raise KeyError("the run's own")
    assert alloc.teardown_error and not alloc.cancelled


def test_a_clean_teardown_is_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _stand_ins(tmp_path, "exit 0")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with allocation.allocated(_plan(), AllocOptions(), files={},
                              reap=lambda _r, _w: {"a": NodeCommand({}, ["true"])}) as alloc:
        pass
    assert alloc.cancelled and alloc.teardown_error is None
    assert "teardown_error" not in alloc.to_dict()


def test_the_human_view_says_it_beside_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    from nodetune.cli import slurm_view
    slurm_view.show_teardown({"status": "pass", "slurm_job": {
        "job_id": "42", "cancelled": False, "teardown_error": "`scancel` failed on ctl"}})
    err = " ".join(capsys.readouterr().err.split())
    assert "job 42 was not shown cancelled: `scancel` failed on ctl (the verdict above stands)" \
        in err
    slurm_view.show_teardown({"status": "pass", "slurm_job": {"job_id": "42",
                                                              "cancelled": True}})
    assert capsys.readouterr().err == ""
