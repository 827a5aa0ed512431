"""`nodetune validate` on the real two-node lab over real SSH, with gloo on CPU."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodetune.ansible.inventory import load
from nodetune.lab import nodes as lab_mod
from tests.conftest import sigint_default

REPO = Path(__file__).resolve().parents[2]
NODETUNE = REPO / ".venv" / "bin" / "nodetune"
FAST = ["--sizes", "1M:4M", "--iters", "5", "--warmup", "2"]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def validate_lab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab with torch on its shared volume, as an inventory that points validate at it.

    ``inventory/lab`` is used as is once `lab up` sets nodetune_python; until
    then a copy with that variable added.
    """
    python = lab_mod.install_torch()
    hosts = load(lab.inventory).hosts
    if all(h.vars.get("nodetune_python") for h in hosts):
        return Path(lab.inventory)
    data = yaml.safe_load((Path(lab.inventory) / "hosts.yml").read_text())
    var = data["all"]["vars"]
    for key in ("ansible_ssh_private_key_file",):
        if not Path(var[key]).is_absolute():
            var[key] = str(REPO / var[key])
    var["ansible_ssh_common_args"] = var["ansible_ssh_common_args"].replace(
        "UserKnownHostsFile=.nodetune", f"UserKnownHostsFile={REPO}/.nodetune")
    var["nodetune_python"] = python
    out = tmp_path_factory.mktemp("validate-inv")
    (out / "hosts.yml").write_text(yaml.safe_dump(data))
    return out


def nodes(inventory: Path) -> list[str]:
    return [h.name for h in load(inventory).hosts]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NODETUNE), "validate", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


def leftovers(lab: Any) -> dict[str, str]:
    """What a validation could have left on each node: processes, listeners, temp dirs."""
    found = {}
    for node in lab.nodes:
        procs = lab.sh(node, "sh", "-c", "pgrep -af '[n]odetune_worker|[t]orch[.]distributed' || true")
        listen = lab.sh(node, "sh", "-c", "ss -Hltnp | grep -i python || true")
        tmp = lab.sh(node, "sh", "-c", "ls -d /tmp/nodetune-validate.* 2>/dev/null || true")
        if procs or listen or tmp:
            found[node] = "\n".join(x for x in (procs, listen, tmp) if x)
    return found


def report_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_validate_passes_with_plausible_busbw(validate_lab: Path, lab: Any,
                                              tmp_path: Path) -> None:
    proc = run_cli(str(validate_lab), *FAST, "--profile", "lab-gloo", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = report_of(proc)
    assert doc["verb"] == "validate" and doc["status"] == "pass"
    result = doc["result"]
    assert result["backend"] == "gloo" and result["world"] == 2
    assert result["transport"]["kind"] == "gloo/TCP"
    # The ranks meet over the lab's fabric network (eth1), not the SSH network (eth0):
    # the lab inventory's nodetune_validate_master_addr is the master's fabric address.
    assert result["transport"]["interfaces"] == ["eth1"]
    sizes = result["sizes"]
    assert [s["bytes"] for s in sizes] == [1 << 20, 4 << 20]
    for s in sizes:
        assert s["wrong"] == 0 and s["type"] == "float"
        assert 0.01 < s["busbw"] < 100  # container-to-container TCP on one machine
        assert s["busbw"] == pytest.approx(s["algbw"])  # n = 2: 2(n-1)/n = 1
        assert s["algbw"] == pytest.approx(s["bytes"] / 1e9 / (s["time_us"] / 1e6), rel=1e-6)
    assert set(result["phases_s"]) >= {"connect", "preflight", "launch", "measure"}
    for node in nodes(validate_lab):
        assert doc["env"][node]["GLOO_SOCKET_IFNAME"] == "eth1"
    # The same document read as nccl-tests' -J output (its `results` array), by a reader
    # written against nccl-tests' own tools/analyze_perf_json.py
    (tmp_path / "run.json").write_text(proc.stdout)
    read = subprocess.run([sys.executable, str(REPO / "benchmarks" / "read_nccl_json.py"),
                           str(tmp_path / "run.json"), "--in-place"], capture_output=True,
                          text=True, check=False)
    assert read.returncode == 0, read.stdout + read.stderr
    assert str(1 << 20) in read.stdout and str(4 << 20) in read.stdout, read.stdout
    assert not leftovers(lab)


def test_two_ranks_per_node_human_output(validate_lab: Path, lab: Any,
                                         tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(str(validate_lab), *FAST, "--nproc-per-node", "2", "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    assert "n = 4" in proc.stdout and "PASS" in proc.stdout
    assert "size" in proc.stdout and "busbw(GB/s)" in proc.stdout and "#wrong" in proc.stdout
    assert "connecting to" in proc.stderr and "all 4 ranks joined" in proc.stderr
    result = json.loads(report.read_text())["result"]
    assert result["world"] == 4 and result["nproc_per_node"] == 2
    for s in result["sizes"]:
        assert s["busbw"] == pytest.approx(s["algbw"] * 2 * 3 / 4)
        assert s["wrong"] == 0
    assert not leftovers(lab)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "alltoall"])
def test_every_collective_runs_with_gloo_and_is_checked(validate_lab: Path, lab: Any,
                                                        collective: str) -> None:
    # Two ranks per node, n = 4: the bus factor (n-1)/n = 0.75 is not all_reduce's 1.5.
    proc = run_cli(str(validate_lab), "--sizes", "1M", "--iters", "3", "--warmup", "1",
                   "--nproc-per-node", "2", "--collective", collective, "--min-busbw", "0.001",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    result = report_of(proc)["result"]
    assert result["collective"] == collective and result["world"] == 4
    assert result["verdict"] == "pass"
    [size] = result["sizes"]
    assert size["bytes"] == 1 << 20 and size["wrong"] == 0  # every rank's output checked
    assert size["busbw"] == pytest.approx(size["algbw"] * 3 / 4)
    assert size["algbw"] == pytest.approx(size["bytes"] / 1e9 / (size["time_us"] / 1e6),
                                          rel=1e-6)
    assert not leftovers(lab)


def test_min_busbw_above_lab_fails_with_reason(validate_lab: Path, lab: Any) -> None:
    proc = run_cli(str(validate_lab), *FAST, "--min-busbw", "1000")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout
    assert "at 4 MiB is below 1000 GB/s (--min-busbw)" in proc.stdout
    assert not leftovers(lab)


def test_expect_ib_with_gloo_fails(validate_lab: Path) -> None:
    proc = run_cli(str(validate_lab), *FAST, "--sizes", "1M", "--expect-transport", "ib",
                   "--json")
    assert proc.returncode == 1
    assert any("gloo" in r for r in report_of(proc)["result"]["reasons"])


def test_node_without_torch_is_exit_3_naming_it(validate_lab: Path, lab: Any,
                                                tmp_path: Path) -> None:
    second = nodes(validate_lab)[1]
    data = yaml.safe_load((validate_lab / "hosts.yml").read_text())
    data["all"]["children"]["gpu_nodes"]["hosts"][second]["nodetune_python"] = "/usr/bin/python3"
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(data))
    proc = run_cli(str(tmp_path), *FAST, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert f"{second}: torch is not importable by /usr/bin/python3" in proc.stderr
    assert "nodetune_python" in proc.stderr
    assert not leftovers(lab)


def test_missing_python_is_exit_3(validate_lab: Path, tmp_path: Path) -> None:
    first = nodes(validate_lab)[0]
    data = yaml.safe_load((validate_lab / "hosts.yml").read_text())
    data["all"]["children"]["gpu_nodes"]["hosts"][first]["nodetune_python"] = "/opt/no/python"
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(data))
    proc = run_cli(str(tmp_path), *FAST, "--json", timeout=120)
    assert proc.returncode == 3
    doc = report_of(proc)
    assert doc["status"] == "error" and doc["error"]["host"] == first
    assert "not found" in doc["error"]["message"]


def test_bad_input_is_exit_2(validate_lab: Path) -> None:
    proc = run_cli(str(validate_lab), "--sizes", "1G:1M")
    assert proc.returncode == 2 and "MIN is larger than MAX" in proc.stderr
    proc = run_cli(str(validate_lab), "--limit", nodes(validate_lab)[0])
    assert proc.returncode == 2 and "needs two hosts" in proc.stderr


def _measuring_pid(lab: Any, node: str, deadline: float) -> int:
    """The rank process: forked by the node's worker, named nodetune-rank<local rank>."""
    while time.monotonic() < deadline:
        found = lab.sh(node, "sh", "-c", "pgrep '^nodetune-rank' || true").split()
        if found:
            return int(found[0])
        time.sleep(0.5)
    raise AssertionError(f"no measuring worker appeared on {node}")


def _signal_rank(lab: Any, node: str, signal: str) -> None:
    """Send `signal` to the measuring rank on `node` (looked up again if it moved on).

    Called once the run is measuring (`_start_and_wait_measuring`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = _measuring_pid(lab, node, deadline)
        if not lab.sh(node, "sh", "-c", f"kill {signal} {pid} 2>&1 || true"):
            return
    raise AssertionError(f"could not signal the measuring worker on {node}")


def _start_and_wait_measuring(inventory: Path, timeout: str) -> tuple[subprocess.Popen[str],
                                                                      list[str]]:
    """Start a long validate (one 64 MiB size, 200 iterations) and return once every node's
    rank is measuring: the run's live progress has said that all ranks joined and, for
    each node, `node rank K on DEVICE` (in either order), which a node's first rank sends
    once past the process group's set-up, right before it allocates its buffers and
    enters the all_reduce loop (collective/worker/measure.py). The lines read so far are
    returned with the process; a run that ends first fails the test with what it said."""
    proc = subprocess.Popen(
        [str(NODETUNE), "validate", str(inventory), "--sizes", "64M", "--iters", "200",
         "--timeout", timeout], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    assert proc.stderr is not None
    hosts = len(nodes(inventory))
    seen: list[str] = []
    joined = False
    ranks: set[str] = set()
    for line in proc.stderr:  # the two kinds of line come in either order
        seen.append(line)
        joined = joined or "ranks joined" in line
        if found := re.search(r"node rank (\d+) on ", line):
            ranks.add(found.group(1))
        if joined and len(ranks) == hosts:
            break
    else:
        _, rest = proc.communicate(timeout=60)
        raise AssertionError(f"the run ended (exit {proc.returncode}) before every rank was "
                             f"measuring:\n{''.join(seen)}{rest}")
    return proc, seen


def test_worker_killed_mid_run_ends_cleanly(validate_lab: Path, lab: Any) -> None:
    victim = nodes(validate_lab)[1]
    proc, seen = _start_and_wait_measuring(validate_lab, "60")
    _signal_rank(lab, victim, "-9")
    killed_at = time.monotonic()
    _, rest = proc.communicate(timeout=200)
    stderr = "".join(seen) + rest
    assert proc.returncode == 3, stderr
    assert f"{victim}: the worker died" in stderr
    assert time.monotonic() - killed_at < 60
    assert not leftovers(lab)


def test_stalled_worker_times_out_with_exit_4(validate_lab: Path, lab: Any) -> None:
    victim = nodes(validate_lab)[1]
    proc, seen = _start_and_wait_measuring(validate_lab, "15")
    _signal_rank(lab, victim, "-STOP")  # alive but making no progress: a hang
    stopped_at = time.monotonic()
    _, rest = proc.communicate(timeout=200)
    stderr = "".join(seen) + rest
    assert proc.returncode == 4, stderr
    assert "no progress for 15 s" in stderr
    # gloo has no RAS: said once, and the run is judged as before (exit 4, in time)
    assert stderr.count("NCCL RAS: not applicable: the run uses gloo, not NCCL") == 1, stderr
    assert time.monotonic() - stopped_at < 15 + 30
    assert not leftovers(lab)


@pytest.mark.parametrize(("sig", "code", "status"), [(signal.SIGINT, 130, "interrupted"),
                                                     (signal.SIGTERM, 143, "terminated")])
def test_signal_mid_measurement_leaves_a_record_and_nothing_on_the_nodes(
        validate_lab: Path, lab: Any, tmp_path: Path, sig: int, code: int, status: str) -> None:
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [str(NODETUNE), "validate", str(validate_lab), "--sizes", "64M", "--iters", "200",
         "--timeout", "120", "--json"], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
        env={**os.environ, "NODETUNE_RUNS_DIR": str(runs)})
    try:
        deadline = time.monotonic() + 180
        while not all(lab.sh(n, "sh", "-c", "pgrep '^nodetune-rank' || true")
                      for n in lab.nodes):  # both ranks are measuring
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    doc = json.loads(out)
    assert doc["status"] == status and doc["exit_code"] == code
    record = runs / doc["run_id"]
    assert json.loads((record / "report.json").read_text()) == doc
    assert (record / "report.html").is_file()
    assert not leftovers(lab)


def _faster_history(runs: Path, hosts: list[str], busbw: float) -> list[str]:
    """Five passing validate records of ``hosts`` at ``busbw`` GB/s (4 MiB, lab-gloo, over the
    lab's fabric), written the way the verb writes them, as the history a later run is
    compared with."""
    ids = []
    for i in range(5):
        run_id = f"2026110{i + 1}T000000Z-validate"
        sizes = [{"bytes": n, "count": n // 4, "type": "float", "time_us": n / busbw / 1e3,
                  "algbw": busbw, "busbw": busbw, "wrong": 0} for n in (1 << 20, 4 << 20)]
        doc = {"schema_version": 1, "verb": "validate", "run_id": run_id,
               "started": f"2026-11-0{i + 1}T00:00:00+00:00", "status": "pass", "exit_code": 0,
               "options": {"profile": "lab-gloo"},
               "result": {"hosts": hosts, "verdict": "pass", "largest_busbw_gbps": busbw,
                          "sizes": sizes, "reasons": [], "path": "gloo/TCP eth1"},
               "nodes": {a: {"verdict": "good", "reason": f"pair with {b} passed",
                             "partners": [b], "busbw_gbps": None}
                         for a, b in (hosts, hosts[::-1])}}
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "report.json").write_text(json.dumps(doc))
        ids.append(run_id)
    return ids


def test_a_run_slower_than_its_history_warns_and_fails_when_asked(
        validate_lab: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    hosts = nodes(validate_lab)
    history = _faster_history(runs, hosts, 20.0)  # the lab measures well under 1 GB/s
    env = {**os.environ, "NODETUNE_RUNS_DIR": str(runs)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(NODETUNE), *args], capture_output=True, text=True,
                              timeout=300, cwd=REPO, env=env, check=False)

    warned = run("validate", str(validate_lab), *FAST, "--profile", "lab-gloo", "--json")
    assert warned.returncode == 0, warned.stderr
    doc = report_of(warned)
    assert doc["status"] == "pass" and doc["fail_on_regression"] is False
    regressed = {r["node"]: r for r in doc["regressions"]}
    assert set(regressed) == set(hosts)
    for r in regressed.values():
        assert r["median_gbps"] == 20.0 and r["drop"] > 0.9 and r["bytes"] == 4 << 20
        assert r["baseline_runs"] == history
        assert f"warning: regression: {r['node']}: busbw" in warned.stderr
    page = (runs / doc["run_id"] / "report.html").read_text()
    assert page.count('class="banner regression"') == 2

    junit = tmp_path / "j.xml"
    failed = run("validate", str(validate_lab), *FAST, "--profile", "lab-gloo",
                 "--fail-on-regression", "--junit", str(junit), "--json")
    assert failed.returncode == 1, failed.stderr
    doc = report_of(failed)
    assert (doc["status"], doc["exit_code"], doc["result"]["verdict"]) == ("fail", 1, "pass")
    assert {r["node"] for r in doc["regressions"]} == set(hosts)
    cases = ET.parse(junit).getroot().find("testsuite").findall("testcase")
    assert {c.get("name"): c.find("failure").get("type") for c in cases} == {
        h: "regression" for h in hosts}

    listed = run("runs", "--node", hosts[0], "--json")
    rows = json.loads(listed.stdout)
    assert [r["run_id"] for r in rows][:5] == history and len(rows) == 7
    assert [r["busbw_gbps"] for r in rows][:5] == [20.0] * 5
    assert all(r["busbw_gbps"] < 20.0 * 0.9 for r in rows[5:])
