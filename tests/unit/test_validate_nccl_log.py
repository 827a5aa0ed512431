"""The NCCL log parser on captured real output (tests/fixtures/nccl/README.md names the sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodetune.measure import nccl_log
from nodetune.validate.result import Transport, transport_matches

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def parse(name: str) -> nccl_log.NcclTransport:
    return nccl_log.parse((FIXTURES / name).read_text().splitlines())


def test_roce_devices_and_network() -> None:
    t = parse("roce_2_19.log")
    assert t.network == "IB"
    assert t.ib_devices == ("mlx5_10:1/RoCE", "mlx5_11:1/RoCE")
    assert t.kind == "RoCE"
    assert t.version == "2.19.3+cuda12.3"
    assert not t.gdrdma


def test_ib_channels_with_gdrdma() -> None:
    t = parse("ib_gdrdma_a100.log")
    assert t.kind == "IB"
    assert t.gdrdma
    assert "NET/IB/5/GDRDMA" in t.net_paths
    assert t.local_paths == ()


def test_ib_plugin_channels_and_tuning_line() -> None:
    t = parse("ibext_gdrdma_tuning.log")
    assert t.kind == "IB"
    assert t.gdrdma
    assert t.net_paths == ("NET/IBext_v8/7/GDRDMA",)
    assert t.algorithm_at(4) == ("Tree", "LL")


def test_socket_fallback_when_no_ib_device() -> None:
    t = parse("socket_fallback_2_21.log")
    assert t.ib_missing
    assert t.network == "Socket"
    assert t.socket_devices == ("lo",)
    assert t.kind == "Socket"
    assert t.version == "2.21.5+cuda12.4"
    assert any("Connection closed by remote peer" in w for w in t.warnings)


def test_socket_channels() -> None:
    t = parse("socket_channels.log")
    assert t.kind == "Socket"
    assert t.net_paths == ("NET/Socket/0",)
    assert not t.gdrdma


def test_intra_node_only() -> None:
    t = parse("p2p_cumem.log")
    assert t.local_paths == ("P2P/CUMEM",)
    assert t.net_paths == ()
    assert t.kind == "local"
    reason = transport_matches(Transport.from_nccl(t, largest=4, forced_algo=None), "ib")
    assert reason is not None and "crossed no network" in reason


def test_ib_listing_and_bare_version_line() -> None:
    t = parse("ib_2_5.log")
    assert t.ib_devices == ("mlx5_0:1/IB",)
    assert t.kind == "IB"
    assert t.version == "2.5.6+cuda10.0"


def test_tuning_lines_with_names_and_other_collectives() -> None:
    t = nccl_log.parse([
        "h:1:1 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo RING proto SIMPLE time 4000.1",
        "h:1:1 [0] NCCL INFO AllGather: 1048576 Bytes -> Algo 1 proto 2 time 10.0",
    ])
    assert t.algorithm_at(1 << 30) == ("Ring", "Simple")
    assert t.algorithm_at(1 << 20) is None


def test_non_nccl_lines_are_ignored() -> None:
    t = nccl_log.parse(["Using network IB", "random text via NET/IB/0/GDRDMA"])
    assert t == nccl_log.NcclTransport()


@pytest.mark.parametrize(("fixture", "expect", "ok"), [
    ("roce_2_19.log", "ib", True),
    ("ib_gdrdma_a100.log", "ib", True),
    ("socket_fallback_2_21.log", "ib", False),
    ("socket_fallback_2_21.log", "socket", True),
    ("ib_gdrdma_a100.log", "socket", False),
    ("socket_channels.log", "any", True),
])
def test_expect_transport(fixture: str, expect: str, ok: bool) -> None:
    transport = Transport.from_nccl(parse(fixture), largest=4, forced_algo=None)
    assert (transport_matches(transport, expect) is None) is ok


def test_expected_ib_got_socket_says_so() -> None:
    transport = Transport.from_nccl(parse("socket_fallback_2_21.log"), largest=4,
                                    forced_algo=None)
    reason = transport_matches(transport, "ib")
    assert reason is not None and "NCCL used Socket" in reason and "/dev/infiniband" in reason


def test_gloo_is_reported_as_tcp() -> None:
    t = Transport.gloo(("eth0",))
    assert t.kind == "gloo/TCP"
    assert transport_matches(t, "socket") is None
    reason = transport_matches(t, "ib")
    assert reason is not None and "gloo" in reason


def test_h200_pair_on_one_host_crossed_no_network() -> None:
    t = parse("h200_p2p_2_28.log")
    assert t.version == "2.28.9+cuda13.0"
    assert t.network == "Socket", "NCCL loads its socket network even when it needs none"
    assert t.local_paths and all(p.startswith("P2P") for p in t.local_paths)
    assert t.net_paths == ()
    assert t.kind == "local"


def test_h200_forced_network_path_is_socket() -> None:
    t = parse("h200_socket_forced_2_28.log")
    assert t.net_paths == ("NET/Socket/0",)
    assert t.kind == "Socket"
    assert not t.gdrdma
    transport = Transport.from_nccl(t, largest=4 << 30, forced_algo=None)
    reason = transport_matches(transport, "ib")
    assert reason is not None and "NCCL used Socket" in reason


def test_paths_per_peer_in_the_older_channel_format() -> None:
    """``Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA`` (no /N, hex bus
    ids): each pair of ranks keeps its own paths, and GDRDMA there is GDR on."""
    t = parse("ib_gdrdma_a100.log")
    assert "NET/IB/5/GDRDMA" in t.peers["2->0"]
    assert t.peers["3->2"] == ("NET/IB/2/GDRDMA",)
    assert all(p.endswith("/GDRDMA") for paths in t.peers.values() for p in paths)
    assert t.gdr is True
