"""The worker's rank supervisor, run for real in forked and started processes.

The controller's test environment has no torch, so the ranks here run verbs that
need none (``reap``), or ``measure``, which fails on the missing torch as a rank
whose import breaks would; the measurement itself runs on the lab
(tests/integration/test_validate.py).
"""

from __future__ import annotations

import os

import pytest

from nodetune.validate import launch, protocol, worker


def spec(argv: list[str], nproc: int = 2, node_rank: int = 1) -> dict[str, object]:
    return {"nproc": nproc, "node_rank": node_rank, "nnodes": 2, "master_addr": "10.0.0.1",
            "port": 29511, "env": {"NODETUNE_TEST_VAR": "x y", "bad name": "dropped"},
            "argv": argv}


@pytest.mark.parametrize("fork", [True, False])
def test_every_rank_runs_and_a_clean_finish_is_exit_0(
        fork: bool, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", dict(os.environ))  # run_ranks sets the rendezvous
    assert worker.run_ranks(spec(["reap", ""]), fork=fork) == 0
    events = [protocol.decode(ln) for ln in capfd.readouterr().out.splitlines()]
    assert [e["event"] for e in events if e] == ["reaped", "reaped"]  # one per rank
    assert os.environ["WORLD_SIZE"] == "4" and os.environ["GROUP_RANK"] == "1"
    assert os.environ["MASTER_ADDR"] == "10.0.0.1" and os.environ["MASTER_PORT"] == "29511"
    assert os.environ["NODETUNE_TEST_VAR"] == "x y" and "bad name" not in os.environ


def test_a_failing_rank_is_the_exit_code_and_said_in_torchruns_words(
        capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", dict(os.environ))
    argv = ["measure", "--backend", "gloo", "--sizes", "1024"]
    assert worker.run_ranks(spec(argv, nproc=1, node_rank=0), fork=True) == 1
    out, err = capfd.readouterr()
    errors = [e for e in map(protocol.decode, out.splitlines()) if e and e["event"] == "error"]
    assert errors and "torch" in errors[0]["message"]
    assert "local rank 0" in err and "exitcode : 1" in err


def test_a_killed_rank_reads_as_killed_to_the_controller() -> None:
    assert launch._KILLED.search(worker.rank_failed(0, 4242, -9))
    assert not launch._KILLED.search(worker.rank_failed(0, 4242, 1))


def test_the_probe_names_the_interface_ssh_came_in_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this machine, for real: the loopback holds 127.0.0.1, so an SSH connection to it
    came in on lo; without SSH_CONNECTION (a local connection) there is none."""
    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 50000 127.0.0.1 22")
    info = worker.interfaces_info()
    assert info["ssh_iface"] == "lo"
    assert "lo" in info["interfaces"]  # type: ignore[operator]
    assert launch.checked_ifaces(info["interfaces"], host="here")
    monkeypatch.delenv("SSH_CONNECTION")
    assert worker.interfaces_info()["ssh_iface"] is None
