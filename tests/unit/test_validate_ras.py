"""The RAS client against a stand-in RAS server.

The stand-in (``FakeRas``) is a real TCP server on 127.0.0.1 speaking the protocol of
NCCL's src/ras/client_support.cc (``rasClientEventLoop``): one answer line per command,
``STATUS`` answered with the report and then the connection closed. It replays the
real JSON NCCL 2.28.9 sent (tests/fixtures/nccl/ras_2_28_9_status.json) or the copy of it
edited to have a dead rank (see that folder's README). Only NCCL is faked.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodetune.collective import ras

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nccl"
HEALTHY = (FIXTURES / "ras_2_28_9_status.json").read_text()
DEAD = (FIXTURES / "ras_2_28_9_dead_rank.json").read_text()
REPO = Path(__file__).parent.parent.parent


class FakeRas:
    """Stand-in for NCCL's RAS client listener. ``mode``: answer, hang, cut, old. ``busy``:
    connections it accepts but does not answer first, as RAS's thread does while busy
    with an earlier collection (seen on 2x H200 with a peer stopped)."""

    def __init__(self, status: str = HEALTHY, mode: str = "answer", busy: int = 0) -> None:
        self.status, self.mode, self.busy = status, mode, busy
        self.connections = 0
        self._held: list[socket.socket] = []
        self.commands: list[str] = []
        self.release = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.busy:
                self.busy -= 1
                self._held.append(conn)  # read nothing, answer nothing
                continue
            break
        with conn:
            reader = conn.makefile("rb")
            for raw in reader:
                cmd = raw.decode().strip()
                self.commands.append(cmd)
                upper = cmd.upper()
                if upper.startswith("CLIENT PROTOCOL "):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif upper.startswith("TIMEOUT "):
                    conn.sendall(b"OK\n")
                elif upper.startswith("SET FORMAT "):
                    conn.sendall(b"ERROR: Unknown command " + cmd.encode() + b"\n"
                                 if self.mode == "old" else b"OK\n")
                elif upper in ("STATUS", "VERBOSE STATUS"):
                    if self.mode == "hang":
                        self.release.wait(30)
                    elif self.mode == "cut":
                        conn.sendall(self.status[: len(self.status) // 2].encode())
                    else:
                        conn.sendall(self.status.encode())
                    return

    def close(self) -> None:
        self.release.set()
        self.listener.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def server(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    made: list[FakeRas] = []

    def make(**kwargs: Any) -> FakeRas:
        s = FakeRas(**kwargs)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_healthy_communicator_from_the_real_capture(server) -> None:  # type: ignore[no-untyped-def]
    s = server()
    result = ras.query(s.addr, timeout=5)
    assert s.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "SET FORMAT json", "STATUS"]
    assert result["ok"] is True and result["healthy"] is True
    assert result["nccl_version"] == "2.28.9"
    assert result["addr"] == s.addr
    [comm] = result["communicators"]
    assert comm["hash"] == "0xdc8fd352412517c7"
    assert (comm["size"], comm["ranks_count"], comm["missing"], comm["errors"]) == (1, 1, [], [])
    assert "every rank answered" in ras.summary(result)
    assert ras.dead_hosts(result) == []


def test_dead_rank_names_node_pid_and_gpu(server) -> None:  # type: ignore[no-untyped-def]
    s = server(status=DEAD)
    result = ras.query(s.addr, timeout=5)
    assert result["ok"] is True and result["healthy"] is False
    [missing] = result["communicators"][0]["missing"]
    assert missing == {"rank": 1, "host": "192.0.2.3", "pid": 4711, "cuda_dev": 0,
                       "nvml_dev": 0, "unresponsive": True, "dead": True}
    assert ras.summary(result) == "NCCL RAS: dead rank 1 (pid 4711 on 192.0.2.3 GPU 0)"
    assert ras.dead_hosts(result) == ["192.0.2.3"]


def test_unresponsive_but_not_dead_is_not_convicted() -> None:
    doc = json.loads(DEAD)
    doc["communicators"][0]["missing_ranks"][0]["status"]["considered_dead"] = False
    result = ras.parse_status(json.dumps(doc))
    assert ras.summary(result).startswith("NCCL RAS: unresponsive rank 1 (pid 4711")
    assert ras.dead_hosts(result) == []


def test_async_error_is_reported() -> None:
    doc = json.loads(HEALTHY)
    doc["communicators"][0]["ranks"][0]["status"]["async_error"] = 6
    result = ras.parse_status(json.dumps(doc))
    assert result["healthy"] is False
    [err] = result["communicators"][0]["errors"]
    assert (err["rank"], err["host"], err["pid"], err["async_error"]) == (0, "192.0.2.2", 466, 6)
    assert ras.summary(result) == "NCCL RAS: async error 6 on rank 0 (pid 466 on 192.0.2.2 GPU 0)"


def test_verbose_asks_verbose_status(server) -> None:  # type: ignore[no-untyped-def]
    s = server()
    assert ras.query(s.addr, timeout=5, verbose=True)["ok"] is True
    assert s.commands[-1] == "VERBOSE STATUS"


def test_server_that_hangs_after_the_handshake_is_bounded(server) -> None:  # type: ignore[no-untyped-def]
    s = server(mode="hang")
    t0 = time.monotonic()
    result = ras.query(s.addr, timeout=1.0)
    assert time.monotonic() - t0 < 3.0
    assert result["ok"] is False
    assert "did not finish in time" in result["reason"]


def test_server_that_closes_mid_answer(server) -> None:  # type: ignore[no-untyped-def]
    s = server(mode="cut")
    result = ras.query(s.addr, timeout=5)
    assert result["ok"] is False
    assert "cut off or not JSON" in result["reason"]


def test_connection_refused_says_ras_is_not_running() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    result = ras.query(f"127.0.0.1:{port}", timeout=2)
    assert result == {"ok": False, "addr": f"127.0.0.1:{port}", "reason": ras.NOT_RUNNING,
                      "attempts": 1}  # refused: not asked again
    assert ras.summary(result) == f"NCCL RAS: {ras.NOT_RUNNING}"


def test_old_server_refusing_set_format(server) -> None:  # type: ignore[no-untyped-def]
    s = server(mode="old")
    result = ras.query(s.addr, timeout=5)
    assert result == {"ok": False, "addr": s.addr, "reason": ras.TOO_OLD, "attempts": 1}
    assert "STATUS" not in s.commands


def test_default_address_is_nccl_ras_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_RAS_ADDR", raising=False)
    assert ras.default_addr() == "localhost:28028"
    monkeypatch.setenv("NCCL_RAS_ADDR", "[::1]:29000")
    assert ras.parse_addr(ras.default_addr()) == ("::1", 29000)


@pytest.mark.parametrize("bad", ["localhost", ":28028", "host:0", "host:99999", "host:x"])
def test_bad_address_is_a_reason_not_a_traceback(bad: str) -> None:
    result = ras.query(bad, timeout=1)
    assert result["ok"] is False and "not HOST:PORT" in result["reason"]


def test_standalone_without_site_packages(server) -> None:  # type: ignore[no-untyped-def]
    s = server(status=DEAD)
    run = subprocess.run([sys.executable, "-S", "-m", "nodetune.collective.ras", "--addr", s.addr,
                          "--timeout", "5"], cwd=REPO, capture_output=True, text=True,
                         timeout=30, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["communicators"][0]["missing"][0]["dead"] is True


def test_standalone_exit_3_when_ras_cannot_be_asked() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    run = subprocess.run([sys.executable, "-S", "-m", "nodetune.collective.ras", "--addr",
                          f"127.0.0.1:{port}", "--timeout", "2"], cwd=REPO,
                         capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 3
    assert json.loads(run.stdout)["reason"] == ras.NOT_RUNNING
    assert run.stderr == ""


def test_standalone_bad_addr_exits_2() -> None:
    assert ras.main(["--addr", "nohost"]) == 2


def test_a_rank_behind_in_launched_operations_is_named() -> None:
    doc = json.loads(HEALTHY)
    comm = doc["communicators"][0]
    second = json.loads(json.dumps(comm["ranks"][0]))
    second.update(rank=1, pid=467, cuda_dev=1, nvml_dev=1)
    comm["ranks"][0]["collective_counts"]["AllReduce"] = 6650
    second["collective_counts"]["AllReduce"] = 6649
    comm["ranks"].append(second)
    result = ras.parse_status(json.dumps(doc))
    [behind] = result["communicators"][0]["behind"]
    assert (behind["rank"], behind["pid"], behind["ops"]) == (1, 467, {"AllReduce": [6649, 6650]})
    assert result["healthy"] is True  # RAS's MISMATCH is a warning: often momentary
    assert ras.summary(result) == (
        "NCCL RAS: 1 communicator(s), every rank answered, no async error; "
        "rank 1 (pid 467 on 192.0.2.2 GPU 1) behind on AllReduce (6649 of 6650)")
    # Equal counts: nobody is behind (the real capture).
    assert ras.parse_status(HEALTHY)["communicators"][0]["behind"] == []


MISSING_RAW = (FIXTURES / "ras_2_28_9_missing_rank_raw.json").read_text()


def test_nccl_2_28_9s_missing_rank_without_its_comma_is_read(server) -> None:  # type: ignore[no-untyped-def]
    """The real answer of NCCL 2.28.9 with one of two ranks stopped (2x H200): its missing
    rank's "nvml_dev" line lacks the comma before "status", as NCCL's
    jsonWriteMissingRank writes it up to 2.28.9; json.loads alone refuses it."""
    with pytest.raises(ValueError, match="delimiter"):
        json.loads(MISSING_RAW)
    s = server(status=MISSING_RAW)
    result = ras.query(s.addr, timeout=5)
    assert result["ok"] is True and result["healthy"] is False
    assert "comma NCCL 2.28.7-2.28.9 leave out" in result["note"]
    [missing] = result["communicators"][0]["missing"]
    assert missing == {"rank": 1, "host": "192.0.2.2", "pid": 640, "cuda_dev": 1,
                       "nvml_dev": 1, "unresponsive": True, "dead": False}
    assert ras.summary(result) == "NCCL RAS: unresponsive rank 1 (pid 640 on 192.0.2.2 GPU 1)"
    assert ras.dead_hosts(result) == []  # unresponsive is not dead: nothing convicted


def test_a_cut_answer_is_still_cut_off_with_the_comma_put_back() -> None:
    result = ras.parse_status(MISSING_RAW[:900])
    assert result["ok"] is False and "cut off or not JSON" in result["reason"]
    healthy = ras.parse_status(HEALTHY)
    assert healthy["ok"] is True and "note" not in healthy  # valid JSON is read unchanged


def test_a_busy_ras_is_asked_again_within_the_bound(server) -> None:  # type: ignore[no-untyped-def]
    """RAS's thread skips handshakes while it finishes a collection (a peer not answering
    it): the client asks again and reads the first status RAS gives, all within the
    caller's bound."""
    s = server(busy=1)
    t0 = time.monotonic()
    result = ras.query(s.addr, timeout=3 * ras.ATTEMPT_S)
    took = time.monotonic() - t0
    assert result["ok"] is True and result["attempts"] == 2 and s.connections == 2
    assert ras.ATTEMPT_S <= took < 2 * ras.ATTEMPT_S
    never = server(busy=99)
    t0 = time.monotonic()
    result = ras.query(never.addr, timeout=2.5)
    assert result["ok"] is False and "handshake in time" in result["reason"]
    assert time.monotonic() - t0 < 4.0


def test_the_gpu_is_named_as_nvidia_smi_numbers_it() -> None:
    """validate's stalled pair on 2x H200 (2026-11-29): rank 1 ran with
    CUDA_VISIBLE_DEVICES=1, so RAS gave cuda_dev 0 and nvml_dev 1."""
    rank = {"rank": 1, "host": "127.0.0.1", "pid": 735, "cuda_dev": 0, "nvml_dev": 1,
            "unresponsive": True, "dead": False}
    result = {"ok": True, "communicators": [{"missing": [rank], "errors": [], "behind": []}]}
    assert ras.summary(result) == ("NCCL RAS: unresponsive rank 1 (pid 735 on 127.0.0.1 "
                                   "GPU 1, CUDA device 0)")


def test_a_status_of_an_odd_shape_is_a_reason_and_a_count_alone_is_not_healthy() -> None:
    odd = json.loads(HEALTHY)
    odd["communicators"][0]["missing_ranks"] = 3  # not a list
    odd["communicators"][0]["missing_ranks_count"] = 1
    result = ras.parse_status(json.dumps(odd))
    assert result["ok"] is True and result["healthy"] is False
    assert ras.summary(result) == "NCCL RAS: 1 missing rank(s) RAS did not name"
    assert ras.parse_status(json.dumps({"communicators": [{"ranks": 7}]}))["ok"] is True


def test_the_default_bound_is_made_of_short_asks(server) -> None:  # type: ignore[no-untyped-def]
    s = server(busy=1)
    result = ras.query(s.addr, timeout=10)
    assert result["ok"] is True and result["attempts"] == 2


def test_whether_ras_is_asked_again_follows_the_failure_not_its_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry is decided by whether the failure says RAS was busy (no answer in
    time), whatever its reason reads: a busy failure in other words is asked again, and a
    failure that was not RAS being busy is not, even worded like a busy one."""
    asks: list[float] = []
    failures = [ras._Failed("RAS kept quiet", busy=True)]

    def stand_in(host: str, port: int, timeout: float, verbose: bool) -> bytes:
        asks.append(timeout)
        if failures:
            raise failures.pop(0)
        return HEALTHY.encode()

    monkeypatch.setattr(ras, "_converse", stand_in)
    result = ras.query("127.0.0.1:28028", timeout=10)
    assert result["ok"] is True and result["attempts"] == 2 and len(asks) == 2
    asks.clear()
    failures[:] = [ras._Failed("RAS did not answer the handshake in time")]  # busy=False
    result = ras.query("127.0.0.1:28028", timeout=10)
    assert result == {"ok": False, "addr": "127.0.0.1:28028", "attempts": 1,
                      "reason": "RAS did not answer the handshake in time"}
    assert len(asks) == 1
