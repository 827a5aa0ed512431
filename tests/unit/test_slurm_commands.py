"""The Slurm launcher's commands (salloc/srun/sbcast/scancel argv, the step script's
quoting) and how a step's output is read back.

The srun/salloc lines below are Slurm 22.05's own output, as the lab's slurmctld/slurmd
printed them (``srun --label``, ``salloc --no-shell``)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodetune.collective.plan import Options
from nodetune.errors import InputError, SlurmError
from nodetune.remote.session import CommandResult
from nodetune.slurm import allocation, commands
from nodetune.slurm.allocation import Allocation, _refused
from nodetune.slurm.commands import AllocOptions, NodeCommand
from nodetune.slurm.step import PairStep
from nodetune.validate import launcher

NODES = ["gpu-a", "gpu-b"]
RUN = "ab12cd34" * 4  # a run id (nodetune.remote.session.RUN_ID: 32 hex digits)


def test_salloc_takes_exactly_the_nodes_exclusively_with_every_option() -> None:
    argv = commands.salloc(NODES, AllocOptions(partition="p1", reservation="maint",
                                               account="ops", time_limit="1:00:00",
                                               gres="gpu:8", wait_s=30), run_id=RUN)
    assert argv == ["salloc", "--no-shell", "--exclusive", "--immediate=30", "-N", "2",
                    "-w", "gpu-a,gpu-b", "-J", "nodetune-validate",
                    f"--comment=nodetune-run-{RUN}", "--partition=p1",
                    "--reservation=maint", "--account=ops", "--time=1:00:00", "--gres=gpu:8"]
    assert commands.salloc(NODES, AllocOptions(), run_id=RUN)[-3:-1] == [
        "-J", "nodetune-validate"]
    with pytest.raises(InputError):
        commands.salloc(NODES, AllocOptions(), run_id="x; scancel -u root")


def test_a_job_whose_salloc_was_interrupted_is_found_by_its_runs_comment() -> None:
    assert commands.by_comment() == ["squeue", "-h", "-n", "nodetune-validate", "-o", "%i %k"]
    listed = f"41 nodetune-run-{'a1' * 16}\n42 nodetune-run-{RUN}\n43 (null)\n"
    assert commands.job_of_run(listed, RUN) == ["42"]
    assert commands.job_of_run(listed, "ffff0000") == []


@pytest.mark.parametrize("bad", [
    {"partition": "a b"}, {"partition": "p;rm -rf /"}, {"reservation": "-x"},
    {"account": "$(id)"}, {"time_limit": "soon"}, {"gres": "gpu 8"}, {"wait_s": 0}])
def test_alloc_options_refuse_what_slurm_would_not_read_as_one_value(
        bad: dict[str, object]) -> None:
    with pytest.raises(InputError):
        AllocOptions(**bad).check()  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["30", "1:00:00", "2-00:00:00", "UNLIMITED"])
def test_time_limits_slurm_reads(good: str) -> None:
    AllocOptions(time_limit=good).check()


def test_node_lists_refuse_hostlist_expressions_and_words() -> None:
    for bad in ("gpu[1-8]", "a,b", "a b", "-w"):
        with pytest.raises(InputError):
            commands.salloc([bad], AllocOptions(), run_id=RUN)
        with pytest.raises(InputError):
            commands.srun("1", [bad], ["true"], name="x")


def test_srun_is_one_task_per_node_beside_the_jobs_other_steps() -> None:
    argv = commands.srun("42", NODES, ["sh", "-c", "echo"], name="nodetune-pair-a-b",
                         chdir="/tmp/nodetune-validate.abcd1234", label=True)
    assert argv == ["srun", "--jobid=42", "--overlap", "--job-name=nodetune-pair-a-b",
                    "-N", "2", "-n", "2", "--ntasks-per-node=1", "-w", "gpu-a,gpu-b",
                    "--kill-on-bad-exit=0", "--quiet",
                    "--chdir=/tmp/nodetune-validate.abcd1234", "--label", "sh", "-c", "echo"]
    assert commands.scancel("42") == ["scancel", "42"]
    assert commands.scancel("42", "3") == ["scancel", "42.3"]
    assert commands.sbcast("42", "/tmp/x/w.py", "/tmp/d/w.py") == [
        "sbcast", "--jobid=42", "--force", "/tmp/x/w.py", "/tmp/d/w.py"]


def test_job_id_from_sallocs_own_words() -> None:
    assert commands.job_id("salloc: Granted job allocation 1187\n") == "1187"
    assert commands.job_id("salloc: Pending job allocation 2\nsalloc: error: Unable to "
                           "allocate resources: Connection timed out\n") is None


def _run_script(script: str, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": node,
                               "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "7"})


def test_step_script_runs_each_nodes_argv_word_for_word() -> None:
    nasty = "a b'c\"d $(touch /tmp/pwned) `id` ; & | \\ *"
    script = commands.step_script({
        "gpu-a": NodeCommand(env={"X_VAR": nasty}, argv=["sh", "-c", 'printf "%s\\n" "$X_VAR" "$0" "$1"', "one", nasty]),
        "gpu-b": NodeCommand(env={}, argv=["printf", "%s|", "b-only"])})
    ran = _run_script(script, "gpu-a")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [f"{commands.STEP_MARK} 42.7 gpu-a", nasty, "one", nasty]
    assert commands.step_mark(ran.stdout.splitlines()[0]) == ("42", "7", "gpu-a")
    assert _run_script(script, "gpu-b").stdout.splitlines()[1] == "b-only|"
    other = _run_script(script, "gpu-c")
    assert other.returncode == 2 and "no command for node gpu-c" in other.stderr


def test_in_an_oci_container_the_host_name_stands_in_for_slurmd_nodename(
        tmp_path: Path) -> None:
    """Slurm 22.05's OCI support gives the container srun's environment only (no
    SLURMD_NODENAME; seen in the lab) and starts it in /: the script falls back to the
    node's host name, exports it for the worker, and changes to the run's directory."""
    here = Path("/proc/sys/kernel/hostname").read_text().strip().split(".")[0]
    script = commands.step_script({here: NodeCommand(env={}, argv=[
        "sh", "-c", 'printf "%s %s\\n" "$SLURMD_NODENAME" "$(pwd)"'])}, cd=str(tmp_path))
    ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                         cwd="/", env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42",
                                       "SLURM_STEP_ID": "7"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [f"{commands.STEP_MARK} 42.7 {here}",
                                       f"{here} {tmp_path}"]
    gone = commands.step_script({here: NodeCommand(env={}, argv=["true"])},
                                cd=str(tmp_path / "absent"))
    assert _run_script(gone, here).returncode == 2  # no run directory: the task fails


def test_step_script_refuses_bad_env_names_and_node_names() -> None:
    with pytest.raises(InputError):
        commands.step_script({"gpu-a": NodeCommand(env={"A;B": "1"}, argv=["true"])})
    with pytest.raises(InputError):
        commands.step_script({"gpu-a) rm -rf / ;;": NodeCommand(env={}, argv=["true"])})


def test_labelled_lines_and_sruns_own() -> None:
    assert commands.labelled("0: hello") == (0, "hello")
    assert commands.labelled(" 3: x: y") == (3, "x: y")
    assert commands.labelled("12: ") == (12, "")
    assert commands.labelled("srun: error: gpu-b: task 1: Exited with exit code 3") is None


@pytest.mark.parametrize(("said", "kind"), [
    ("salloc: error: invalid partition specified: nope\nsalloc: error: Job submit/allocate "
     "failed: Invalid partition name specified", InputError),
    ("salloc: error: Job submit/allocate failed: Invalid node name specified", InputError),
    ("salloc: error: Job submit/allocate failed: Invalid account or account/partition "
     "combination specified", InputError),
    ("salloc: Pending job allocation 2\nsalloc: job 2 queued and waiting for resources\n"
     "salloc: error: Unable to allocate resources: Connection timed out", SlurmError),
])
def test_refusals_keep_slurms_words_and_blame_the_input_only_for_bad_names(
        said: str, kind: type) -> None:
    exc = _refused(said, "ctl", NODES)
    assert type(exc) is kind
    assert said.splitlines()[-1].strip() in exc.message


class StandIn:
    """Stands in for the controller's srun process: real 22.05 ``--label`` lines."""

    def __init__(self, lines: list[str]) -> None:
        self.out: queue.Queue[str | None] = queue.Queue()
        for line in lines:
            self.out.put(line)
        self.sent: list[bytes] = []
        self.closed = threading.Event()

    def lines(self) -> Iterator[str]:
        while (line := self.out.get()) is not None:
            yield line

    def poll(self) -> int | None:
        return 3 if self.closed.is_set() else None

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        self.closed.set()
        self.out.put(None)


def test_a_step_is_read_as_one_stream_per_node() -> None:
    proc = StandIn([f"1: {commands.STEP_MARK} 9.2 gpu-b", f"0: {commands.STEP_MARK} 9.2 gpu-a",
                    "1: from b", "0: from a",
                    "srun: error: gpu-b: task 1: Exited with exit code 3",
                    "srun: error: something about the step"])
    marks: list[str] = []
    step = PairStep(proc, NODES, where="ctl", on_mark=marks.append)  # type: ignore[arg-type]
    a, b = step.stream("gpu-a"), step.stream("gpu-b")
    b_lines = [next(iter(b.lines())) for _ in range(3)]
    assert b_lines == ["from b", "srun: error: gpu-b: task 1: Exited with exit code 3",
                       "srun: error: something about the step"]
    assert next(iter(a.lines())) == "from a"
    assert step.job_step == "9.2" and step.tasks == {1: "gpu-b", 0: "gpu-a"}
    assert marks == ["9.2"]
    a.send(b'{"nproc": 1}\n')
    assert [json.loads(s) for s in proc.sent] == [{"nproc": 1, "slurm_node": "gpu-a"}]
    a.close()
    assert not proc.closed.is_set()  # srun's stdin stays open while a node still reads
    b.close()
    assert proc.closed.is_set() and step.wait(5) and a.poll() == 3
    assert list(a.lines()) == ["srun: error: something about the step"]


def test_the_worker_takes_only_its_own_nodes_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from nodetune.collective.worker import cli
    specs = [{"nproc": 1, "slurm_node": "gpu-b"}, {"nproc": 2, "slurm_node": "gpu-a"}]
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-a")
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(json.dumps(s) + "\n" for s in specs)))
    assert cli._own_spec() == specs[1]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(specs[0]) + "\n"))
    assert cli._own_spec() is None  # EOF before its own: the controller stopped
    monkeypatch.setattr("sys.stdin", io.StringIO('{"nproc": 4}\n'))  # over SSH: unmarked
    assert cli._own_spec() == {"nproc": 4}


def _validate(tmp_path: object, *args: str, hosts: int = 2) -> subprocess.CompletedProcess[str]:
    from pathlib import Path

    from tests.conftest import NODETUNE
    root = Path(str(tmp_path))
    inv = root / "hosts.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + "".join(
        f"        gpu-{c}: {{ansible_host: 192.0.2.{i + 1}}}\n"
        for i, c in enumerate("abcdef"[:hosts])))
    return subprocess.run([str(NODETUNE), "validate", str(inv), *args], capture_output=True,
                          text=True, check=False, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "NODETUNE_RUNS_DIR": str(root / "runs"),
                               "HOME": str(root)})


@pytest.mark.parametrize(("hosts", "group"), [(2, "pair"), (3, "fleet")])
def test_slurm_launcher_without_a_controller_exits_2_naming_the_variable(
        tmp_path: Path, hosts: int, group: str) -> None:
    report = tmp_path / "report.json"
    ran = _validate(tmp_path, "--launcher", "slurm", "--report", str(report), hosts=hosts)
    assert ran.returncode == 2, ran.stderr
    assert "nodetune_slurm_controller" in ran.stderr
    # The verb's own record, copied to --report, though nothing was contacted.
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == 2 and doc["launcher"] == "slurm", doc
    assert "nodetune_slurm_controller" in doc["error"]["message"]
    assert doc.get("group") == "pair" if group == "pair" else "fleet_options" in doc


def test_allocation_options_need_the_slurm_launcher(tmp_path: object) -> None:
    ran = _validate(tmp_path, "--partition", "gpu")
    assert ran.returncode == 2 and "--partition need --launcher slurm" in ran.stderr


def test_the_last_step_reaps_by_run_id_then_removes_the_run_dir(tmp_path: object) -> None:
    from pathlib import Path

    from nodetune.validate.slurm_pair import reap_commands
    work = Path(str(tmp_path)) / "nodetune-validate.abcd1234"
    work.mkdir()
    (work / "run-id").write_text("r1\n")
    # /bin/echo stands in for the node's python: it shows the reap it was asked for.
    script = commands.step_script(reap_commands({"gpu-a": "/bin/echo"}, "0f" * 16, str(work)))
    ran = _run_script(script, "gpu-a")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1] == f"{work}/nodetune_worker.py reap {'0f' * 16}"
    assert not work.exists()


# -- the allocation's time limit and its cancel --------------------------------------------

def test_salloc_time_defaults_to_the_runs_longest_so_the_job_cannot_outlive_it() -> None:
    """Without --time-limit, --time is the run's own estimate (whole minutes) + 5 min."""
    options = Options(timeout=120)  # default sizes 1M:1G: six sizes + five phases
    assert launcher.run_seconds(options) == 120 * 11
    assert "--time=27" in commands.salloc(NODES, AllocOptions(run_s=launcher.run_seconds(
        options)), run_id=RUN)
    from nodetune.fleet.planner import FleetSpec, round_limit, serial_tests
    eight = FleetSpec(nodes=tuple(f"n{i}" for i in range(8)))
    assert serial_tests(eight, 2) == 3 * 2  # 4 pairs a round, 2 at a time, 3 rounds
    assert launcher.run_seconds(options, tests=serial_tests(eight, 2)) == 120 * 11 * 3 * 2
    assert serial_tests(eight, None) == 3  # every pair of a round at once
    # With partners a fleet takes the planner's longer round limit: 20 repaired nodes and
    # one partner meet one at a time, 22 rounds.
    spec = FleetSpec(nodes=tuple(f"n{i}" for i in range(20)), partners=("p0",))
    assert round_limit(spec) == 22
    assert launcher.run_seconds(options, tests=serial_tests(spec, 11)) == 120 * 11 * 22
    # --time-limit wins; with neither, salloc is left the partition's own limit.
    given = AllocOptions(time_limit="1:00:00", run_s=1.0)
    assert "--time=1:00:00" in commands.salloc(NODES, given, run_id=RUN)
    assert not any(a.startswith("--time") for a in commands.salloc(
        NODES, AllocOptions(), run_id=RUN))


class ControllerStandIn:
    """Stands in for the controller's session: scontrol/squeue answers as Slurm 22.05
    prints them, a job that stays COMPLETING."""

    def __init__(self, config: str, squeue_out: str) -> None:
        self.config, self.squeue_out = config, squeue_out
        self.asked: list[list[str]] = []

    def run(self, argv: list[str], timeout: float) -> CommandResult:
        self.asked.append(argv)
        out = {"scontrol": self.config, "squeue": self.squeue_out}.get(argv[0], "")
        return CommandResult(exit_status=0, stdout=out, stderr="")


def _alloc(session: ControllerStandIn, timeout_s: float) -> Allocation:
    return Allocation(session=session, where="ctl", job="42",  # type: ignore[arg-type]
                      names={"gpu-a": "gpu-a"}, run_id=RUN, workdir="/tmp/x",
                      timeout_s=timeout_s)


def test_the_cancel_waits_for_killwait_and_the_runs_timeout() -> None:
    config = "Configuration data as of 2026-01-01T00:00:00\nKillWait                = 200 sec\n"
    assert commands.kill_wait(config) == 200
    assert allocation.cancel_wait(_alloc(ControllerStandIn(config, ""), 120)) == 230
    assert allocation.cancel_wait(_alloc(ControllerStandIn("", ""), 300)) == 300
    assert allocation.cancel_wait(_alloc(ControllerStandIn("", ""), 1)) == 30


def test_a_job_left_completing_is_named_with_its_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocation, "CANCEL_WAIT_S", 0.0)
    monkeypatch.setattr(allocation, "KILL_WAIT_MARGIN_S", 0.0)
    session = ControllerStandIn("KillWait = 0 sec\n", "42 COMPLETING gpu-b\n")
    alloc = _alloc(session, 0.0)
    with pytest.raises(SlurmError) as err:
        allocation.cancel(alloc)
    assert err.value.exit_code == 3 and err.value.host == "ctl"
    assert "job 42 is still COMPLETING on gpu-b" in err.value.message
    assert "scontrol show job 42" in err.value.message
    assert not alloc.cancelled and ["scancel", "42"] in session.asked
    # Once squeue drops it, the cancel is done.
    session.squeue_out = ""
    allocation.cancel(alloc)
    assert alloc.cancelled
