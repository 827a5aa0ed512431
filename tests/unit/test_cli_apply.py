"""`nodetune apply` end to end on the local machine (connection: local), real ansible-runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NODETUNE, REPO, CliResult, run_nodetune, sigint_default

FIXTURES = Path(__file__).parent.parent / "fixtures" / "playbooks"


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.ini"
    py = sys.executable
    inv.write_text(
        f"ok_host ansible_connection=local ansible_python_interpreter={py}\n"
        f"changer ansible_connection=local ansible_python_interpreter={py}\n"
        f"failer ansible_connection=local ansible_python_interpreter={py}\n"
    )
    return inv


@dataclass
class MixedRun:
    """One `nodetune apply` of mixed.yml on all three hosts (text output): what it printed,
    its run record's report.json, the hosts.ini it used."""

    res: CliResult
    report: dict[str, Any]
    inventory: Path


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> MixedRun:
    """Read by the failed-host test and the retry-file test: the same run serves both."""
    tmp = tmp_path_factory.mktemp("mixed")
    inv, runs = _inventory(tmp), tmp / "runs"
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "mixed.yml"),
                       runs_dir=runs)
    (report,) = runs.glob("*-apply/report.json")
    return MixedRun(res, json.loads(report.read_text()), inv)


def test_failed_host_exits_1_and_names_the_task(mixed_run: MixedRun) -> None:
    res = mixed_run.res
    assert res.code == 1, res.stdout + res.stderr
    assert "failer: [Fail on the failer] disk /dev/nvme9 is missing" in res.stdout
    assert "some hosts failed" in res.stdout
    report = mixed_run.report
    assert report["exit_code"] == 1
    assert {h["host"]: h["state"] for h in report["hosts"]} == {
        "ok_host": "ok", "changer": "changed", "failer": "failed"}
    assert report["failed_tasks"][0]["message"] == "disk /dev/nvme9 is missing"
    assert report["changed_tasks"] == [{"host": "changer", "task": "Report a change on the changer",
                                        "role": "", "status": "changed", "message": ""}]
    assert report["duration_s"] > 0


def test_limit_and_json(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook",
                       str(FIXTURES / "mixed.yml"), "--limit", "ok_host,changer", "--json",
                       runs_dir=runs_dir)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert [h["host"] for h in doc["hosts"]] == ["ok_host", "changer"]
    assert doc["options"]["limit"] == "ok_host,changer"
    assert doc["schema_version"] == 1


def _own_tmpdir(tmp_path: Path) -> dict[str, str]:
    """Temporary directories of the test's own for an apply it interrupts. ansible-runner
    kills ansible-playbook's group outright, so what the killed task had made on its node
    stays: the local module's AnsiballZ payload directory (in TMPDIR, removed only when the
    module ends) and the task's directory (remote_tmp, on this machine under a local
    connection). They stay in the test's temp dir, not in this machine's /tmp or the
    operator's ~/.ansible/tmp. (ansible-playbook's own directory, local_tmp, is in the
    run's private directory, which nodetune removes: :func:`_nothing_of_the_run_left`.)"""
    own = tmp_path / "tmp"
    own.mkdir(exist_ok=True)
    (tmp_path / "home").mkdir(exist_ok=True)  # where Ansible's own default would put local_tmp
    return {"TMPDIR": str(own), "ANSIBLE_REMOTE_TEMP": str(own / "remote"),
            "HOME": str(tmp_path / "home")}


def _nothing_of_the_run_left(tmp_path: Path) -> None:
    """Nothing of nodetune's run directory or of ansible-playbook's local_tmp is left in the
    temporary-files directory or the home the stopped run was given."""
    own = tmp_path / "tmp"
    assert not list(own.glob("nodetune-*")), list(own.iterdir())
    for where in (own, tmp_path / "home"):
        assert not list(where.rglob("ansible-local-*")), list(where.rglob("*"))


def test_timeout_exits_4(tmp_path: Path, runs_dir: Path) -> None:
    play = tmp_path / "slow.yml"
    task = f"sleep {29 + os.getpid() % 1000 / 1000:.3f}"  # this run's own, seen in /proc
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    f"    - ansible.builtin.command: {task}\n")
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", str(play),
                       "--limit", "ok_host", "--timeout", "3", runs_dir=runs_dir, timeout=60,
                       env=_own_tmpdir(tmp_path))
    assert res.code == 4, res.stdout + res.stderr
    assert "timed out" in res.stdout
    assert not _running(task), "the timed-out task is still running"
    _nothing_of_the_run_left(tmp_path)


def test_bad_role_input_exits_2_naming_host_and_variable(tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu_nodes]\nme ansible_connection=local "
                   f"ansible_python_interpreter={sys.executable}\n")
    # --check as well: even a regression could not touch this machine.
    res = run_nodetune("apply", str(inv), "--playbook", "network.yml", "--check",
                       "-e", "nccl_config_ib_tc=300", "-e", "net_mtu_enabled=y",
                       runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "Bad input (nothing was changed on any node):" in res.stdout
    assert "me: nccl_config: nccl_config_ib_tc (NCCL_IB_TC): '300' is outside 0-255" in res.stdout
    # `y` passes an argument spec as true and turns the role off through its `| bool`
    out = " ".join(res.stdout.split())
    assert "net_mtu_enabled: 'y' is true to this argument spec but false to the role's " \
           "`| bool`; write true or yes" in out, res.stdout
    doc = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert doc["exit_code"] == 2
    assert doc["input_problems"][0]["host"] == "me"


def test_check_diff_prints_the_drift_and_where_the_full_diff_is(
        tmp_path: Path, runs_dir: Path) -> None:
    target = tmp_path / "settings.conf"
    target.write_text("a = 1\nb = 2\n")
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - name: Write the settings\n      ansible.builtin.copy:\n"
                    f"        dest: {target}\n        content: \"a = 1\\nb = 3\\n\"\n"
                    "        mode: '0644'\n")
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", str(play), "--limit",
                       "ok_host", "--check", "--diff", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    assert "=== ok_host: [Write the settings]" in res.stdout
    assert "-b = 2\n+b = 3" in res.stdout
    assert "1 diff(s) on 1 host(s); full diff: " in res.stdout
    full = next(runs_dir.glob("*-apply/diff.txt")).read_text()
    assert "+b = 3" in full
    assert target.read_text() == "a = 1\nb = 2\n", "check mode changed nothing"


def _one_play(tmp_path: Path, tasks: str) -> Path:
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n" + tasks)
    return play


@dataclass
class VarsRun:
    """One `nodetune apply -vvv` on ok_host, from the operator's directory `work`,
    whose play asserts every -e it is given: a vaulted file, `key='two words'`, a JSON
    document, and a file named relative to `work`; then runs one command."""

    res: CliResult
    report: dict[str, Any]
    secret: Path
    work: Path
    inventory: Path
    play: Path


@pytest.fixture(scope="module")
def vars_run(tmp_path_factory: pytest.TempPathFactory) -> VarsRun:
    """Read by the extra-vars tests and the verbosity test: the same run serves the three
    (each -e is asserted by the play, so a value that did not arrive fails the run)."""
    tmp = tmp_path_factory.mktemp("vars")
    secret = tmp / "secret.yml"
    secret.write_text("vault_secret: 'p@ss word=1'\n")
    password = tmp / "vault-pass"
    password.write_text("correct horse\n")
    vault = Path(sys.executable).parent / "ansible-vault"
    subprocess.run([str(vault), "encrypt", "--vault-password-file", str(password), str(secret)],
                   check=True, capture_output=True)
    assert secret.read_text().startswith("$ANSIBLE_VAULT")
    # ansible-playbook runs in ansible-runner's project directory; nodetune hands
    # it the file the operator named, relative to the operator's directory.
    work = tmp / "ops"
    work.mkdir()
    (work / "site-vars.yml").write_text("from_file: here\n")
    play = _one_play(tmp, (
        "    - ansible.builtin.assert:\n"
        "        that:\n"
        "          - vault_secret == 'p@ss word=1'\n"
        "          - kv == 'two words'\n"
        "          - typed.n == 9000\n"
        "    - ansible.builtin.assert: {that: from_file == 'here'}\n"
        "    - ansible.builtin.command: 'true'\n"))
    inv, runs = _inventory(tmp), tmp / "runs"
    res = run_nodetune("apply", str(inv), "--playbook", str(play), "-l",
                       "ok_host", "-e", f"@{secret}", "-e", "kv='two words'",
                       "-e", '{"typed": {"n": 9000}}', "-e", "@site-vars.yml", "-vvv",
                       runs_dir=runs, cwd=work,
                       env={"ANSIBLE_VAULT_PASSWORD_FILE": str(password)})
    report = json.loads(next(runs.glob("*-apply/report.json")).read_text())
    return VarsRun(res, report, secret, work, inv, play)


def test_extra_vars_reach_ansible_untouched_vaulted_file_too(vars_run: VarsRun) -> None:
    res, secret = vars_run.res, vars_run.secret
    assert res.code == 0, res.stdout + res.stderr
    # The run's record (report.json: the document --json prints; -vvv, which the
    # verbosity test reads from the same run, shows ansible's output only without --json).
    assert vars_run.report["options"]["extra_vars"] == [
        f"@{secret}", "kv='two words'", '{"typed": {"n": 9000}}', "@site-vars.yml"]


def test_a_relative_extra_vars_file_is_read_where_the_operator_is(vars_run: VarsRun,
                                                                 runs_dir: Path) -> None:
    res = vars_run.res
    assert res.code == 0, res.stdout + res.stderr
    assert vars_run.report["options"]["extra_vars"][-1:] == ["@site-vars.yml"]
    missing = run_nodetune("apply", str(vars_run.inventory), "--playbook", str(vars_run.play),
                           "-l", "ok_host", "-e", "@nowhere.yml", runs_dir=runs_dir,
                           cwd=vars_run.work)
    assert missing.code == 2, missing.stdout + missing.stderr
    assert "nowhere.yml" in missing.stderr


def test_verbosity_reaches_ansible(vars_run: VarsRun) -> None:
    res = vars_run.res
    assert res.code == 0, res.stdout + res.stderr
    # ansible-playbook -vvv's own connection trace, shown on stderr.
    assert "ESTABLISH LOCAL CONNECTION" in res.stderr
    assert vars_run.report["options"]["verbosity"] == 3


@pytest.mark.parametrize(("sig", "code", "status"), [(signal.SIGINT, 130, "interrupted"),
                                                     (signal.SIGTERM, 143, "terminated")])
def test_signal_leaves_a_run_record_and_json(tmp_path: Path, runs_dir: Path, sig: int,
                                             code: int, status: str) -> None:
    task = f"sleep {59 + os.getpid() % 1000 / 1000:.3f}"  # this run's own, seen in /proc
    play = _one_play(tmp_path, f"    - ansible.builtin.command: {task}\n")
    proc = subprocess.Popen(
        [str(NODETUNE), "apply", str(_inventory(tmp_path)), "--playbook", str(play), "-l",
         "ok_host", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "NODETUNE_RUNS_DIR": str(runs_dir),
                        **_own_tmpdir(tmp_path)},
        preexec_fn=sigint_default)
    # Wait until ansible-playbook has started the task (its event is on disk), then signal.
    for _ in range(600):
        if proc.poll() is not None or any(
                '"runner_on_start"' in f.read_text()
                for f in runs_dir.glob("*-apply/ansible/job_events/*.json")):
            break
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, out + err
    doc = json.loads(out)
    assert doc["status"] == status and doc["exit_code"] == code
    assert json.loads(next(runs_dir.glob("*-apply/report.json")).read_text()) == doc
    # ansible-core runs each worker in a session of its own: the task's process must not
    # outlive the run.
    deadline = time.monotonic() + 10
    while _running(task) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(task), "the interrupted task is still running"
    _nothing_of_the_run_left(tmp_path)


def _running(cmdline: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and \
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == cmdline.encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_usage_error_under_json_prints_a_document(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--forks", "0", "--json",
                       runs_dir=runs_dir)
    assert res.code == 2
    doc = res.json()
    assert doc["exit_code"] == 2 and doc["error"]["type"] == "UsageError"
    assert "--forks" in doc["error"]["message"]
    assert json.loads(next(runs_dir.glob("*-apply/report.json")).read_text()) == doc


@pytest.mark.parametrize("verb", ["apply", "facts", "validate"])
def test_bad_inventory_under_json_prints_a_document(tmp_path: Path, runs_dir: Path,
                                                    verb: str) -> None:
    res = run_nodetune(verb, str(tmp_path / "nope"), "--json", runs_dir=runs_dir)
    assert res.code == 2, res.stderr
    doc = res.json()
    assert doc["verb"] == verb and doc["exit_code"] == 2
    assert doc["error"]["type"] == "InventoryError" and "nope" in doc["error"]["message"]
    assert (runs_dir / doc["run_id"] / "report.json").is_file()


def _settings_play(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "settings.conf"
    target.write_text("a = 1\nb = 2\n")
    play = _one_play(tmp_path, "    - name: Write the settings\n      ansible.builtin.copy:\n"
                               f"        dest: {target}\n        content: \"a = 1\\nb = 3\\n\"\n"
                               "        mode: '0644'\n")
    return target, play


def test_without_diff_one_line_per_changed_file_and_the_diff_path(
        tmp_path: Path, runs_dir: Path) -> None:
    target, play = _settings_play(tmp_path)
    res = run_nodetune("apply", str(_inventory(tmp_path)), "--playbook", str(play), "--limit",
                       "ok_host", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr
    assert target.read_text() == "a = 1\nb = 3\n"
    assert "+b = 3" not in res.stdout, "no diff without --diff"
    assert "Changed (1 file(s)/setting(s)):" in res.stdout
    # copy returns its diff only under --diff: the line names the file from its result.
    assert f"  {target}  [Write the settings]  on 1 host: ok_host\n" in res.stdout
    assert "full diff:" not in res.stdout and not list(runs_dir.glob("*-apply/diff.txt"))


def test_fail_on_change_gates_on_drift(tmp_path: Path, runs_dir: Path) -> None:
    target, play = _settings_play(tmp_path)
    inv = _inventory(tmp_path)
    res = run_nodetune("apply", str(inv), "--playbook", str(play), "--limit", "ok_host",
                       "--check", "--fail-on-change", runs_dir=runs_dir)
    assert res.code == 1, res.stdout + res.stderr
    assert "changes found (--fail-on-change)" in res.stdout
    assert target.read_text() == "a = 1\nb = 2\n"
    target.write_text("a = 1\nb = 3\n")  # no drift: the same flag passes
    res = run_nodetune("apply", str(inv), "--playbook", str(play), "--limit", "ok_host",
                       "--check", "--fail-on-change", runs_dir=runs_dir)
    assert res.code == 0, res.stdout + res.stderr


def test_failed_hosts_go_to_a_retry_file_that_limit_reads(mixed_run: MixedRun) -> None:
    """The first run is the failed-host test's (its record's report.json is the document
    --json prints: see the JSON tests here); the second reads its retry file."""
    assert mixed_run.res.code == 1, mixed_run.res.stderr
    retry = Path(mixed_run.report["retry_file"])
    assert retry.read_text() == "failer\n"
    assert f"--limit @{retry}" in mixed_run.res.stdout
    res = run_nodetune("apply", str(mixed_run.inventory), "--playbook",
                       str(FIXTURES / "mixed.yml"), "--limit", f"@{retry}",
                       runs_dir=retry.parent.parent)
    assert res.code == 1, res.stdout + res.stderr
    assert "failer" in res.stdout and "ok_host" not in res.stdout
    assert f"--limit @{retry.parent.parent}" in res.stdout  # the new run's own retry file


SLURM_FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"


def _busy_site(tmp_path: Path, *, sinfo_fails: bool = False) -> tuple[Path, dict[str, str], Path]:
    """Two local hosts under Slurm: gpu-1 is nt-slurm-1 (IDLE), gpu-2 is nt-slurm-2
    (ALLOCATED to job 6). sinfo, squeue and systemctl are stand-ins on PATH (no Slurm,
    no systemd here) that log every call to calls.log; sinfo/squeue print the lab's
    own `--json` output (tests/fixtures/slurm)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    scripts = {
        "sinfo": ("exit 1" if sinfo_fails else
                  f"cat {SLURM_FIXTURES / 'sinfo-busy.json'}"),
        "squeue": f"cat {SLURM_FIXTURES / 'squeue-busy.json'}",
        "systemctl": ('[ "$1" = show ] && printf "Id=%s.service\\nLoadState=loaded\\n'
                      'ActiveState=active\\nSubState=running\\nUnitFileState=enabled\\n" "$2"'
                      "\nexit 0"),
    }
    for name, body in scripts.items():
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "${{STANDIN_HOST:-nodetune}} {name} $*" >> {log}\n'
                          f"{body}\n")
        script.chmod(0o755)
    py = sys.executable
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"gpu-1 ansible_connection=local ansible_python_interpreter={py} "
        "nodetune_slurm_nodename=nt-slurm-1\n"
        f"gpu-2 ansible_connection=local ansible_python_interpreter={py} "
        "nodetune_slurm_nodename=nt-slurm-2\n")
    return inv, {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def _calls(log: Path, what: str) -> list[str]:
    return [line for line in (log.read_text().splitlines() if log.exists() else [])
            if what in line]


def test_a_busy_node_keeps_its_runtime_and_the_restart_waits(tmp_path: Path,
                                                              runs_dir: Path) -> None:
    # Real toolkit handlers and report.yml; Slurm and systemd are stand-ins at the edge.
    inv, env, log = _busy_site(tmp_path)
    state = tmp_path / "state"
    pending = json.dumps({"__nvidia_container_toolkit_pending_dir":
                          f"{state}/{{{{ inventory_hostname }}}}"})
    play = str(FIXTURES / "toolkit-restart.yml")
    res = run_nodetune("apply", str(inv), "--playbook", play, "-e", pending,
                       runs_dir=runs_dir, env=env)
    assert res.code == 0, res.stdout + res.stderr
    assert _calls(log, "restart") == ["gpu-1 systemctl restart docker"]
    assert (state / "gpu-2" / "restart-docker").is_file()
    assert not (state / "gpu-1" / "restart-docker").exists()
    assert "gpu-2 (ALLOCATED: job 6): nvidia_container_toolkit: restart docker" in res.stdout
    assert "deferred on 1 busy node(s)" in res.stdout
    report = json.loads(next(runs_dir.glob("*-apply/report.json")).read_text())
    assert report["deferred"] == {"gpu-2": {
        "slurm_node": "nt-slurm-2", "state": "ALLOCATED", "jobs": ["6"],
        "deferred": ["nvidia_container_toolkit: restart docker (its configuration changed)"]}}
    assert report["allow_busy"] is False

    # Still allocated, nothing new changed: the restart stays deferred and listed,
    # and nothing is restarted or counted as a change.
    log.unlink()
    res = run_nodetune("apply", str(inv), "--playbook", play, "-e", pending,
                       "-e", "config_changed=false", "--json", runs_dir=runs_dir, env=env)
    assert res.code == 0, res.stderr
    doc = res.json()
    assert _calls(log, "restart") == []
    assert doc["deferred"]["gpu-2"]["deferred"] == [
        "nvidia_container_toolkit: restart docker (deferred by an earlier run)"]
    assert sum(h["changed"] for h in doc["hosts"]) == 0

    # --allow-busy: Slurm is not asked, and the remembered restart is done.
    log.unlink()
    res = run_nodetune("apply", str(inv), "--playbook", play, "-e", pending,
                       "-e", "config_changed=false", "--allow-busy", "--json",
                       runs_dir=runs_dir, env=env)
    assert res.code == 0, res.stderr
    assert _calls(log, "restart") == ["gpu-2 systemctl restart docker"]
    assert _calls(log, "sinfo") == []
    assert not (state / "gpu-2" / "restart-docker").exists()
    assert res.json()["deferred"] == {}


def test_slurm_unreachable_applies_nothing(tmp_path: Path, runs_dir: Path) -> None:
    inv, env, log = _busy_site(tmp_path, sinfo_fails=True)
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "toolkit-restart.yml"),
                       "--json", runs_dir=runs_dir, env=env)
    assert res.code == 3, res.stdout + res.stderr
    assert _calls(log, "sinfo") and _calls(log, "systemctl") == []
    assert "sinfo" in res.json()["error"]["message"]


def test_reboot_leaves_a_busy_node_running_and_says_so(tmp_path: Path,
                                                        runs_dir: Path) -> None:
    inv, env, _log = _busy_site(tmp_path)
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "needs-reboot.yml"),
                       "--reboot", "--json", runs_dir=runs_dir, env=env)
    doc = res.json()
    assert doc["reboot_required"] == {
        "gpu-1": {"nvidia_driver": "driver 580.95.05 installed"},
        "gpu-2": {"nvidia_driver": "driver 580.95.05 installed"}}
    # Only the idle node goes to reboot.yml (which refuses it here: it is this machine).
    assert [h["host"] for h in doc["reboot"]["hosts"]] == ["gpu-1"], res.stderr
    assert {t["host"] for t in doc["reboot"]["failed_tasks"]} == {"gpu-1"}
    assert doc["deferred"] == {"gpu-2": {"slurm_node": "nt-slurm-2", "state": "ALLOCATED",
                                         "jobs": ["6"], "deferred": ["reboot (--reboot)"]}}


@pytest.mark.parametrize("given", ["inventory", "-e"])
def test_reboot_through_slurm_still_reaches_a_busy_node(tmp_path: Path, runs_dir: Path,
                                                        given: str) -> None:
    """`nodetune_reboot_via_slurm` (in the inventory, or as `-e`, which wins there as in
    the play): reboot.yml asks `scontrol reboot ASAP`, which waits for the node's jobs, so
    a busy node goes to it too (the reboot is Slurm's to time)."""
    inv, env, _log = _busy_site(tmp_path)
    via = " nodetune_reboot_via_slurm=true" if given == "inventory" else \
        " nodetune_reboot_via_slurm=false"
    inv.write_text(inv.read_text().replace(
        "nodetune_slurm_nodename=nt-slurm-2\n",
        f"nodetune_slurm_nodename=nt-slurm-2{via} nodetune_slurm_controller=gpu-1\n"))
    extra = ["-e", "nodetune_reboot_via_slurm=true"] if given == "-e" else []
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "needs-reboot.yml"),
                       "--reboot", "--json", "--limit", "gpu-2", *extra, runs_dir=runs_dir,
                       env=env)
    doc = res.json()
    assert [h["host"] for h in doc["reboot"]["hosts"]] == ["gpu-2"], res.stderr
    assert doc["deferred"]["gpu-2"]["deferred"] == []


def test_a_reboot_via_slurm_that_is_no_boolean_is_bad_input_before_the_play(
        tmp_path: Path, runs_dir: Path) -> None:
    """`y` is true to the argument spec's rule but false to reboot.yml's `| bool`: refused
    (exit 2) naming host and variable, before Slurm is asked or anything runs."""
    inv, env, log = _busy_site(tmp_path)
    inv.write_text(inv.read_text().replace(
        "nodetune_slurm_nodename=nt-slurm-2\n",
        "nodetune_slurm_nodename=nt-slurm-2 nodetune_reboot_via_slurm=y "
        "nodetune_slurm_controller=gpu-1\n"))
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "needs-reboot.yml"),
                       "--reboot", "--json", runs_dir=runs_dir, env=env)
    assert res.code == 2, res.stdout + res.stderr
    err = res.json()["error"]
    assert "nodetune_reboot_via_slurm" in err["message"] and "gpu-2" in str(err)
    assert _calls(log, "sinfo") == [] and _calls(log, "systemctl") == []


def test_a_node_that_got_a_job_during_the_play_is_not_rebooted(tmp_path: Path,
                                                               runs_dir: Path) -> None:
    """Slurm is asked again just before the direct reboots: gpu-1, idle when apply began
    (the stand-in sinfo's first answer), has job 6 by then and is not rebooted; when
    Slurm cannot be asked again, no node is rebooted directly."""
    from tests.unit.test_slurm_busy import sinfo_doc

    inv, env, log = _busy_site(tmp_path)
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "1.json").write_text(sinfo_doc(set()))
    (answers / "2.json").write_text(sinfo_doc({"nt-slurm-1"}))
    (tmp_path / "bin" / "sinfo").write_text(
        f'#!/bin/sh\necho "nodetune sinfo $*" >> {log}\nD={answers}\n'
        'n=$(cat "$D/n" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "$D/n"\n'
        '[ -f "$D/$n.json" ] || exit 1\ncat "$D/$n.json"\n')
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "needs-reboot.yml"),
                       "--reboot", "--json", "--limit", "gpu-1", runs_dir=runs_dir, env=env)
    doc = res.json()
    assert "reboot" not in doc, res.stderr
    assert doc["deferred"]["gpu-1"]["state"] == "ALLOCATED" and \
        doc["deferred"]["gpu-1"]["deferred"] == ["reboot (--reboot)"], doc["deferred"]
    # The second answer fails (no 2.json left after the first run's two): no reboot.
    (answers / "n").write_text("0")
    (answers / "2.json").unlink()
    res = run_nodetune("apply", str(inv), "--playbook", str(FIXTURES / "needs-reboot.yml"),
                       "--reboot", "--json", "--limit", "gpu-1", runs_dir=runs_dir, env=env)
    doc = res.json()
    assert "reboot" not in doc and doc["reboot_recheck_error"], res.stderr
    assert doc["deferred"]["gpu-1"]["deferred"] == ["reboot (--reboot)"]
