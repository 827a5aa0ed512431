"""One-node all_reduce: which pass mark applies, and the judgement of a measured sweep."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from nodetune.check import nccl
from nodetune.check.model import Status
from nodetune.errors import InputError
from nodetune.measure.sweep import SizeResult
from tests.fake_executor import FakeExecutor

GiB = 1 << 30


def row(size: int, busbw: float, wrong: int = 0) -> SizeResult:
    return SizeResult(bytes=size, count=size // 4, type="float", time_us=1.0, algbw=busbw,
                      busbw=busbw, wrong=wrong, launch="graph")


def launched(host: Any, gpus: int) -> Any:
    """The completed plan of a one-node sweep on ``host`` (as check's measure makes it)."""
    from nodetune.collective import plan as cplan

    planned = cplan.plan_node(host, cplan.Options(backend="nccl", nproc_per_node=gpus))
    return cplan.Launch(plan=planned, backend="nccl", nproc_per_node=gpus, sizes=(),
                        port=1, env={host.name: {}})


def test_profiles_by_model_and_count() -> None:
    h200x8 = nccl.profile_for("NVIDIA H200", 8)
    assert h200x8 is not None and h200x8.min_busbw_gbps == 431.0
    assert h200x8.at_bytes == 16 * GiB and "nd96isr_h200_v5" in h200x8.source
    h200x4 = nccl.profile_for("NVIDIA H200", 4)
    assert h200x4 is not None and h200x4.min_busbw_gbps == pytest.approx(326.6)
    assert nccl.profile_for("NVIDIA H100 80GB HBM3", 8) is not None
    assert nccl.profile_for("NVIDIA L40S", 4) is None
    named = nccl.profile_for("NVIDIA L40S", 4, named="a100-1node-8gpu-azure")
    assert named is not None and named.min_busbw_gbps == 228.0
    with pytest.raises(InputError, match="nodetune_check_profile 'nope'"):
        nccl.profile_for("NVIDIA H200", 8, named="nope")


def test_a_sweep_at_the_pass_mark_passes_and_below_fails() -> None:
    sweep = [row(64 << 20, 311.3), row(GiB, 355.7), row(4 * GiB, 361.7)]
    ok = nccl.judge(sweep, gpus=4, min_busbw=326.6, min_source="profile h200-1node-4gpu-nv18")
    assert ok.status is Status.PASS
    assert ok.measured == "361.7 GB/s busbw at 4 GiB (4 GPUs)"
    slow = nccl.judge([*sweep[:2], row(4 * GiB, 300.0)], gpus=4, min_busbw=326.6,
                      min_source="p")
    assert slow.status is Status.FAIL and "under 326.6 GB/s" in slow.message


def test_wrong_values_fail_whatever_the_bandwidth() -> None:
    r = nccl.judge([row(GiB, 999.0, wrong=3)], gpus=8, min_busbw=431.0, min_source="p")
    assert r.status is Status.FAIL and "3 wrong value(s) at 1 GiB" in r.message


def test_no_pass_mark_warns_and_one_gpu_skips() -> None:
    r = nccl.judge([row(GiB, 100.0)], gpus=2, min_busbw=None, min_source="none")
    assert r.status is Status.WARN and nccl.VAR_MIN in r.message
    skip = nccl.not_applicable(1)
    assert skip is not None and skip.message == "fewer than 2 GPUs"
    assert nccl.not_applicable(2) is None


def test_pass_mark_from_the_inventory_or_the_profile() -> None:
    from pathlib import Path

    from nodetune.ansible.inventory import Host
    from nodetune.check import allreduce, nvidia_smi
    from nodetune.check.expect import expectations

    xml = (Path(__file__).resolve().parents[1] / "fixtures/check/h200-x4/nvidia-smi-q-x.xml")
    smi = nvidia_smi.parse_smi_xml(xml.read_text())
    low, source, largest = allreduce.pass_mark(smi, expectations(Host("n", (), {})))
    assert (low, largest) == (pytest.approx(326.6), 4 * GiB)
    assert source.startswith("profile h200-1node-4gpu-nv18")
    mine = expectations(Host("n", (), {"nodetune_check_min_busbw_gbps": 300}))
    assert allreduce.pass_mark(smi, mine)[:2] == (300.0, "nodetune_check_min_busbw_gbps")
    with pytest.raises(InputError, match="nodetune_check_sizes"):
        expectations(Host("n", (), {"nodetune_check_sizes": "64M:1K"}))


def test_the_all_reduce_skips_where_it_cannot_mean_anything() -> None:
    from nodetune.ansible.inventory import Host
    from nodetune.check import allreduce
    from nodetune.check.expect import expectations
    from nodetune.check.probe import Probe

    host = Host("n", (), {})
    exp = expectations(host)
    probe = Probe(host="n", hostname="n", python="3.11")
    result, sizes = allreduce.run(host, probe, None, exp, enabled=True, timeout=10,
                                  accept_new_host_keys=False)
    assert result.status is Status.SKIP and result.message.startswith("fewer than 2 GPUs")
    assert sizes == ()


def _h200_smi(gpus: int) -> Any:
    from nodetune.check import nvidia_smi
    from tests.unit.test_check_probe import FIX

    smi = nvidia_smi.parse_smi_xml((FIX / "nvidia-smi-q-x.xml").read_text())
    return nvidia_smi.SmiLog(smi.driver_version, smi.cuda_version, smi.gpus[:gpus])


def test_an_early_all_reduce_is_used_only_where_the_judgement_agrees(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A measurement made before the judgement is used where it is for the same model,
    count and sizes; anything else measures again (and a node found without torch skips,
    whatever the early run did)."""
    from nodetune.ansible.inventory import Host
    from nodetune.check import allreduce
    from nodetune.check.expect import expectations
    from nodetune.check.probe import Probe
    from nodetune.collective.launch import Measurement

    host = Host("n", (), {})
    exp = expectations(host)
    smi = _h200_smi(4)
    product = smi.gpus[0].product
    probe = Probe(host="n", hostname="n", python="3.11",
                  torch={"torch": "2.11.0", "nccl_available": True, "nccl": "2.28.9"})
    early_rows = (row(1 << 30, 400.0),)
    again_rows = (row(1 << 30, 350.0),)
    asked: list[tuple[int, str]] = []

    def fake_measure(_host: Host, gpus: int, sizes: str, **_kw: object) -> Measurement:
        asked.append((gpus, sizes))
        return Measurement(launch=launched(host, gpus), world=gpus, sizes=again_rows,
                           logs={})

    monkeypatch.setattr(allreduce, "measure", fake_measure)

    def early(seen_product: str, gpus: int) -> allreduce.Early:
        done = Measurement(launch=launched(host, gpus), world=gpus,
                           sizes=early_rows, logs={})
        return allreduce.Early(seen_product, gpus, allreduce._sizes(seen_product, gpus, exp),
                               done)

    _, sizes = allreduce.run(host, probe, smi, exp, enabled=True, timeout=10,
                             accept_new_host_keys=False, early=early(product, 4))
    assert sizes == early_rows and asked == []
    _, sizes = allreduce.run(host, probe, smi, exp, enabled=True, timeout=10,
                             accept_new_host_keys=False, early=early(product, 8))
    assert sizes == again_rows and asked == [(4, allreduce._sizes(product, 4, exp))]
    _, sizes = allreduce.run(host, probe, smi, exp, enabled=True, timeout=10,
                             accept_new_host_keys=False, early=early("NVIDIA L40S", 4))
    assert sizes == again_rows and len(asked) == 2
    no_torch = Probe(host="n", hostname="n", python="3.11", torch={"error": "no torch"})
    result, sizes = allreduce.run(host, no_torch, smi, exp, enabled=True, timeout=10,
                                  accept_new_host_keys=False, early=early(product, 4))
    assert result.status is Status.SKIP and sizes == () and len(asked) == 2


def test_the_quick_look_reads_nvidia_smi_csv_or_gives_none() -> None:
    from nodetune.check import allreduce
    from nodetune.remote.executor import Ran

    def once(res: Ran) -> FakeExecutor:
        return FakeExecutor(lambda *_a: res)

    four = once(Ran(0, "NVIDIA H200\nNVIDIA H200\nNVIDIA H200\nNVIDIA H200\n", ""))
    assert allreduce.seen_gpus(four.node("n"), timeout=5) == ("NVIDIA H200", 4)
    assert four.argvs("n") == [["timeout", "-s", "KILL", "5", "nvidia-smi", "--query-gpu=name",
                                "--format=csv,noheader"]]
    assert four.ran[0][2] == 10  # 5 s for nvidia-smi under timeout(1), 5 s more for SSH
    gone = once(Ran(127, "", "nvidia-smi: not found"))
    assert allreduce.seen_gpus(gone.node("n"), timeout=5) is None
    none = once(Ran(6, "No devices were found\n", ""))
    assert allreduce.seen_gpus(none.node("n"), timeout=5) is None


def test_the_quick_look_at_a_hung_nvidia_smi_leaves_nothing_running(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in nvidia-smi that never answers, with a child of its own, run through a
    real local session: no answer, and neither it nor its child is left."""
    import time
    import uuid

    from nodetune.check import allreduce
    from nodetune.remote.executor import NodeRunner
    from nodetune.remote.session import LocalSession
    from nodetune.remote.ssh_config import ConnectSpec
    from nodetune.remote.ssh_executor import SshExecutor
    from tests.unit.test_lab_signal_faults import _marked

    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nsleep 120 &\nwait\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    mark = f"nodetune-test-{uuid.uuid4()}"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("NODETUNE_QUICK_LOOK_MARK", mark)
    session = LocalSession(ConnectSpec(host="n", address="n", local=True))
    t0 = time.monotonic()
    assert allreduce.seen_gpus(NodeRunner(SshExecutor({"n": session}), "n"), timeout=1) is None
    assert time.monotonic() - t0 < 5
    assert _marked(mark) == []


def test_check_starts_the_all_reduce_beside_the_probe_and_takes_torch_from_its_worker(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Where a quick look sees >= 2 GPUs, the probe runs without importing torch, the
    all_reduce starts beside it, and software.* are judged on the versions its worker
    read; a worker that never answered leaves them to one separate torch import."""
    from nodetune.ansible.inventory import Host
    from nodetune.check import allreduce, health, run
    from nodetune.check.probe import Probe
    from nodetune.collective.launch import Measurement
    from nodetune.measure import protocol
    from nodetune.remote.executor import Command, Ran
    from tests.unit.test_check_probe import FIX, TORCH_2_11

    xml = (FIX / "nvidia-smi-q-x.xml").read_text()
    asked: dict[str, Any] = {}

    def answer(_node: str, command: Command, _timeout: float) -> Ran:
        if "nvidia-smi" in command.argv[:5]:  # under timeout(1)
            return Ran(0, "NVIDIA H200\n" * 4, "")
        asked["torch_only"] = command.argv[0]
        return Ran(0, json.dumps(TORCH_2_11) + "\n", "")

    def probe(_s: object, host: Host, _exp: object, *, timeout: float,
              torch: bool = True, env: object = None, ppcc: bool = False) -> Probe:
        asked["probe_torch"] = torch
        assert ppcc is False  # the PPCC register is read only with --read-ppcc
        asked.setdefault("order", []).append("probe")
        return Probe(host=host.name, hostname=host.name, python="3.11",
                     nvidia={"pci_gpus": 4, "tool": "nvidia-smi",
                             "query": {"rc": 0, "stdout": xml}},
                     torch=TORCH_2_11 if torch else None)

    worker_said = protocol.encode("probe", torch="2.11.0+cu130", cuda="13.0",
                                  nccl_available=True, nccl="2.28.9").strip()

    def measure(_h: Host, gpus: int, _sizes: str, **_kw: object) -> Measurement:
        asked["measured"] = gpus
        if asked.get("fail"):
            raise LaunchError("the worker stopped", host="gpu-1")
        return Measurement(launch=launched(_h, gpus), world=gpus,
                           sizes=(row(1 << 30, 400.0),), logs={"gpu-1": (worker_said,)})

    from nodetune.errors import LaunchError
    monkeypatch.setattr(run.ssh_executor, "connect", lambda *_a, **_k: FakeExecutor(answer))
    monkeypatch.setattr(run, "run_probe", probe)
    def read_node(*_a: object, **_k: object) -> dict[str, Any]:
        asked.setdefault("order", []).append("health")
        if asked.get("health_fails"):
            raise LaunchError("the health reader failed", host="gpu-1")
        return {"health": 1}

    monkeypatch.setattr(health, "read_node", read_node)
    monkeypatch.setattr(allreduce, "measure", measure)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path))
    host = Host("gpu-1", ("gpu_nodes",), {"nodetune_expected_gpus": 4,
                                           "nodetune_python": "/opt/venv/bin/python"})
    checks = run.check_nodes([host], run.CheckOptions(dcgm_level=0))["gpu-1"]
    by = {r.name: r for r in checks.results}
    asked.pop("order")
    assert asked == {"probe_torch": False, "measured": 4}
    assert by["software.torch"].status is Status.PASS and "2.11.0" in by["software.torch"].measured
    assert by["gpu.allreduce"].status is not Status.SKIP and checks.allreduce
    asked.clear()
    asked["fail"] = True
    checks = run.check_nodes([host], run.CheckOptions(dcgm_level=0))["gpu-1"]
    by = {r.name: r for r in checks.results}
    assert asked["torch_only"] == "/opt/venv/bin/python" and asked["probe_torch"] is False
    assert by["software.torch"].status is Status.PASS
    assert by["gpu.allreduce"].status is Status.FAIL and "the worker stopped" in \
        by["gpu.allreduce"].message

    # The health reader failed: no all_reduce runs on the node.
    asked.clear()
    asked["health_fails"] = True
    checks = run.check_nodes([host], run.CheckOptions(dcgm_level=0))["gpu-1"]
    assert checks.error is not None and "health reader" in checks.error
    assert "measured" not in asked
    # DCGM's stress levels: the probe reads the GPUs first, the reader runs after it.
    asked.clear()
    run.check_nodes([host], run.CheckOptions(dcgm_level=2))
    assert asked["order"] == ["probe", "health"] and asked["measured"] == 4


def test_a_hung_quick_look_or_torch_import_is_the_probes_answer_not_a_node_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung `nvidia-smi --query-gpu` leaves torch to the probe; a hung torch import in
    the fallback read is software.torch's failure (the node was reached), as in the probe."""
    from nodetune.ansible.inventory import Host
    from nodetune.check import probe as probe_mod
    from nodetune.check import run
    from nodetune.check.expect import expectations
    from nodetune.errors import NodeTimeout
    from nodetune.remote.executor import Command, Ran

    def never(_node: str, command: Command, timeout: float) -> Ran:
        raise NodeTimeout(f"`{command.argv[0]}` did not finish within {timeout:g} s",
                          host="gpu-1")

    host = Host("gpu-1", ("gpu_nodes",), {"nodetune_python": "/opt/venv/bin/python"})
    hung = FakeExecutor(never)
    assert run._early_gpus(hung.node("gpu-1"), expectations(host),
                           run.CheckOptions(timeout=120), alone=True) is None
    assert [t for _n, _c, t in hung.ran] == [15.0]  # 10 s for nvidia-smi, 5 s more for SSH
    got = probe_mod.torch_only(hung.node("gpu-1"), "/opt/venv/bin/python", timeout=120)
    assert got["error"].startswith("exit None: `/opt/venv/bin/python` did not finish within 60 s")
    assert hung.ran[-1][2] == 60.0
