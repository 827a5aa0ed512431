"""``check --launcher slurm``: the node-local report read back on the controller, one
srun step's output split per node, and the inputs refused before Slurm is asked.

The step's lines are shaped as Slurm 22.05's ``srun --label`` prints them in the lab
(see tests/unit/test_slurm_commands.py); the report lines are the node-local check's own
(:func:`nodetune.check.local.report`)."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check import health, local, signal_read, slurm_launch, slurm_local
from nodetune.check.model import CheckResult, NodeChecks, Status
from nodetune.check.run import CheckOptions
from nodetune.errors import InputError
from nodetune.measure.sweep import SizeResult
from nodetune.slurm.allocation import Allocation
from nodetune.slurm.commands import AllocOptions
from tests.conftest import NODETUNE

CONFIG = local.LocalConfig(host="gpu-a", slurm_node="nid001", variables={})
MTU = CheckResult("fabric.mtu[eth1]", Status.FAIL, "1400", "9000", "net_mtu_interfaces",
                  "eth1's MTU is not what net_mtu sets")
SIZE = SizeResult(bytes=1 << 26, count=1 << 24, type="float", time_us=900.0, algbw=70.0,
                  busbw=120.0, wrong=0)


def test_the_node_report_reads_back_as_the_same_checks() -> None:
    checks = NodeChecks("gpu-a", results=(MTU, CheckResult("gpu.count", Status.PASS, "8", "8")),
                        duration_s=2.5, allreduce=(SIZE,), health={"xid": {"clean": 1}},
                        window={"previous_check": {"at": "2026-11-30T00:53:20+00:00",
                                                   "what": "the check of r1"}})
    doc = json.loads(json.dumps(local.report(CONFIG, checks, mode="report")))
    back = local.from_report(doc, "gpu-a")
    assert set(back.results) == set(checks.results)
    assert back.allreduce == checks.allreduce and back.health == checks.health
    assert back.window == checks.window  # the window the node's counters count from
    assert back.duration_s == 2.5 and back.verdict().state.value == "bad"
    broken = NodeChecks("gpu-a", error="probe failed: nvidia-smi hung", error_exit_code=4)
    again = local.from_report(local.report(CONFIG, broken, mode="report"), "gpu-a")
    assert again.error == broken.error and again.error_exit_code == 4
    with pytest.raises(ValueError, match="gpu-a"):  # a report about another host
        local.from_report(doc, "gpu-b")


def test_a_long_report_passes_srun_in_lines_under_its_1024_byte_messages() -> None:
    """srun cuts a task's line at 1024 bytes: a report of many checks is sent in chunks."""
    many = tuple(CheckResult(f"fabric.sysctl[net.core.k{i}]", Status.PASS, str(i) * 40,
                             str(i) * 40, "net_sysctl_settings", "x" * 80) for i in range(200))
    doc = local.report(CONFIG, NodeChecks("gpu-a", results=many), mode="report")
    lines = local.report_lines(doc)
    assert len(lines) > 1 and all(len(line.encode()) < 1024 for line in lines)
    reader = local.ReportReader()
    for line in reversed(lines):  # in any order, among the node's other lines
        assert reader.document() is None
        assert reader.feed(line) and not reader.feed("python: warning: something")
    assert local.from_report(reader.document() or {}, "gpu-a").results == many
    bad = local.ReportReader()
    bad.feed(f"{local.REPORT_MARK} 0 1 not-base64!")
    with pytest.raises(ValueError, match="do not decode"):
        bad.document()


class Step:
    """Stands in for the controller's srun process of the check step."""

    def __init__(self, lines: list[str]) -> None:
        self.out: queue.Queue[str | None] = queue.Queue()
        for line in lines:
            self.out.put(line)
        self.closed = threading.Event()

    def lines(self) -> Iterator[str]:
        while (line := self.out.get()) is not None:
            yield line

    def poll(self) -> int | None:
        return 1 if self.closed.is_set() else None

    def send(self, data: bytes) -> None:
        raise AssertionError("the check step reads no stdin")

    def close(self) -> None:
        self.closed.set()
        self.out.put(None)


class Controller:
    """Stands in for the controller's session: starts the step, records scancel."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.started: list[list[str]] = []
        self.ran: list[list[str]] = []

    def start(self, argv: list[str]) -> Step:
        self.started.append(argv)
        return self.step

    def run(self, argv: list[str], timeout: float) -> Any:
        self.ran.append(argv)
        self.step.close()  # scancel ends the step
        return None


def _alloc(session: Controller) -> Allocation:
    return Allocation(session=session, where="ctl", job="42",  # type: ignore[arg-type]
                      names={"gpu-a": "nid001", "gpu-b": "nid002"}, run_id="ab12cd34" * 4,
                      workdir="/tmp/nodetune-validate.ab12cd34")


HOSTS = [Host("gpu-a", ("gpu_nodes",), {}), Host("gpu-b", ("gpu_nodes",), {})]


def _report(task: int, host: str, *results: CheckResult) -> list[str]:
    config = local.LocalConfig(host=host, slurm_node="x", variables={})
    doc = local.report(config, NodeChecks(host, results=results), mode="report")
    return [f"{task}: {line}" for line in local.report_lines(doc)]


def test_one_step_gathers_every_nodes_report_and_names_a_node_without_one() -> None:
    step = Step(["0: nodetune-slurm-step 42.1 nid001", "1: nodetune-slurm-step 42.1 nid002",
                 *_report(0, "gpu-a", MTU),
                 "1: /bin/sh: 1: exec: /usr/local/sbin/nodetune-healthcheck: not found",
                 "srun: error: nid002: task 1: Exited with exit code 127"])
    step.out.put(None)  # srun ends with its tasks
    session = Controller(step)
    got = slurm_launch.check_in_step(_alloc(session), HOSTS, CheckOptions(timeout=5),
                                     slurm_launch.programs(HOSTS), progress=lambda _n, _m: None)
    assert got["gpu-a"].failures == (MTU,)
    assert got["gpu-b"].error_exit_code == 3
    assert "apply the slurm_healthcheck role" in (got["gpu-b"].error or "")
    argv = session.started[0]
    assert argv[:2] == ["srun", "--jobid=42"] and "-w" in argv and "nid001,nid002" in argv
    assert "/usr/local/sbin/nodetune-healthcheck --report --timeout 5" in argv[-1]
    assert not session.ran  # the step ended by itself: nothing cancelled


def test_a_node_past_the_timeout_is_named_and_the_step_cancelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_launch, "STEP_MARGIN_S", 0.0)
    step = Step(["0: nodetune-slurm-step 42.3 nid001", "1: nodetune-slurm-step 42.3 nid002",
                 *_report(0, "gpu-a")])
    session = Controller(step)
    got = slurm_launch.check_in_step(_alloc(session), HOSTS, CheckOptions(timeout=0.5),
                                     slurm_launch.programs(HOSTS), progress=lambda _n, _m: None)
    assert got["gpu-a"].error is None and not got["gpu-a"].failures
    assert got["gpu-b"].error_exit_code == 4 and "0.5 s" in (got["gpu-b"].error or "")
    assert session.ran == [["scancel", "42.3"]]


def test_a_program_path_that_is_not_plain_is_refused_naming_host_and_variable() -> None:
    bad = [Host("gpu-a", ("gpu_nodes",), {"slurm_healthcheck_program": "hc; reboot"})]
    with pytest.raises(InputError) as err:
        slurm_launch.programs(bad)
    assert err.value.host == "gpu-a" and "slurm_healthcheck_program" in err.value.message


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``check`` on two hosts; an argument ``runtime=R`` sets their
    ``nodetune_container_runtime`` in the inventory instead."""
    inv = tmp_path / "hosts.yml"
    runtime = [a.split("=", 1)[1] for a in args if a.startswith("runtime=")]
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                   "        gpu-a: {ansible_host: 192.0.2.1}\n"
                   "        gpu-b: {ansible_host: 192.0.2.2}\n"
                   + (f"      vars: {{nodetune_container_runtime: {runtime[0]}}}\n"
                      if runtime else ""))
    args = tuple(a for a in args if not a.startswith("runtime="))
    return subprocess.run([str(NODETUNE), "check", str(inv), *args, "--json"],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "NODETUNE_RUNS_DIR": str(tmp_path / "runs")})


@pytest.mark.parametrize(("args", "named"), [
    (["--launcher", "slurm"], "nodetune_slurm_controller"),
    (["--launcher", "slurm", "--rdma-peer", "gpu-b"], "--rdma-peer"),
    (["--launcher", "slurm", "--image", "nvcr.io/nvidia/pytorch:24.05-py3",
      "runtime=oci"], "absolute path of an OCI bundle"),
    (["--launcher", "slurm", "--image", "/srv/bundle", "runtime=docker"],
     "does not run under --launcher slurm"),
    (["--launcher", "slurm", "--image", "/srv/bundle", "runtime=oci"],
     "nodetune_slurm_controller"),
    (["--partition", "gpu"], "--partition need --launcher slurm"),
    (["--launcher", "slurm", "--time-limit", "1h; reboot"], "--time-limit"),
])
def test_bad_slurm_launcher_input_exits_2_before_any_node(
        tmp_path: Path, args: list[str], named: str) -> None:
    ran = _check(tmp_path, *args)
    assert ran.returncode == 2, ran.stderr
    assert named in ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["exit_code"] == 2 and named in doc["error"]["message"]


def test_the_previous_check_reads_back_and_garbage_is_refused() -> None:
    prev = signal_read.Previous(1700000000.5, "the check of 2026-11-27T03:00 (r1)", {
        "fabric.rdma_errors": signal_read.Kept({"rdma_counters": {"mlx5_0/1": {"symbol_error": 3}}},
                                          None, "the check of r0")})
    doc = json.loads(json.dumps(health.previous_doc(prev)))
    assert health.previous_from(doc, source="f") == prev
    assert health.previous_from({}, source="f") == signal_read.Previous()  # no check of it yet
    for bad in ([1], {"xid_since": "yesterday"}, {"counters": [1, 2]}):
        with pytest.raises(InputError, match="f: not a previous"):
            health.previous_from(bad, source="f")


# --previous-file's entry as the version before wrote it: the controller and the nodes may
# run different versions, so its keys are read, and written, as before.
EARLIER_DOC = {"xid_since": 100.0, "xid_what": "the check of t1 (r1)",
               "counters": {"mlx5_0/1": {"link_downed": 3}}, "counters_what": "the check of t2 (r2)",
               "aer": {"0000:18:00.0": {"correctable": 2}}, "aer_time": 200.0,
               "aer_what": "the check of t2 (r2)",
               "aer_window": {"since": 150.0, "correctable": {"0000:18:00.0": 1}},
               "nvlink": {"0/1": {"crc": 7}}, "nvlink_time": 200.0,
               "nvlink_what": "the check of t2 (r2)", "time": 200.0,
               "what": "the check of t2 (r2)"}


def test_a_previous_file_of_the_version_before_reads_back_and_is_written_alike() -> None:
    prev = health.previous_from(EARLIER_DOC, source="f")
    assert (prev.xid_since, prev.time) == (100.0, 200.0)
    assert prev.of("fabric.rdma_errors") == signal_read.Kept(
        {"rdma_counters": EARLIER_DOC["counters"]}, None, "the check of t2 (r2)")
    assert prev.of("node.pcie_aer") == signal_read.Kept(
        {"pcie_aer": EARLIER_DOC["aer"], "pcie_aer_window": EARLIER_DOC["aer_window"]},
        200.0, "the check of t2 (r2)")
    assert prev.of("gpu.nvlink_errors") == signal_read.Kept(
        {"nvlink_errors": EARLIER_DOC["nvlink"]}, 200.0, "the check of t2 (r2)")
    doc = health.previous_doc(prev)
    assert {k: doc[k] for k in EARLIER_DOC} == EARLIER_DOC


def test_a_signal_counted_since_travels_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(health.COUNTED, "gpu.new", ("new_counters",))
    prev = signal_read.Previous(kept={"gpu.new": signal_read.Kept({"new_counters": {"a": {"b": 1}}},
                                                        5.0, "the check of r5")})
    doc = json.loads(json.dumps(health.previous_doc(prev)))
    assert doc["kept"] == {"gpu.new": {"state": {"new_counters": {"a": {"b": 1}}}, "time": 5.0,
                                       "what": "the check of r5"}}
    assert health.previous_from(doc, source="f") == prev
    # one this version does not count is not read
    monkeypatch.delitem(health.COUNTED, "gpu.new")
    assert health.previous_from(doc, source="f") == signal_read.Previous()


def test_the_step_stages_the_controllers_previous_checks_and_points_each_node_at_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu.xid counts Xids since the last check that passed it, as the controller's run
    history says: under --launcher slurm the nodes get that in one staged file (one line
    per node on the command line would outgrow a shell argument at a few hundred nodes)."""
    records = [{"started": "2026-11-27T03:00:00Z", "run_id": "r1",
                "health": {"gpu-a": {"time": 1700000000.0, "xid": "pass"}}}]
    monkeypatch.setattr(slurm_launch.health, "load_history", lambda _d: records)
    staged: dict[str, Any] = {}

    class Held:
        alloc: Any = None

    @contextlib.contextmanager
    def allocated(_plan: Any, _opts: Any, *, files: dict[str, bytes], **_: Any) -> Any:
        staged.update(files)
        yield _alloc(session)
    step = Step([*_report(0, "gpu-a", MTU), *_report(1, "gpu-b", MTU)])
    step.out.put(None)
    session = Controller(step)
    monkeypatch.setattr(slurm_launch.allocation, "allocated", allocated)
    planned = type("P", (), {"names": {"gpu-a": "nid001", "gpu-b": "nid002"}})()
    slurm_launch.check_nodes_slurm(planned, HOSTS, CheckOptions(timeout=5),
                                   AllocOptions(), held=Held())  # type: ignore[arg-type]
    doc = json.loads(staged[slurm_launch.PREVIOUS])
    assert health.previous_from(doc["gpu-a"], source="f").xid_since == 1700000000.0
    assert health.previous_from(doc["gpu-b"], source="f").xid_since is None
    script = session.started[0][-1]
    assert script.count(f"--previous-file /tmp/nodetune-validate.ab12cd34/{slurm_launch.PREVIOUS}") == 2


def test_report_mode_checks_from_its_own_entry_of_the_previous_file(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    config = local.LocalConfig(host="gpu-a", slurm_node="nid001", variables={})
    monkeypatch.setattr(slurm_local.local, "load_config", lambda _p: config)

    def check_self(_c: Any, **kw: Any) -> NodeChecks:
        seen.update(kw)
        return NodeChecks("gpu-a", results=())
    monkeypatch.setattr(slurm_local.local, "check_self", check_self)
    prev = tmp_path / "previous.json"
    prev.write_text(json.dumps({"gpu-a": health.previous_doc(signal_read.Previous(1700000000.0)),
                                "gpu-b": health.previous_doc(signal_read.Previous())}))
    assert slurm_local.main(["--report", "--previous-file", str(prev)]) == 0
    assert seen["previous"].xid_since == 1700000000.0
    prev.write_text("not json")
    assert slurm_local.main(["--report", "--previous-file", str(prev)]) == 2
    assert "--previous-file" in capsys.readouterr().err


def test_a_failing_slurm_command_on_the_node_names_itself_not_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The health check's Slurm commands (sinfo, squeue to read; scontrol to drain or resume)
    fail through one path: exit 3 naming the node and the command's first words, never a
    drain's reason, with the command's own error. Stand-ins on PATH that fail as a
    slurmctld that cannot be reached does."""
    from nodetune.errors import NodetuneError
    from nodetune.slurm.reasons import drain_command

    for tool in ("sinfo", "scontrol"):
        stand_in = tmp_path / tool
        stand_in.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm "
                            "controller (connect failure)' >&2\nexit 1\n")
        stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # only the stand-ins: no real Slurm tool
    with pytest.raises(NodetuneError) as read:
        slurm_local.read_node("gpu-a")
    assert read.value.host == "gpu-a" and read.value.exit_code == 3
    assert str(read.value).startswith(
        "gpu-a: `sinfo --json --nodes gpu-a` failed: slurm_load_partitions")
    with pytest.raises(NodetuneError) as drain:
        slurm_local.scontrol(drain_command("gpu-a", "nodetune: secret-ish reason"), "gpu-a")
    assert str(drain.value).startswith(
        "gpu-a: `scontrol update nodename=gpu-a state=drain` failed: slurm_load_partitions")
    assert "reason" not in str(drain.value)
    # A command that cannot start at all (not installed) fails the same way.
    (tmp_path / "scontrol").unlink()
    with pytest.raises(NodetuneError) as absent:
        slurm_local.scontrol(drain_command("gpu-a", "nodetune: secret-ish reason"), "gpu-a")
    assert str(absent.value).startswith(
        "gpu-a: `scontrol update nodename=gpu-a state=drain` failed: [Errno 2]")
    assert "reason" not in str(absent.value) and absent.value.exit_code == 3
