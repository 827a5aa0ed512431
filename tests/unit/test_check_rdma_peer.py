"""fabric.rdma_bw's two-sided run through real local sessions, with a stand-in ib_write_bw
(tests/fixtures/check/health/ib_write_bw-standin: perftest's command line and report format,
real bytes over TCP; there is no RDMA NIC here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodetune.ansible.inventory import Host
from nodetune.check.model import Status
from nodetune.measure import rdma_peer
from nodetune.remote import ssh
from nodetune.remote.executor import NodeRunner
from nodetune.remote.ssh_executor import over_session
from tests.conftest import free_port

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "health" / \
    "ib_write_bw-standin"


@pytest.fixture
def standin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ib_write_bw").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(rdma_peer, "DURATION_S", 1)
    monkeypatch.setattr(rdma_peer, "TCP_PORT", free_port())  # the stand-in's server listens there


def local() -> NodeRunner:
    return over_session("localhost", ssh.connect(
        Host("localhost", ("gpu_nodes",), {"ansible_connection": "local"})))


PORT = {"device": "mlx5_0", "port": "1", "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)"}


def test_measures_and_judges_each_active_port(standin_path: None) -> None:
    (r,) = rdma_peer.judge_with_peer(local(), local(), peer="gpu-2", peer_addr="127.0.0.1",
                                     ports=[PORT, {**PORT, "device": "mlx5_1",
                                                   "state": "1: DOWN"}],
                                     cuda=False, timeout=60)
    assert r.name == "fabric.rdma_bw[mlx5_0]" and "with gpu-2" in r.measured
    assert r.expected == ">= 360 Gb/s (0.9 x 400)"
    # Loopback TCP is far below 360 Gb/s: the failing variant, named by device and peer.
    assert r.status is Status.FAIL and r.message.startswith("mlx5_0 to gpu-2: ")
    slow = {**PORT, "rate": "0.0001 Gb/sec"}
    (ok,) = rdma_peer.judge_with_peer(local(), local(), peer="gpu-2", peer_addr="127.0.0.1",
                                      ports=[slow], cuda=False, timeout=60)
    assert ok.status is Status.PASS, ok


def test_no_server_is_a_named_failure(standin_path: None) -> None:
    # The stand-in server listens on 127.0.0.1 only; nothing answers on 127.0.0.2.
    (r,) = rdma_peer.judge_with_peer(local(), local(), peer="gpu-2", peer_addr="127.0.0.2",
                                     ports=[PORT], cuda=False, timeout=60)
    assert r.status is Status.FAIL and "Couldn't connect" in r.message


def test_no_active_port_skips() -> None:
    (r,) = rdma_peer.judge_with_peer(local(), local(), peer="p", peer_addr="127.0.0.1",
                                     ports=[], cuda=False, timeout=5)
    assert r.status is Status.SKIP


def test_prometheus_textfile_carries_each_rdma_bandwidth() -> None:
    from nodetune.reports import prom

    doc = {"verb": "check", "started": "2026-11-26T20:00:00+00:00", "checks": {"gpu-1": [
        {"name": "fabric.rdma_bw[mlx5_0]", "status": "pass",
         "measured": "392.51 Gb/s (host memory, 65536 B, with gpu-2)"},
        {"name": "fabric.rdma_bw[mlx5_0/cuda]", "status": "fail",
         "measured": "196.3 Gb/s (GPU memory, 65536 B, with gpu-2)"}]}}
    from prometheus_client.parser import text_string_to_metric_families

    text = prom.to_text(doc)
    (family,) = [f for f in text_string_to_metric_families(text)
                 if f.name == "nodetune_rdma_bw_gbps"]
    assert sorted((s.labels["memory"], s.value) for s in family.samples) == [
        ("gpu", 196.3), ("host", 392.51)]
    assert {**family.samples[0].labels, "memory": "-"} == {
        "node": "gpu-1", "device": "mlx5_0", "peer": "gpu-2", "memory": "-", "verb": "check"}


def test_a_peer_that_is_not_checked_is_bad_input_before_any_contact() -> None:
    from nodetune.check.run import CheckOptions, check_nodes
    from nodetune.errors import InputError

    hosts = [Host("gpu-1", ("gpu_nodes",), {"ansible_host": "192.0.2.1"})]
    with pytest.raises(InputError, match="--rdma-peer gpu-9: not one of the hosts checked"):
        check_nodes(hosts, CheckOptions(rdma_peer="gpu-9"))
    with pytest.raises(InputError, match="--dcgm-level 7"):
        check_nodes(hosts, CheckOptions(dcgm_level=7))
