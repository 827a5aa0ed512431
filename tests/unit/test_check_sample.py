"""``check --sample``: the node sampler run for real (``python -c SOURCE REQUEST``, a 2 s window)
against a stand-in nvidia-smi on PATH and the stand-in sysfs trees of
tests/fixtures/check/health, then judged; the judging on recorded samples; the option's
bad input.

The stand-in ``nvidia-smi`` is a stand-in for the hardware's tool only: with
``--query-gpu=... --format=csv,noheader,nounits -lms 1000`` it prints one line per GPU once a
second in the real tool's format (values in the order asked, ``", "`` between them, the bus
id as ``00000000:9B:00.0``, the reasons bitmask as ``0x%016X``: ``nvidia-smi
--help-query-gpu`` and nvml.h, read 2026-11-30) until it is killed, and it starts a child
that holds its output open, as a tool's helper might; with ``nvlink -e`` it prints the real
H200 capture of tests/fixtures/check/h200-x2 (one replay error more on its second run).
After its first sample it makes the changes the test names (a link that trains down, a
counter that rises), so that they fall inside the window.
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

from nodetune.ansible.inventory import Host
from nodetune.check import health, node_sample, sample
from nodetune.check.model import NodeChecks, Status
from nodetune.check.run import CheckOptions, check_nodes, report_sections
from nodetune.check.sample_smi import Point, Series, parse_smi
from nodetune.errors import InputError
from nodetune.measure import node_inputs
from nodetune.measure.node_inputs import HealthInputs
from tests.conftest import run_nodetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "check"
HEALTH = FIXTURES / "health"
NVLINK = (FIXTURES / "h200-x2" / "nvidia-smi-nvlink-e.txt").read_text()

STANDIN = r'''#!PYTHON
"""Stand-in for nvidia-smi (the tests' hardware edge): see test_check_sample.py."""
import json, os, subprocess, sys, time
args = sys.argv[1:]
if args[:2] == ["nvlink", "-e"]:
    count = os.environ["STANDIN_STATE"] + ".nvlink"
    n = int(open(count).read()) if os.path.exists(count) else 0
    open(count, "w").write(str(n + 1))
    text = open(os.environ["STANDIN_NVLINK"]).read()
    if n:  # one replay error on GPU 0 link 0 since the first read
        text = text.replace("Link 0: Replay Errors: 0", "Link 0: Replay Errors: 1", 1)
    sys.stdout.write(text)
    sys.exit(0)
reasons = os.environ.get("STANDIN_REASONS", "clocks_event_reasons.active")
if "--query-gpu=" in " ".join(args) and reasons not in " ".join(args):  # a driver before 535
    print('Field "clocks_event_reasons.active" is not a valid field to query.')
    sys.exit(2)
fields = "index,pci.bus_id," + reasons + ",power.draw,pcie.link.gen.current," \
         "pcie.link.width.current,utilization.gpu"
if args != ["--query-gpu=" + fields, "--format=csv,noheader,nounits", "-lms", "1000"]:
    print("stand-in: not what the sampler asks: " + " ".join(args))
    sys.exit(2)
open(os.environ["STANDIN_STATE"] + ".child", "w").write(
    str(subprocess.Popen(["sleep", "60"]).pid))  # holds stdout open
n = 0
while True:
    # GPU 0: HW slowdown (0x8) and SW power cap (0x4) in every sample; GPU 1 busy, its
    # link x16 then x8
    print(f"0, 00000000:9B:00.0, 0x{0x8 | 0x4:016X}, {650.5 + n:.2f}, 5, 16, 100", flush=True)
    print(f"1, 00000000:AB:00.0, 0x{0:016X}, 120.00, 5, {16 if n == 0 else 8}, 90",
          flush=True)
    if n == 0:
        for path, text in json.loads(os.environ.get("STANDIN_WRITES", "[]")):
            open(path, "w").write(text)
    n += 1
    time.sleep(1)
'''


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    for name in ("sysfs-infiniband", "sysfs-pci"):
        shutil.copytree(HEALTH / name, tmp_path / name, symlinks=True)
    return tmp_path / "sysfs-infiniband", tmp_path / "sysfs-pci" / "bus-pci-devices"


def _standin(tmp_path: Path) -> Path:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tool = bin_ / "nvidia-smi"
    tool.write_text(STANDIN.replace("PYTHON", sys.executable, 1))
    tool.chmod(0o755)
    (tmp_path / "nvlink.txt").write_text(NVLINK)
    return bin_


def _inputs(ib: Path, pci: Path) -> HealthInputs:
    return node_inputs.inputs(Host("n1", (), {"nodetune_rdma_sysfs": str(ib),
                                              "nodetune_pci_sysfs": str(pci)}))


def _sample(ib: Path, pci: Path, seconds: float, env: dict[str, str]) -> dict[str, Any]:
    request = {"seconds": seconds, "rdma_sysfs": str(ib), "pci_sysfs": str(pci), "timeout": 5}
    # -I -S away from the checkout (nothing of nodetune importable), as on a node
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", sample.source(),
                           json.dumps(request)], capture_output=True, text=True, timeout=30,
                          check=True, env={**os.environ, **env}, cwd=ib.parent)
    doc: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return doc


def test_the_sampler_as_the_controller_runs_it_finds_every_change_in_the_window(
        tmp_path: Path) -> None:
    ib, pci = _trees(tmp_path)
    bin_ = _standin(tmp_path)
    hca = (ib / "mlx5_0" / "device").resolve()
    gpu = (pci / "0000:9b:00.0").resolve()
    fatal = (gpu / "aer_dev_fatal").read_text().replace("CmpltTO 0", "CmpltTO 1").replace(
        "TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 1")
    writes = [[str(hca / "current_link_speed"), "16.0 GT/s PCIe\n"],
              [str(ib / "mlx5_0" / "ports" / "1" / "counters" / "link_downed"), "1\n"],
              [str(gpu / "aer_dev_fatal"), fatal]]
    state = tmp_path / "standin"
    started = time.monotonic()
    doc = _sample(ib, pci, 2, {"PATH": f"{bin_}:{os.environ['PATH']}",
                               "STANDIN_STATE": str(state),
                               "STANDIN_NVLINK": str(tmp_path / "nvlink.txt"),
                               "STANDIN_WRITES": json.dumps(writes)})
    took = time.monotonic() - started
    assert took < 2 + 2 * 5 + sample.MARGIN_S, took
    # nvidia-smi's group is gone, the child that held its output too
    child = int((tmp_path / "standin.child").read_text())
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text(
    ).rsplit(")", 1)[1].split()[0] == "Z"
    assert doc["smi"]["ran_to_the_end"] is True and doc["ticks"] == 2

    results, window = sample.judge(doc, _inputs(ib, pci))
    by = {r.name: r for r in results}
    slow = by["gpu.slowdown[0]"]  # 2 of 2 samples: too few to fail on (MIN_FAIL_SAMPLES)
    assert slow.status is Status.WARN and "too few samples to judge" in slow.message, slow
    assert "HW slowdown in 2 of 2 samples (100%, hw_slowdown 2)" in slow.measured
    assert "SW power cap 2" in slow.measured and "power 650/651/652 W" in slow.measured
    assert by["gpu.slowdown[1]"].status is Status.PASS
    flap = by["pcie.flap[0000:ab:00.0]"]
    assert flap.status is Status.FAIL and "gen 5 x16 -> gen 5 x8" in flap.measured, flap
    assert by["pcie.flap[0000:9b:00.0]"].status is Status.PASS  # sampled by nvidia-smi
    hca_flap = by["pcie.flap[mlx5_0]"]
    assert hca_flap.status is Status.WARN, hca_flap
    assert "32.0 GT/s PCIe -> 16.0 GT/s PCIe" in hca_flap.measured
    assert by["pcie.flap[mlx5_1]"].status is Status.PASS
    port = by["fabric.rdma_window[mlx5_0/1]"]
    assert port.status is Status.FAIL and "link_downed +1" in port.measured, port
    assert by["fabric.rdma_window[mlx5_1/1]"].status is Status.PASS  # 14 before: no rise
    aer = by["node.pcie_aer_window"]
    assert aer.status is Status.FAIL and "fatal +1 [CmpltTO 1]" in aer.message, aer
    assert "the start of the sampling window" in aer.message
    nvl = by["gpu.nvlink_window[0]"]
    assert nvl.status is Status.FAIL and "link 0 replay +1" in nvl.message, nvl
    assert by["gpu.nvlink_window[1]"].status is Status.PASS
    assert window["samples"] == 2 and window["gpu_samples"] == 2 and window["asked_s"] == 2
    assert 2 <= window["duration_s"] < 3 and window["start"].endswith("+00:00")


def test_a_driver_that_knows_only_the_older_field_name_is_asked_again_with_it(
        tmp_path: Path) -> None:
    """nvidia-smi before driver 535 names the bitmask clocks_throttle_reasons.active and
    refuses the newer name: the sampler asks again with the older one."""
    ib, pci = _trees(tmp_path)
    bin_ = _standin(tmp_path)
    doc = _sample(ib, pci, 2, {"PATH": f"{bin_}:{os.environ['PATH']}",
                               "STANDIN_STATE": str(tmp_path / "standin"),
                               "STANDIN_NVLINK": str(tmp_path / "nvlink.txt"),
                               "STANDIN_REASONS": "clocks_throttle_reasons.active"})
    assert doc["smi"]["fields"][2] == "clocks_throttle_reasons.active"
    results, _ = sample.judge(doc, _inputs(ib, pci))
    by = {r.name: r for r in results}
    slow = by["gpu.slowdown[0]"]  # judged on the older name's samples
    assert "HW slowdown in 1 of 1 samples" in slow.measured or "of 2 samples" in slow.measured
    assert slow.status is Status.WARN, slow


def test_check_samples_a_node_without_nvidia_smi_beside_its_other_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check_nodes on this machine (ansible_connection: local) with a 1 s window: the GPU
    sample checks skip naming the reason, the sysfs ones judge the stand-in trees, and the
    node's window is in its report."""
    ib, pci = _trees(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    host = Host("here", (), {"ansible_connection": "local", "net_sysctl_enabled": False,
                             "nodetune_rdma_sysfs": str(ib), "nodetune_pci_sysfs": str(pci)})
    said: list[str] = []
    checks = check_nodes([host], CheckOptions(timeout=30, allreduce=False, dcgm_level=0,
                                              sample=1.0),
                         progress=lambda _n, m: said.append(m))["here"]
    assert checks.error is None and "sampling 1 s" in said
    by = {r.name: r for r in checks.results}
    assert by["gpu.slowdown"].status is Status.SKIP
    assert by["gpu.slowdown"].message == ("no nvidia-smi on the node (1 NVIDIA GPU(s) on "
                                          "the PCI bus)")
    assert by["gpu.nvlink_window"].status is Status.SKIP
    # the GPU's link is still read from sysfs (no busy signal), the HCAs' and ports' too
    assert by["pcie.flap[0000:9b:00.0]"].status is Status.PASS
    assert by["fabric.rdma_window[mlx5_1/1]"].status is Status.PASS
    assert by["node.pcie_aer_window"].status is Status.PASS
    window = report_sections({"here": checks})["window"]["here"]
    assert window["previous_check"] == {"at": None, "what": None}
    assert window["sample"]["samples"] == 1 and window["sample"]["gpu_samples"] == 0


# --- judging recorded samples ---------------------------------------------------------------

def _series(*points: tuple[int, int, int, int]) -> Series:
    """GPU 3's samples: (reasons, gen, width, utilization) once a second."""
    return Series(3, "0000:1b:00.0", [Point(float(i), r, 300.0, g, w, u)
                                       for i, (r, g, w, u) in enumerate(points)])


@pytest.mark.parametrize(("hw", "status"), [(0, Status.PASS), (1, Status.WARN),
                                            (5, Status.WARN), (6, Status.FAIL)])
def test_the_slowdown_share_fails_at_gpuds_sixty_percent(hw: int, status: Status) -> None:
    points = [(0x40 if i < hw else 0x0, 5, 16, 99) for i in range(10)]
    got = sample.judge_slowdown(_series(*points), 10)
    assert got.status is status, got
    assert f"HW slowdown in {hw} of 10 samples" in got.measured


def test_a_short_window_never_fails_on_its_few_samples() -> None:
    """--sample 1s: one HW-slowdown second is 100 % of one sample, not a share to act on."""
    one = sample.judge_slowdown(_series((0x8, 5, 16, 99)), 1)
    assert one.status is Status.WARN and "too few samples to judge (fails from 5)" in one.message
    five = sample.judge_slowdown(_series(*[(0x8, 5, 16, 99)] * 5), 5)
    assert five.status is Status.FAIL and five.recommended.value == "service", five


def test_sw_thermal_slowdown_warns_and_sw_power_cap_is_only_reported() -> None:
    assert sample.judge_slowdown(_series((0x20, 5, 16, 99)), 1).status is Status.WARN
    got = sample.judge_slowdown(_series((0x4, 5, 16, 99)), 1)
    assert got.status is Status.PASS and "SW power cap 1" in got.measured


def test_a_window_nvidia_smi_did_not_sample_through_is_not_assessed() -> None:
    got = sample.judge_slowdown(_series(*[(0, 5, 16, 99)] * 4), 10)
    assert got.status is Status.UNKNOWN and "4 sample(s) in a 10 s window" in got.message
    assert sample.judge_slowdown(_series(*[(0, 5, 16, 99)] * 5), 10).status is Status.PASS


def test_reasons_nvidia_smi_does_not_report_skip() -> None:
    got = sample.judge_slowdown(Series(0, "0000:1b:00.0", [Point(0.0, None, None, 5, 16, 0)]),
                                1)
    assert got.status is Status.SKIP and "N/A" in got.message


def test_link_changes_count_only_while_the_gpu_is_busy() -> None:
    from nodetune.check import sample_links

    idle = sample_links.judge_gpu_link(_series((1, 1, 16, 0), (0, 5, 16, 80), (1, 1, 16, 0)))
    assert idle.status is Status.PASS and "2 change(s) while idle" in idle.measured
    assert idle.measured.startswith("no change while busy") and "busy in 1" in idle.measured
    # an idle GPU's steady link is not said to have held "while busy" (2x H200 at rest)
    rest = sample_links.judge_gpu_link(_series((1, 5, 16, 0), (1, 5, 16, 0)))
    assert rest.measured == "gen 5 x16 throughout; 2 samples, the GPU idle in every one"
    once = sample_links.judge_gpu_link(_series((0, 5, 16, 80), (0, 4, 16, 80)))
    assert once.status is Status.WARN
    flaps = sample_links.judge_gpu_link(_series((0, 5, 16, 80), (0, 4, 16, 80),
                                                (0, 5, 16, 80)))
    assert flaps.status is Status.FAIL and flaps.recommended.value == "service"
    # utilization not reported (MIG): the GPU-idle reason (0x1) says whether it was busy
    mig = Series(0, "0000:1b:00.0", [Point(0.0, 0x1, None, 5, 16, None),
                                     Point(1.0, 0x1, None, 1, 16, None)])
    assert sample_links.judge_gpu_link(mig).status is Status.PASS


def test_nvidia_smi_lines_are_read_as_the_tool_prints_them() -> None:
    smi = {"fields": list(node_sample.FIELDS), "lines": [
        [0.1, "0, 00000000:9B:00.0, 0x0000000000000001, 71.23, 1, 16, 0"],
        [0.1, "1, 00000000:AB:00.0, 0x0000000000000000, [N/A], [N/A], 16, [Not Supported]"],
        [0.2, "No devices were found"], [0.3, "2, not-a-bus, 0x0, 1, 1, 1, 1"]]}
    got = parse_smi(smi)
    assert sorted(got) == [0, 1]
    assert got[0].pci == "0000:9b:00.0" and got[0].points[0] == Point(0.1, 1, 71.23, 1, 16, 0)
    assert got[1].points[0] == Point(0.1, 0, None, None, 16, None)


def test_a_hung_or_failed_sampler_leaves_every_sample_check_unknown() -> None:
    from nodetune.errors import NodeTimeout

    got = sample.not_assessed(NodeTimeout("`python3` did not finish within 35 s"))
    assert [r.name for r in got] == list(sample.NAMES)
    assert {r.status for r in got} == {Status.UNKNOWN}
    assert {r.recommended.value for r in got} == {"re-run"}


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10.0), ("2m", 120.0), ("90", 90.0),
                                               ("1.5s", 1.5), ("10m", 600.0)])
def test_durations(text: str, seconds: float) -> None:
    assert sample.seconds_of(text) == seconds


@pytest.mark.parametrize("text", ["0s", "11m", "ten", "5h", "-3s", ""])
def test_a_bad_duration_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(InputError, match="--sample"):
        sample.seconds_of(text)


def test_the_cli_refuses_a_bad_sample_with_exit_2(tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        here:\n"
                   "          ansible_connection: local\n")
    res = run_nodetune("check", str(inv), "--sample", "2h", "--json", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    doc = res.json()
    assert "--sample '2h'" in doc["error"]["message"] and "checks" not in doc


def test_the_report_gives_each_nodes_window_the_previous_check_or_none() -> None:
    records = [{"run_id": "r1", "started": "2026-11-30T01:00:00+00:00",
                "health": {"n1": {"time": 1796000000.0, "xid": "pass"}}}]
    prev = health.previous("n1", records)
    assert (prev.time, prev.what) == (1796000000.0, "the check of 2026-11-30T01:00:00+00:00 "
                                                    "(r1)")
    seen = health.window_of(prev)
    assert seen == {"at": "2026-11-30T00:53:20+00:00", "what": prev.what}
    none = health.window_of(health.previous("n2", records))
    assert none == {"at": None, "what": None}
    sampled = {"start": "2026-11-30T01:00:05+00:00", "asked_s": 10.0, "duration_s": 10.0,
               "samples": 10, "gpu_samples": 9}
    doc = report_sections({"n1": NodeChecks("n1", window={"previous_check": seen,
                                                          "sample": sampled}),
                           "n2": NodeChecks("n2", window={"previous_check": none})})
    assert doc["window"]["n2"] == {"previous_check": none}
    assert sample.words(doc["window"]["n1"]) == [
        "counters since the previous check at 2026-11-30T00:53:20+00:00",
        "sampled 10.0 s from 2026-11-30T01:00:05+00:00: 10 sysfs reads, 9 nvidia-smi "
        "samples per GPU"]
    assert sample.words(doc["window"]["n2"]) == [
        "no previous check: counters since boot or the driver's load"]
    # a node that checks itself (check --launcher slurm) gets the controller's, as JSON
    assert health.previous_from(json.loads(json.dumps(health.previous_doc(prev))),
                                source="f") == prev


def test_the_cli_refuses_sample_under_the_slurm_launcher_with_exit_2(
        tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-a: "
                   "{ansible_host: 192.0.2.1}\n")
    res = run_nodetune("check", str(inv), "--launcher", "slurm", "--sample", "10s", "--json",
                       runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    assert "--sample" in res.json()["error"]["message"]


def test_the_real_sampled_lines_of_two_h200_at_rest_are_read_and_pass() -> None:
    """nvidia-smi -lms output from 2x H200 (tests/fixtures/check/h200-x2), as the sampler
    reads it: a line per GPU a second."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "h200-x2"
    lines = [ln for ln in (fixture / "nvidia-smi-query-gpu-lms.csv").read_text().splitlines()
             if ln and not ln.startswith("#")]
    got = parse_smi({"fields": list(node_sample.FIELDS),
                     "lines": [[float(i // 2), ln] for i, ln in enumerate(lines)]})
    assert sorted(got) == [0, 1] and got[0].pci == "0000:00:06.0"
    assert all(p.gen == 5 and p.width == 16 and p.reasons == 0x1 for s in got.values()
               for p in s.points)
    assert sample.judge_slowdown(got[0], 5).status is Status.PASS
    from nodetune.check import sample_links
    link = sample_links.judge_gpu_link(got[1])
    assert link.status is Status.PASS and "idle in every one" in link.measured


def test_a_flap_reset_within_the_window_still_counts_and_no_counter_is_no_pass() -> None:
    from nodetune.check import sample_links
    key = "rdma/mlx5_0/1"
    doc = {"series": {f"{key}/state": [[0.0, "4: ACTIVE"]],
                      f"{key}/link_downed": [[0.0, 0], [1.0, 1], [2.0, 0]]}}
    got = sample_links._judge_port(doc, key, "mlx5_0/1", 3.0)
    assert got.status is Status.FAIL and "link_downed +1" in got.measured, got
    none = sample_links._judge_port({"series": {f"{key}/state": [[0.0, "4: ACTIVE"]]}}, key,
                                    "mlx5_0/1", 3.0)
    assert none.status is Status.SKIP and "no error counter could be read" in none.message


def test_correctable_aer_errors_in_a_window_are_not_scaled_to_an_hour() -> None:
    """59 correctable errors in 10 s is about 21,000 an hour: over the 60/h limit, where a
    floor of one hour would have let it pass."""
    from nodetune.check import sample_links
    addr = "0000:18:00.0"
    text = "RxErr {n}\nTOTAL_ERR_COR {n}\n"
    doc = {"functions": {addr: {"role": "hca", "device": "mlx5_0"}},
           "series": {f"pci/{addr}/aer_correctable": [[0.0, text.format(n=0)],
                                                      [9.0, text.format(n=59)]],
                      f"pci/{addr}/aer_nonfatal": [[0.0, "TOTAL_ERR_NONFATAL 0\n"]],
                      f"pci/{addr}/aer_fatal": [[0.0, "TOTAL_ERR_FATAL 0\n"]]}}
    got = sample_links.judge_aer(doc, _inputs(Path("/nonexistent"), Path("/nonexistent")),
                                 "the start of the window", 1000.0, 1010.0)
    assert got.status is Status.WARN, got
    assert "correctable +59" in got.message and "in 10 s, over 60/h" in got.message, got


def test_a_gpu_the_driver_answers_for_with_an_error_or_not_at_all_is_not_assessed() -> None:
    smi = {"fields": list(node_sample.FIELDS), "lines": [
        [0.1, "0, 00000000:9B:00.0, [GPU is lost], [GPU is lost], [GPU is lost], "
              "[GPU is lost], [GPU is lost]"],
        [0.1, "1, 00000000:AB:00.0, 0x0000000000000001, [N/A], 5, 16, [Not Supported]"]]}
    got = parse_smi(smi)
    lost = sample.judge_slowdown(got[0], 1)
    assert lost.status is Status.UNKNOWN and "said [GPU is lost] in 1 of 1" in lost.message
    assert sample.judge_slowdown(got[1], 1).status is Status.PASS  # N/A is no error
    results, _ = sample.judge({"tool": "/usr/bin/nvidia-smi", "smi": smi, "seconds": 1.0,
                               "gpus_on_bus": 3, "series": {}},
                              _inputs(Path("/nonexistent"), Path("/nonexistent")))
    missing = [r for r in results if r.name == "gpu.slowdown"]
    assert missing and missing[0].status is Status.UNKNOWN, results
    assert "3 NVIDIA GPU(s) on the PCI bus, nvidia-smi sampled 2" in missing[0].message


def test_the_window_reads_the_rdma_counters_the_health_reader_and_its_judge_know() -> None:
    """Three programs name the port error counters (the window's sampler, the health reader,
    fabric.rdma_errors' limits): one list in effect."""
    from nodetune.check import node_health, rdma_errors
    assert set(node_sample.COUNTERS) == set(node_health.COUNTERS) == set(rdma_errors.LIMITS)


def test_the_window_reads_the_aer_counters_of_the_bridge_above_a_device(tmp_path: Path) -> None:
    """As node.pcie_aer does: the link's errors may be counted at its upstream end."""
    from nodetune.check import sample_links
    bridge = tmp_path / "pci" / "0000:17:00.0"
    dev = bridge / "0000:18:00.0"
    dev.mkdir(parents=True)
    for kind, total in (("correctable", "COR"), ("nonfatal", "NONFATAL"), ("fatal", "FATAL")):
        (bridge / f"aer_dev_{kind}").write_text(f"TOTAL_ERR_{total} 0\n")
    (dev / "current_link_width").write_text("16\n")
    (tmp_path / "ib" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "ib" / "mlx5_0" / "device").symlink_to(dev)
    found = node_sample.functions(str(tmp_path / "ib"), str(tmp_path / "nothing"))
    assert found["0000:17:00.0"]["bridge"] is True
    series: dict[str, Any] = {}
    node_sample.sweep(0.0, found, {}, series)
    (bridge / "aer_dev_nonfatal").write_text("CmpltTO 1\nTOTAL_ERR_NONFATAL 1\n")
    node_sample.sweep(1.0, found, {}, series)
    assert "pci/0000:17:00.0/current_link_width" not in series  # a bridge's link: not judged
    doc = {"functions": {a: {k: v for k, v in f.items() if k != "path"}
                         for a, f in found.items()}, "series": series}
    got = sample_links.judge_aer(doc, _inputs(tmp_path / "ib", tmp_path / "nothing"),
                                 "the start of the window", 1000.0, 1002.0)
    assert got.status is Status.FAIL and "nonfatal +1" in got.message, got
    assert "bridge above 0000:18:00.0" in got.message, got


def test_an_nvlink_reading_the_sampler_did_not_keep_is_skipped_saying_when() -> None:
    from nodetune.check import sample_links

    inp = _inputs(Path("/nonexistent-ib"), Path("/nonexistent-pci"))
    kept = {"time": 1.0, "rc": 0, "stdout": NVLINK, "stderr": ""}
    for doc, when in (({"tool": "/usr/bin/nvidia-smi", "nvlink_end": kept}, "start"),
                      ({"tool": "/usr/bin/nvidia-smi", "nvlink_start": kept}, "end")):
        [got] = sample_links.judge_nvlink(doc, inp, "gpu")
        assert got.status is Status.SKIP
        assert got.message == f"nvidia-smi nvlink -e failed at the window's {when}", got.message
