"""The node-local check Slurm runs: its configuration, its drain reasons, and who it resumes.

The checks themselves run for real on this machine through the local session
(the loopback interface's MTU is what they hold it to); Slurm's side is proven
against the lab's real slurmctld in tests/integration/test_slurm_healthcheck.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune.check import local, slurm_decide
from nodetune.check import slurm_local as hc
from nodetune.check.model import NodeChecks, failed, passed, skipped, warned
from nodetune.check.run import report_sections
from nodetune.errors import InputError
from nodetune.slurm.state import SlurmNode

MTU_FAIL = failed("fabric.mtu[eth1]", "1500", "9000", "net_mtu_interfaces (inventory)", "x")
GOOD = NodeChecks("n1", (passed("fabric.mtu[eth1]", "9000", "9000", "net_mtu_interfaces"),))
BAD = NodeChecks("n1", (MTU_FAIL,))
OURS = "nodetune healthcheck: fabric.mtu[eth1] 1500, expected 9000 [action: re-run]"
# What this program wrote before it had its own form: still its own, by drained.json's record.
LEGACY = "nodetune: fabric.mtu[eth1] 1500, expected 9000"
# Every role check but the MTU off, so that this machine's own sysctls do not decide.
ROOT = Path(__file__).resolve().parents[2]
ONLY_MTU = {"net_sysctl_enabled": False, "nccl_config_enabled": False,
            "roce_qos_enabled": False}


def _config(tmp_path: Path, **doc: Any) -> Path:
    base: dict[str, Any] = {"version": 1, "host": "n1", "slurm_node": "n1", "vars": {}}
    path = tmp_path / "healthcheck.json"
    path.write_text(json.dumps({**base, **doc}))
    return path


def test_reason_names_the_check_what_it_measured_and_what_was_expected() -> None:
    assert slurm_decide.drain_reason(BAD) == OURS


def test_reason_is_one_printable_line_of_at_most_255_bytes() -> None:
    hostile = failed("fabric.mtu[eth1]", "1500\nreason=x state=resume", "é" * 300, "s", "m")
    reason = slurm_decide.drain_reason(NodeChecks("n1", (hostile,)))
    assert reason.startswith("nodetune healthcheck: fabric.mtu[eth1] 1500 reason=x state=resume, expected é")
    assert "\n" not in reason and reason.endswith("... [action: re-run]")
    assert len(reason.encode()) <= 255


def test_a_node_that_could_not_be_checked_is_drained_with_why() -> None:
    checks = NodeChecks("n1", error="the check probe failed under python3")
    assert slurm_decide.drain_reason(checks) == "nodetune healthcheck: check could not run: the check probe failed " \
        "under python3"
    assert slurm_decide.decide(checks, SlurmNode("n1", "idle"), None).action == "drain"


@pytest.mark.parametrize(("checks", "node", "owned", "action", "forget"), [
    # A failure drains a node in service, and only such a node.
    (BAD, SlurmNode("n1", "idle"), None, "drain", False),
    (BAD, SlurmNode("n1", "mixed"), None, "drain", False),
    (BAD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), None, "none", False),
    (BAD, SlurmNode("n1", "down", "Not responding"), None, "none", False),
    (BAD, SlurmNode("n1", "idle+drain+reboot_requested", "nodetune: reboot"), None, "none",
     False),
    # Our own drain keeps its reason, or takes the new one.
    (BAD, SlurmNode("n1", "idle+drain", OURS), OURS, "none", False),
    (BAD, SlurmNode("n1", "idle+drain", "nodetune healthcheck: fabric.mtu[eth1] 1400, "
                    "expected 9000"),
     "nodetune healthcheck: fabric.mtu[eth1] 1400, expected 9000", "drain", False),
    # A drain recorded in the old form is still ours: renewed in the new form, or resumed.
    (BAD, SlurmNode("n1", "idle+drain", LEGACY), LEGACY, "drain", False),
    (GOOD, SlurmNode("n1", "idle+drain", LEGACY), LEGACY, "resume", True),
    # An admin wrote over our reason: the drain is theirs now and stays.
    (BAD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), OURS, "none", True),
    # A pass resumes only the drain this program recorded.
    (GOOD, SlurmNode("n1", "idle+drain", OURS), OURS, "resume", True),
    (GOOD, SlurmNode("n1", "idle+drain", OURS), None, "none", False),
    (GOOD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), OURS, "none", True),
    (GOOD, SlurmNode("n1", "idle+drain", "hardware ticket 123"), None, "none", False),
    (GOOD, SlurmNode("n1", "idle"), OURS, "none", True),
    (GOOD, SlurmNode("n1", "idle"), None, "none", False),
])
def test_decide(checks: NodeChecks, node: SlurmNode, owned: str | None, action: str,
                forget: bool) -> None:
    decision = slurm_decide.decide(checks, node, owned)
    assert (decision.action, decision.forget) == (action, forget), decision
    if action == "drain":
        assert decision.reason == slurm_decide.drain_reason(checks)
        assert decision.checks == tuple(r.name for r in checks.failures)


ALLREDUCE = "nodetune healthcheck: gpu.allreduce 120 GB/s, expected >= 300"
SKIPPED = NodeChecks("n1", (*GOOD.results, skipped("gpu.allreduce", "state only")))


STATE_ONLY = frozenset(local.ACTIVE)  # what a state-only run does not run


@pytest.mark.parametrize(("checks", "drained_for", "not_run", "action", "why"), [
    # Drained for the all_reduce: a run that skipped it, or did not have it, leaves the drain.
    (SKIPPED, ("gpu.allreduce",), STATE_ONLY, "none",
     "drained for gpu.allreduce, which this run did not test"),
    (GOOD, ("gpu.allreduce",), (), "none",
     "drained for gpu.allreduce, which this run did not test"),
    (NodeChecks("n1", (*GOOD.results, warned("gpu.allreduce", "290 GB/s", ">= 300", "s", "m"))),
     ("gpu.allreduce",), (), "resume", "every check passed again"),
    (NodeChecks("n1", (*GOOD.results, passed("gpu.allreduce", "330 GB/s", ">= 300", "s"))),
     ("gpu.allreduce",), STATE_ONLY, "resume", "every check passed again"),
    # A run that ran it and found nothing to measure (one GPU left): tested.
    (SKIPPED, ("gpu.allreduce",), (), "resume", "every check passed again"),
    # The item it was drained for is gone (the interface removed), its check read: tested.
    (NodeChecks("n1", (skipped("fabric.mtu", "no interface configured"),)),
     ("fabric.mtu[eth1]",), STATE_ONLY, "resume", "every check passed again"),
    # A drain for a check that could not run names none: any passing run lifts it.
    (SKIPPED, (), STATE_ONLY, "resume", "every check passed again"),
    # A drained.json from before the checks were recorded: as before, every check passed.
    (SKIPPED, None, STATE_ONLY, "resume", "every check passed again"),
])
def test_a_drain_is_lifted_only_where_each_check_it_was_for_was_tested_again(
        checks: NodeChecks, drained_for: tuple[str, ...] | None, not_run: frozenset[str],
        action: str, why: str) -> None:
    decision = slurm_decide.decide(checks, SlurmNode("n1", "idle+drain", ALLREDUCE), ALLREDUCE,
                         drained_for, not_run)
    assert decision.action == action and why in decision.reason, decision


def test_a_renewed_drain_keeps_the_checks_this_run_did_not_test() -> None:
    decision = slurm_decide.decide(NodeChecks("n1", (MTU_FAIL, skipped("gpu.allreduce", "state only"))),
                         SlurmNode("n1", "idle+drain", ALLREDUCE), ALLREDUCE, ("gpu.allreduce",),
                         STATE_ONLY)
    assert decision.action == "drain" and decision.reason == OURS
    assert decision.checks == ("fabric.mtu[eth1]", "gpu.allreduce")


def test_config_missing_names_the_file_and_the_role(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.json: cannot read .*slurm_healthcheck"):
        local.load_config(tmp_path / "nope.json")


@pytest.mark.parametrize(("doc", "match"), [
    ({"version": 2}, "not a version 1"),
    ({"slurm_node": "n[1-4]"}, "slurm_node 'n\\[1-4\\]' is not a plain node name"),
    ({"host": "a b"}, "host 'a b'"),
    ({"vars": ["x"]}, "vars must be a mapping"),
    ({"connection_address": "10.0.0.1; reboot"}, "connection_address"),
])
def test_bad_config_is_refused(tmp_path: Path, doc: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        local.load_config(_config(tmp_path, **doc))


def test_bad_config_exits_2_and_touches_no_slurm(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hc, "LOCK", tmp_path / "lock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo, no scontrol: none may be needed
    code = hc.main(["--config", str(_config(tmp_path, version=7)),
                    "--state-dir", str(tmp_path / "state")])
    assert code == 2
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("mtu", "status"), [(65536, "pass"), (9000, "fail")])
def test_node_checks_itself_with_the_same_checks_and_report(
        tmp_path: Path, mtu: int, status: str) -> None:
    """Real probe, real judgement, on this machine: the loopback interface's MTU is 65536."""
    variables = {**ONLY_MTU, "net_mtu_interfaces": [{"name": "lo", "mtu": mtu}],
                 "ansible_host": "198.51.100.7", "ansible_connection": "ssh"}
    config = local.load_config(_config(tmp_path, vars=variables))
    checks = local.check_self(config, timeout=30)
    assert checks.error is None
    assert checks.get("fabric.mtu[lo]") is not None
    assert checks.get("fabric.mtu[lo]").status.value == status  # type: ignore[union-attr]
    assert [r.name for r in checks.failures] == ([] if status == "pass" else ["fabric.mtu[lo]"])
    doc = local.report(config, checks, mode="healthcheck")
    sections = report_sections({"n1": checks})
    assert set(sections) <= set(doc)  # every section `nodetune check` writes, and the same:
    assert {k: doc[k] for k in ("checks", "nodes", "allreduce")} == \
        {k: sections[k] for k in ("checks", "nodes", "allreduce")}
    if status == "fail":
        assert slurm_decide.drain_reason(checks) == \
            "nodetune healthcheck: fabric.mtu[lo] 65536, expected 9000 [action: re-run]"


# --- The program as slurmd runs it: a real subprocess, with stand-ins at the hardware's and
# Slurm's edge only (named so): `nvidia-smi` replaying a real 4x H200 capture, `dcgmi`, a
# "python with torch" answering what torch 2.11 answered, and `sinfo`/`scontrol`/`squeue`
# keeping one node's state in a file. Each stand-in appends its argv to calls.log.

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x4"
TORCH = '{"torch": "2.11.0+cu130", "cuda": "13.0", "nccl_available": true, "nccl": "2.28.9"}'


def _stand_in(path: Path, body: str) -> None:
    log = path.parent.parent / "calls.log"
    env = path.parent.parent / "env.log"  # what the program passed on to the tools it ran
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$(basename "$0") $*" >> {log}\n'
                    f'printf "%s PYTHONPATH=%s SITE=%s\\n" "$(basename "$0")" "$PYTHONPATH" '
                    f'"${{NODETUNE_HEALTHCHECK_SITE:-}}" >> {env}\n{body}')
    path.chmod(0o755)


@pytest.fixture()
def slurmd(tmp_path: Path) -> Path:
    """A bin/ of stand-ins and a node n1, IDLE, in the stand-in Slurm's state file."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"name": "n1", "state": "IDLE", "state_flags": [],
                                "reason": ""}))
    _stand_in(bin_ / "nvidia-smi",
              f'case "$1" in -q) cat {H200}/nvidia-smi-q-x.xml;; nvlink) '
              f'cat {H200}/nvidia-smi-nvlink-s.txt;; --query-gpu=*) '
              'for i in 0 1 2 3; do echo "NVIDIA H200"; done;; esac\n')
    _stand_in(bin_ / "dcgmi", "exit 0\n")
    # a synchronised chronyd and the systemd manager's environment (stand-ins)
    _stand_in(bin_ / "chronyc", f"cat {H200.parent}/timesync/chronyc-c-tracking-synced.csv\n")
    _stand_in(bin_ / "systemctl", 'case "$1" in show-environment) echo LANG=C.UTF-8;; '
              '*) echo inactive; exit 3;; esac\n')
    # (and, asked where the versions come from, names its site-packages as a Python does)
    _stand_in(bin_ / "python-with-torch", f"echo '{TORCH}'\ncase \"$2\" in *getsitepackages*) "
              f"echo '{{\"files\": [\"{tmp_path}/site-packages\"]}}';; esac\n")
    (tmp_path / "site-packages").mkdir()
    _stand_in(bin_ / "sinfo", f'printf \'{{"nodes": [%s]}}\' "$(cat {node})"\n')
    _stand_in(bin_ / "squeue", 'echo \'{"jobs": []}\'\n')
    # scontrol update nodename=n1 state=drain reason=R | state=resume
    _stand_in(bin_ / "scontrol", f'''{sys.executable} - "$@" <<'PY'
import json, sys
doc = json.load(open("{node}"))
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
if args.get("state", "").lower() == "drain":
    doc["state_flags"], doc["reason"] = ["DRAIN"], args.get("reason", "")
elif args.get("state", "").lower() == "resume":
    doc["state_flags"], doc["reason"] = [], ""
json.dump(doc, open("{node}", "w"))
PY
''')
    return tmp_path


def _program(root: Path, variables: dict[str, Any], *args: str,
             env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], list[str]]:
    """Run nodetune-healthcheck once as slurmd does; (exit code, report.json, the stand-ins'
    calls of this run)."""
    proc = _launch(root, variables, *args, env=env)
    report = json.loads((root / "state" / "report.json").read_text())
    return proc.returncode, report, (root / "calls.log").read_text().splitlines()


def _launch(root: Path, variables: dict[str, Any], *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The program's one run as slurmd starts it (``python -S -m``, the role's wrapper)."""
    config = _config(root, vars=variables)
    log = root / "calls.log"
    log.write_text("")
    # A node has the package alone (the role's bundle), not Ansible: an `ansible` that
    # cannot be imported stands first on the path, as on a node
    no_ansible = root / "no-ansible"
    (no_ansible / "ansible").mkdir(parents=True, exist_ok=True)
    (no_ansible / "ansible" / "__init__.py").write_text(
        "raise ImportError(\"No module named 'ansible'\")\n")
    # ... and, as the role's wrapper starts it, no site-packages (-S): the package on
    # PYTHONPATH, and a directory holding PyYAML alone named in NODETUNE_HEALTHCHECK_SITE
    env = {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "HOME": str(root),
           "PYTHONPATH": os.pathsep.join(map(str, (no_ansible, ROOT))),
           "NODETUNE_HEALTHCHECK_SITE": str(_pyyaml_only(root)), **(env or {})}
    proc = subprocess.run([sys.executable, "-S", "-m", "nodetune.check.slurm_local",
                           "--config", str(config), "--state-dir", str(root / "state"),
                           "--lock", str(root / "lock"), "--timeout", "30", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    return proc


def _pyyaml_only(root: Path) -> Path:
    """A site directory with PyYAML in it and nothing else (links to the venv's copy)."""
    site = root / "pyyaml-only"
    if not site.exists():
        site.mkdir()
        found = Path(yaml.__file__).resolve().parents[1]
        for name in ("yaml", "_yaml"):
            if (found / name).exists():
                (site / name).symlink_to(found / name)
    return site


def _slurm_node(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "node.json").read_text())
    return doc


def test_healthcheck_mode_runs_no_collective_no_dcgm_diag_and_imports_torch_once_per_boot(
        slurmd: Path) -> None:
    variables = {**ONLY_MTU, "nodetune_python": str(slurmd / "bin" / "python-with-torch"),
                 "nodetune_rdma_sysfs": str(slurmd / "no-rdma")}
    for run in (1, 2):
        code, report, calls = _program(slurmd, variables)
        assert code in (0, 1), report
        torch = [c for c in calls if c.startswith("python-with-torch")]
        # Once per boot: the first run reads the versions, the second from the cache.
        assert len(torch) == (1 if run == 1 else 0), calls
        assert report["versions_read"]["source"] == ("read" if run == 1 else "cache")
        # ... beside the node's versions, which keep their own section (as check's report)
        assert report["versions"]["n1"]["torch"], report["versions"]
        assert not [c for c in calls if c.startswith("dcgmi")], calls  # no dcgmi diag at all
        assert not [c for c in calls if "--query-gpu" in c], calls  # no all_reduce's look
        assert [c for c in calls if c.startswith("nvidia-smi -q")], calls  # state is read
        checks = {c["name"]: c for c in report["checks"]["n1"]}
        for name in ("gpu.allreduce", "dcgm.diag", "fabric.rdma_bw"):
            assert checks[name]["status"] == "skip", checks[name]
            assert "healthcheck mode reads state only" in checks[name]["message"]
        assert report["allreduce"] == {} and report["active"]["ran"] is False
        # torch's versions are judged as read, cached or not.
        assert checks["software.nccl"]["measured"] == "NCCL 2.28.9", checks["software.nccl"]
        # the clock and the host-wide environment: state reads, one command each
        assert checks["node.time_sync"]["status"] == "pass", checks["node.time_sync"]
        assert checks["node.global_env"]["status"] in ("pass", "warn", "fail")
        assert [c for c in calls if c.startswith("chronyc")] == ["chronyc -n -c tracking"]
        assert calls.count("systemctl show-environment") == 1, calls
    # A changed file torch's versions come from (an apply replaced the Python): read again.
    (slurmd / "bin" / "python-with-torch").write_text(
        (slurmd / "bin" / "python-with-torch").read_text() + "\n")
    _code, report, calls = _program(slurmd, variables)
    assert [c for c in calls if c.startswith("python-with-torch")] and \
        report["versions_read"]["source"] == "read"


def test_an_opted_in_prolog_runs_the_active_checks_only_while_no_other_job_holds_the_node(
        slurmd: Path) -> None:
    variables = {**ONLY_MTU, "nodetune_python": str(slurmd / "bin" / "python-with-torch"),
                 "nodetune_rdma_sysfs": str(slurmd / "no-rdma")}
    # Another job (7) holds n1 beside this Prolog's job: state only.
    jobs = {"jobs": [{"job_id": 7, "job_state": "RUNNING",
                      "job_resources": {"allocated_nodes": [{"nodename": "n1"}]}}]}
    _stand_in(slurmd / "bin" / "squeue", f"echo '{json.dumps(jobs)}'\n")
    _code, report, calls = _program(slurmd, variables, "--prolog", "--active")
    assert not [c for c in calls if c.startswith("dcgmi") or "--query-gpu" in c], calls
    assert report["active"]["ran"] is False and "job(s) 7 hold the node" in \
        report["active"]["why_not"], report["active"]
    assert {c["name"]: c["status"] for c in report["checks"]["n1"]}["dcgm.diag"] == "skip"
    # Only this Prolog's own job (7) holds it: the active checks run.
    _code, report, calls = _program(slurmd, variables, "--prolog", "--active",
                                    env={"SLURM_JOB_ID": "7"})
    assert "dcgmi diag -r 1 -j" in calls and [c for c in calls if "--query-gpu" in c], calls
    assert report["active"]["ran"] is True, report["active"]
    # Not opted in: a Prolog reads state only, and asks squeue nothing.
    _code, report, calls = _program(slurmd, variables, "--prolog")
    assert not [c for c in calls if c.startswith(("dcgmi", "squeue"))], calls
    assert report["mode"] == "prolog" and report["active"]["ran"] is False


def test_a_drain_for_an_active_check_is_not_lifted_by_a_run_that_skipped_it(
        slurmd: Path) -> None:
    """An opted-in Prolog drains for what only it measures (dcgmi diag, the all_reduce); the
    HealthCheckProgram reads state only, skips both, and leaves that drain alone."""
    variables = {**ONLY_MTU, "nodetune_python": str(slurmd / "bin" / "python-with-torch"),
                 "nodetune_rdma_sysfs": str(slurmd / "no-rdma")}
    code, report, _ = _program(slurmd, variables, "--prolog", "--active",
                               env={"SLURM_JOB_ID": "7"})
    failed_ = sorted(c["name"] for c in report["checks"]["n1"] if c["status"] == "fail")
    assert code == 1 and report["slurm"]["action"] == "drain", report["slurm"]
    assert failed_ == ["dcgm.diag", "gpu.allreduce"], report["checks"]
    reason = _slurm_node(slurmd)["reason"]
    for _run in (1, 2):  # state only: every check it ran passes, the active ones are skips
        code, report, calls = _program(slurmd, variables)
        assert code == 0, report["checks"]
        assert report["slurm"]["action"] == "none", report["slurm"]
        assert report["slurm"]["reason"] == ("drained for dcgm.diag, gpu.allreduce, which "
                                             "this run did not test"), report["slurm"]
        assert not [c for c in calls if c.startswith("scontrol")], calls
        assert _slurm_node(slurmd)["state_flags"] == ["DRAIN"]
        assert _slurm_node(slurmd)["reason"] == reason
    recorded = json.loads((slurmd / "state" / hc.OWNED).read_text())
    assert sorted(recorded["checks"]) == failed_, recorded
    # Where the active checks pass again (a repaired node), the drain is lifted.
    checks = NodeChecks("n1", (passed("dcgm.diag", "pass", "pass", "s"),
                               passed("gpu.allreduce", "330 GB/s", ">= 300", "s")))
    node = SlurmNode("n1", "idle+drain", reason)
    assert slurm_decide.decide(checks, node, reason, failed_).action == "resume"


def test_active_is_refused_for_the_health_check_program(slurmd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "nodetune.check.slurm_local", "--active"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "--active goes with --prolog or --epilog" in proc.stderr


def _xid(log: Path, seq: int, xid: int = 79) -> None:
    """An Xid record stamped a second ago (kmsg times count from boot: /proc/stat's btime,
    whole seconds, plus the record's microseconds), after the previous run's reading."""
    time.sleep(2.5)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    with log.open("a") as fh:
        fh.write(f"4,{seq},{int((uptime - 1) * 1e6)},-;NVRM: Xid (PCI:0000:9b:00): {xid}, "
                 "GPU has fallen off the bus.\n")


def test_a_resumed_node_is_not_drained_again_for_the_same_xid_and_a_new_xid_drains_it(
        slurmd: Path) -> None:
    for tool in ("nvidia-smi", "dcgmi"):  # no GPU: gpu.xid reads the kernel log all the same
        (slurmd / "bin" / tool).unlink()
    kmsg = slurmd / "kmsg"  # the kernel log's stand-in, in /dev/kmsg's format
    kmsg.write_text("6,1,1000,-;Linux version 6.1.0\n")
    variables = {**ONLY_MTU, "net_mtu_interfaces": [{"name": "lo", "mtu": 65536}],
                 "nodetune_kernel_log": str(kmsg), "nodetune_rdma_sysfs": str(slurmd / "no")}
    code, report, _ = _program(slurmd, variables)
    assert code == 0 and report["slurm"]["action"] == "none", report["slurm"]

    _xid(kmsg, 2)
    code, report, calls = _program(slurmd, variables)
    status = {c["name"]: c["status"] for c in report["checks"]["n1"]}
    assert code == 1 and status["gpu.xid"] == "fail", report["checks"]
    assert report["slurm"]["action"] == "drain", report["slurm"]
    assert "gpu.xid Xid 79" in _slurm_node(slurmd)["reason"]
    # Still drained: the same Xid still fails, and the drain holds (nothing resumes it).
    code, report, calls = _program(slurmd, variables)
    assert code == 1 and report["slurm"]["action"] == "none"
    assert _slurm_node(slurmd)["state_flags"] == ["DRAIN"]

    # The operator resets the GPU and resumes the node.
    subprocess.run([str(slurmd / "bin" / "scontrol"), "update", "nodename=n1", "state=resume"],
                   check=True)
    code, report, calls = _program(slurmd, variables)
    xid = next(c for c in report["checks"]["n1"] if c["name"] == "gpu.xid")
    assert code == 0 and xid["status"] == "pass", xid
    assert "returned to service" in xid["expected"], xid
    assert not [c for c in calls if c.startswith("scontrol")], calls
    assert _slurm_node(slurmd)["state_flags"] == []
    code, report, calls = _program(slurmd, variables)  # and every run after it
    assert code == 0 and not [c for c in calls if c.startswith("scontrol")], calls

    # A new Xid fails again and drains again.
    _xid(kmsg, 3, xid=48)
    code, report, calls = _program(slurmd, variables)
    xid = next(c for c in report["checks"]["n1"] if c["name"] == "gpu.xid")
    assert code == 1 and xid["status"] == "fail" and xid["measured"] == "Xid 48", xid
    assert _slurm_node(slurmd)["state_flags"] == ["DRAIN"]
    assert (slurmd / "state" / "previous.json").stat().st_mode & 0o777 == 0o600


def test_a_resume_that_lands_during_a_run_is_not_undone_by_that_run(slurmd: Path) -> None:
    """The run reads the node drained for its Xid (so the Xid still counts), a person
    resumes it, the run ends: it judges no Xid, drains nothing, and the next run counts
    from after the Xid."""
    for tool in ("nvidia-smi", "dcgmi"):
        (slurmd / "bin" / tool).unlink()
    kmsg = slurmd / "kmsg"  # the kernel log's stand-in, in /dev/kmsg's format
    kmsg.write_text("6,1,1000,-;Linux version 6.1.0\n")
    variables = {**ONLY_MTU, "net_mtu_interfaces": [{"name": "lo", "mtu": 65536}],
                 "nodetune_kernel_log": str(kmsg), "nodetune_rdma_sysfs": str(slurmd / "no")}
    _program(slurmd, variables)
    _xid(kmsg, 2)
    code, report, _ = _program(slurmd, variables)
    assert code == 1 and report["slurm"]["action"] == "drain", report["slurm"]
    # The stand-in sinfo resumes the node right after this run's first read of it, as a
    # person's `scontrol update state=resume` landing while the run checks the node.
    sinfo = slurmd / "bin" / "sinfo"
    marker = slurmd / "resume-after-read"
    marker.touch()
    sinfo.write_text(sinfo.read_text() + f'\nif [ -e {marker} ]; then rm {marker}; '
                     f'{slurmd / "bin" / "scontrol"} update nodename=n1 state=resume; fi\n')
    code, report, calls = _program(slurmd, variables)
    assert not marker.exists(), calls  # the resume landed during the run
    xid_check = next(c for c in report["checks"]["n1"] if c["name"] == "gpu.xid")
    assert xid_check["status"] == "skip" and "returned to service during this run" in \
        xid_check["message"], xid_check
    assert report["slurm"]["action"] == "none", report["slurm"]
    assert [c for c in calls if c.startswith("scontrol")] == [
        "scontrol update nodename=n1 state=resume"], calls  # the person's, and no drain
    assert _slurm_node(slurmd)["state_flags"] == [] and code == 0
    # The next run counts from after the Xid the resume cleared.
    code, report, calls = _program(slurmd, variables)
    xid_check = next(c for c in report["checks"]["n1"] if c["name"] == "gpu.xid")
    assert code == 0 and xid_check["status"] == "pass", xid_check
    assert "returned to service" in xid_check["expected"], xid_check
    assert _slurm_node(slurmd)["state_flags"] == []


def test_a_node_without_ansible_checks_nccl_config_as_the_lab_sets_it(slurmd: Path) -> None:
    """The lab's inventory leaves nccl_config on: its role defaults NCCL_IB_TC/SL to
    templates over roce_qos's variables, which only Ansible evaluates. The node has no
    Ansible: the check runs (no exit 2 naming nccl_config_ib_tc) and judges what it can."""
    variables = {"net_sysctl_enabled": False, "roce_qos_enabled": False,
                 "nccl_config_socket_ifname": "=lo",
                 "net_mtu_interfaces": [{"name": "lo", "mtu": 65536}],
                 "nodetune_rdma_sysfs": str(slurmd / "no")}
    code, report, _ = _program(slurmd, variables)
    assert code in (0, 1) and "error" not in report, report.get("error")
    names = {c["name"] for c in report["checks"]["n1"]}
    assert {"node.global_env", "fabric.nccl[NCCL_SOCKET_IFNAME]"} <= names, names


def test_the_node_local_check_imports_no_ssh_library() -> None:
    """slurmd starts the program every HealthCheckInterval: it pays every import each time,
    and a node checking itself never opens SSH (paramiko was a fifth of its CPU time)."""
    proc = subprocess.run(
        [sys.executable, "-s", "-c", "import sys, nodetune.check.slurm_local; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in "
         "('paramiko', 'ansible', 'ansible_runner', 'jinja2', 'click', 'rich')))"],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.stdout.strip() == "[]", proc.stdout


# What only the active checks (the all_reduce sweep through the collective launcher and
# worker, nccl.effective over its log, ib_write_bw, --image's container probe) or the
# controller (the playbook runner, Ansible, SSH) use: none of it may be imported by a
# state-only run.
ACTIVE_ONLY = ("nodetune.collective.launch", "nodetune.collective.plan",
               "nodetune.validate.result", "nodetune.collective.worker",
               "nodetune.measure.sweep", "nodetune.measure.jitter",
               "nodetune.container.probe", "nodetune.check.effective",
               "nodetune.measure.rdma_peer", "nodetune.ansible.runner", "statistics", "uuid")
CONTROLLER_ONLY = ("ansible", "ansible_runner", "jinja2", "paramiko", "torch")


def _imported(importtime: str) -> set[str]:
    """The modules an ``-X importtime`` report (its stderr) names."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime.splitlines()
            if line.startswith("import time:") and line.count("|") == 2} - {"package"}


def test_the_state_only_health_check_imports_nothing_the_active_checks_use(
        slurmd: Path) -> None:
    """slurmd starts the program every HealthCheckInterval on nodes that may be running
    jobs: each run pays for each module it imports (a third of its CPU time on 2x H200 was
    the package's import), so it imports only what reading state uses, lazily or not:
    every module the run imported, not just the entry module's, is in the report."""
    variables = {**ONLY_MTU, "nodetune_python": str(slurmd / "bin" / "python-with-torch"),
                 "nodetune_rdma_sysfs": str(slurmd / "no-rdma")}
    proc = _launch(slurmd, variables, env={"PYTHONPROFILEIMPORTTIME": "1"})
    report = json.loads((slurmd / "state" / "report.json").read_text())
    assert proc.returncode == 0 and report["active"]["ran"] is False, proc.stderr[-2000:]
    loaded = _imported(proc.stderr)
    assert {"nodetune.check.local", "nodetune.check.run", "nodetune.check.allreduce",
            "xml.etree.ElementTree"} <= loaded  # the report is read: these ran
    heavy = sorted(m for m in loaded if m in ACTIVE_ONLY or m.split(".")[0] in CONTROLLER_ONLY)
    assert heavy == [], heavy
    # An opted-in Prolog that runs the all_reduce still finds its code where it runs.
    proc = _launch(slurmd, variables, "--prolog", "--active",
                   env={"SLURM_JOB_ID": "7", "PYTHONPROFILEIMPORTTIME": "1"})
    assert {"nodetune.collective.launch", "nodetune.collective.plan"} <= _imported(proc.stderr)


def test_pcie_aer_counts_from_the_nodes_own_previous_check(slurmd: Path) -> None:
    """node.pcie_aer on the stand-in sysfs trees: the first run reports totals since boot,
    a fatal error after it fails the next run (and drains), the run after that counts from
    that run's counters (kept in previous.json) and passes."""
    for tool in ("nvidia-smi", "dcgmi"):
        (slurmd / "bin" / tool).unlink()
    health = ROOT / "tests" / "fixtures" / "check" / "health"
    for name in ("sysfs-infiniband", "sysfs-pci"):
        shutil.copytree(health / name, slurmd / name, symlinks=True)
    kmsg = slurmd / "kmsg"
    kmsg.write_text("6,1,1000,-;Linux version 6.1.0\n")
    variables = {**ONLY_MTU, "net_mtu_interfaces": [{"name": "lo", "mtu": 65536}],
                 "nodetune_kernel_log": str(kmsg),
                 "nodetune_rdma_sysfs": str(slurmd / "sysfs-infiniband"),
                 "nodetune_pci_sysfs": str(slurmd / "sysfs-pci" / "bus-pci-devices")}

    def aer(report: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in report["checks"]["n1"] if c["name"] == "node.pcie_aer")

    code, report, _ = _program(slurmd, variables)
    first = aer(report)
    assert first["status"] == "pass" and "(no previous check)" in first["measured"], first
    assert {c["name"]: c["status"] for c in report["checks"]["n1"]}["fabric.pcie[mlx5_0]"] \
        == "pass"
    kept = json.loads((slurmd / "state" / "previous.json").read_text())["pcie_aer"]
    assert kept["0000:18:00.0"] == {"correctable": 2, "nonfatal": 0, "fatal": 0}

    fatal = (slurmd / "sysfs-pci" / "bus-pci-devices" / "0000:9b:00.0").resolve() \
        / "aer_dev_fatal"
    fatal.write_text(fatal.read_text().replace("CmpltTO 0", "CmpltTO 1").replace(
        "TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 1"))
    code, report, _ = _program(slurmd, variables)
    second = aer(report)
    assert code == 1 and second["status"] == "fail", second
    assert "since the previous health check" in second["measured"], second
    assert "0000:9b:00.0 (GPU): fatal +1 [CmpltTO 1]" in second["message"], second
    # The reason is cut to keep its action whole; drained.json records every check.
    assert _slurm_node(slurmd)["reason"].endswith("[action: service]")
    assert "node.pcie_aer" in json.loads((slurmd / "state" / "drained.json").read_text())[
        "checks"]

    code, report, _ = _program(slurmd, variables)
    third = aer(report)
    assert third["status"] == "pass" and "no new errors" in third["measured"], third


def test_the_site_directory_is_not_passed_on_to_the_tools_the_check_runs(slurmd: Path) -> None:
    """Under -S the program appends the directory the wrapper names (PyYAML's) to its own
    sys.path and takes it out of the environment: the probe and a torch venv's Python it
    starts keep their own packages first (Debian's dist-packages ahead of a venv's would
    shadow them)."""
    variables = {**ONLY_MTU, "nodetune_python": str(slurmd / "bin" / "python-with-torch"),
                 "nodetune_rdma_sysfs": str(slurmd / "no-rdma")}
    code, report, _ = _program(slurmd, variables)
    assert code in (0, 1) and "error" not in report, report.get("error")
    seen = (slurmd / "env.log").read_text().splitlines()
    torch = [line for line in seen if line.startswith("python-with-torch ")]
    assert torch and seen, seen
    site = str(_pyyaml_only(slurmd))
    for line in seen:
        assert line.endswith(" SITE=") and site not in line, line
