"""The effective NCCL configuration on captured real output (tests/fixtures/nccl/README.md):
which values NCCL used, where each came from, and ``nccl.effective``'s judgement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodetune.ansible.inventory import Host
from nodetune.collective import plan as vplan
from nodetune.collective import worker_cmd
from nodetune.collective.launch import Measurement
from nodetune.measure import nccl_effective, nccl_log, protocol
from nodetune.measure.host_env import host_env
from nodetune.measure.nccl_effective import Expected

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
# As the capture was made (fixtures/h200-x1/README.md): a config file named by
# NCCL_CONF_FILE and an environment that disagree on NCCL_BUFFSIZE.
CONF = "/root/nccl-test.conf"
CONF_TEXT = "NCCL_BUFFSIZE=4194304\nNCCL_MIN_NCHANNELS=4\nNCCL_SOCKET_IFNAME=eth0\n"
RANK_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_CONF_FILE": CONF,
            "NCCL_BUFFSIZE": "8388608"}


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def inputs_line(env: dict[str, str], files: list[tuple[str, str | None]]) -> str:
    """The worker's nccl_env event as the node prints it."""
    return protocol.encode(nccl_effective.EVENT, env=env,
                           files=[{"path": p, "content": c} for p, c in files]).strip()


def captured(extra: list[str] | None = None) -> list[str]:
    """The h200 capture with the lead rank's report of what it held before NCCL started."""
    return [inputs_line(RANK_ENV, [(CONF, CONF_TEXT), ("/etc/nccl.conf", None)]),
            *lines("h200_init_env_2_28.log"), *(extra or [])]


def test_the_capture_parses_per_rank_with_every_value_nccl_reported() -> None:
    ranks = nccl_log.by_rank(lines("h200_init_env_2_28.log"))
    assert list(ranks) == ["vm:466"]
    t = nccl_log.parse(ranks["vm:466"])
    # "%lld." loses its full stop; a string setting has none; repeats are one value
    assert t.env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_NVLS_ENABLE": "0",
                     "NCCL_MIN_NCHANNELS": "4", "NCCL_BUFFSIZE": "8388608"}
    assert t.version == "2.28.9+cuda13.0"
    assert t.net_plugin == "Socket"
    assert (t.nvls_channels, t.nvls, t.collnet, t.gdr) == (0, False, None, None)
    assert t.invalid == {}


def test_file_and_environment_disagree_the_environment_wins_and_is_named() -> None:
    eff = nccl_effective.node_effective("gpu-1", captured(), run_env={})
    buff, chans, ifname = (eff.get(n) for n in ("NCCL_BUFFSIZE", "NCCL_MIN_NCHANNELS",
                                                  "NCCL_SOCKET_IFNAME"))
    assert buff is not None and (buff.value, buff.source) == ("8388608", "environment")
    assert "not set by nodetune" in buff.where  # inherited: nodetune's run env lacks it
    assert chans is not None and (chans.source, chans.where) == ("nccl.conf", CONF)
    assert ifname is not None and ifname.source == "nccl.conf"
    # held by neither the environment nor the file before NCCL started
    nvls = eff.get("NCCL_NVLS_ENABLE")
    assert nvls is not None and nvls.source == "unknown"
    doc = eff.to_dict()
    assert doc["version"] == "2.28.9+cuda13.0" and doc["net_plugin"] == "Socket"
    assert doc["config_files"] == [CONF] and doc["inputs_read"] is True
    assert doc["settings"]["NCCL_BUFFSIZE"] == {"value": "8388608", "source": "environment",
                                                "where": buff.where}
    # the file's value was meant to be used: NCCL took the environment's, and says whose
    verdict = nccl_effective.judge(eff, [Expected("NCCL_BUFFSIZE", "4194304", CONF)])
    assert verdict.ok is False
    assert verdict.problems == (
        f"NCCL_BUFFSIZE=4194304 ({CONF}): NCCL used NCCL_BUFFSIZE=8388608 from environment "
        f"({buff.where})",)


def test_a_value_nodetune_set_is_named_as_nodetune_s() -> None:
    eff = nccl_effective.node_effective("gpu-1", captured(),
                                        run_env={"NCCL_BUFFSIZE": "8388608"})
    buff = eff.get("NCCL_BUFFSIZE")
    assert buff is not None and buff.where == "set by nodetune for this run"
    verdict = nccl_effective.judge(eff, [Expected("NCCL_BUFFSIZE", "0x800000", "tune")])
    assert verdict.ok is True and verdict.used == ("NCCL_BUFFSIZE=8388608",)


def test_a_provisioned_value_nccl_did_not_use_fails_naming_what_it_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl_config provisions NCCL_MIN_NCHANNELS=8 and NCCL_IB_TC=106 into /etc/nccl.conf,
    but a host-wide variable sets NCCL_MIN_NCHANNELS=4 and the file the node has lacks
    NCCL_IB_TC: NCCL used 4 (environment) and its default."""
    host = Host("gpu-1", (), {"nccl_config_extra": {"NCCL_MIN_NCHANNELS": 8},
                              "nccl_config_ib_tc": 106})
    env = {"NCCL_DEBUG": "INFO", "NCCL_MIN_NCHANNELS": "4"}
    node_lines = [inputs_line(env, [("/root/.nccl.conf", None),
                                    ("/etc/nccl.conf", "NCCL_MIN_NCHANNELS=8\n")]),
                  *[ln for ln in lines("h200_init_env_2_28.log")
                    if "NCCL_BUFFSIZE" not in ln]]
    doc, warnings = nccl_effective.assess(host, node_lines, run_env={}, inventory_env={})
    check = doc["check"]
    assert check["status"] == "fail"
    assert check["problems"][0].startswith(
        "NCCL_IB_TC=106 (nccl_config_ib_tc (inventory)): NCCL used its default: NCCL_IB_TC "
        "was in neither the ranks' environment nor NCCL's config files")
    assert check["problems"][1].startswith(
        "NCCL_MIN_NCHANNELS=8 (nccl_config_extra.NCCL_MIN_NCHANNELS (inventory)): NCCL used "
        "NCCL_MIN_NCHANNELS=4 from environment (inherited environment")
    assert len(warnings) == 2 and all(w.startswith("nccl.effective on gpu-1: ")
                                      for w in warnings)


def test_a_value_nccl_refused_is_its_default() -> None:
    refused = "vm:466:466 [0] NCCL INFO Invalid value 99999999999999999999 for NCCL_BUFFSIZE, " \
              "using default 4194304."
    node_lines = [ln for ln in captured([refused]) if "BUFFSIZE set by" not in ln]
    eff = nccl_effective.node_effective("gpu-1", node_lines)
    buff = eff.get("NCCL_BUFFSIZE")
    assert buff is not None and (buff.value, buff.source) == ("4194304", "default")
    verdict = nccl_effective.judge(eff, [Expected("NCCL_BUFFSIZE", "8388608", "nodetune_env")])
    assert verdict.ok is False and "its default" in verdict.problems[0]


def test_no_init_env_lines_says_so_and_never_passes() -> None:
    """The 2.28 capture made with NCCL_DEBUG_SUBSYS=INIT,NET,TUNING: no ENV line."""
    node_lines = lines("h200_p2p_2_28.log")
    eff = nccl_effective.node_effective("gpu-1", node_lines, run_env={"NCCL_SOCKET_IFNAME": "lo"})
    assert eff.env_logged is False and eff.settings == ()
    assert eff.transports == {"0->1": ("P2P/CUMEM",)}
    verdict = nccl_effective.judge(eff, [Expected("NCCL_SOCKET_IFNAME", "lo", "nodetune")])
    assert verdict.ok is None and verdict.used == ()
    assert "no 'set by environment' line" in (verdict.unassessed or "")
    assert verdict.to_dict()["status"] == "not assessed"


def test_a_value_nccl_did_not_log_is_unconfirmed_not_failed() -> None:
    eff = nccl_effective.node_effective("gpu-1", captured(), run_env={})
    verdict = nccl_effective.judge(eff, [Expected("NCCL_BUFFSIZE", "8388608", "x"),
                                         Expected("NCCL_IB_HCA", "mlx5_0", "y")])
    # NCCL_IB_HCA is in neither the environment nor the file: NCCL's default, a problem
    assert verdict.ok is False and "NCCL_IB_HCA=mlx5_0" in verdict.problems[0]
    held = captured()
    held[0] = inputs_line({**RANK_ENV, "NCCL_IB_HCA": "mlx5_0"}, [(CONF, CONF_TEXT)])
    eff = nccl_effective.node_effective("gpu-1", held, run_env={})
    verdict = nccl_effective.judge(eff, [Expected("NCCL_IB_HCA", "mlx5_0", "y")])
    # held by the ranks, never read on this run (no IB device): not proven, not failed
    assert verdict.ok is True and verdict.unconfirmed == ("NCCL_IB_HCA=mlx5_0",)


@pytest.mark.parametrize(("name", "wanted", "logged", "same"), [
    ("NCCL_BUFFSIZE", "8388608", "8388608", True),
    ("NCCL_BUFFSIZE", "0x800000", "8388608", True),
    ("NCCL_BUFFSIZE", "8M", "8", False),          # strtoll stops at the M: NCCL used 8
    ("NCCL_ALGO", "ring", "Ring", True),
    ("NCCL_SOCKET_IFNAME", "ETH0", "eth0", False),
    ("NCCL_NET_GDR_LEVEL", "PHB", "PHB", True),
    ("NCCL_NET_GDR_LEVEL", "3", "PHB", True),     # old numbering (src/graph/paths.cc)
    ("NCCL_NET_GDR_LEVEL", "2", "PHB", False),
])
def test_values_compare_as_nccl_reads_them(name: str, wanted: str, logged: str,
                                           same: bool) -> None:
    assert nccl_effective.same(name, wanted, logged) is same


def test_a_level_nccl_cannot_read_is_a_problem() -> None:
    eff = nccl_effective.node_effective("gpu-1", captured(), run_env={})
    verdict = nccl_effective.judge(eff, [Expected("NCCL_NET_GDR_LEVEL", "phb", "inventory")])
    assert verdict.ok is False and "does not take this value" in verdict.problems[0]


@pytest.mark.parametrize(("given", "sent"), [
    (None, "INIT,NET,TUNING,ENV"),
    ("NET", "NET,INIT,ENV"),
    ("init,env", "init,env"),
    ("^ENV,COLL", "^COLL"),
    ("ALL", "ALL"),
])
def test_the_ranks_log_init_and_env_whatever_the_inventory_asks(given: str | None,
                                                                sent: str) -> None:
    base = {} if given is None else {"NCCL_DEBUG_SUBSYS": given}
    env = worker_cmd.worker_env(base, backend="nccl", iface="lo", force_ring=False)
    assert env["NCCL_DEBUG_SUBSYS"] == sent


def test_the_worker_reports_the_files_in_nccl_s_order(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    from nodetune.collective.worker import measure

    conf = tmp_path / "nccl.conf"
    conf.write_text(CONF_TEXT)
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    monkeypatch.setenv("NCCL_BUFFSIZE", "8388608")
    monkeypatch.setenv("HOME", str(tmp_path))
    got: dict[str, Any] = measure.nccl_inputs()
    assert got["env"]["NCCL_BUFFSIZE"] == "8388608"
    # NCCL_CONF_FILE replaces ~/.nccl.conf; /etc/nccl.conf is read after it
    assert [f["path"] for f in got["files"]] == [str(conf), "/etc/nccl.conf"]
    assert got["files"][0]["content"] == CONF_TEXT
    monkeypatch.delenv("NCCL_CONF_FILE")
    assert [f["path"] for f in measure.nccl_inputs()["files"]] == [
        str(tmp_path / ".nccl.conf"), "/etc/nccl.conf"]


def _measured(host: Host, node_lines: list[str], env: dict[str, str]) -> Measurement:
    planned = vplan.plan_node(host, vplan.Options(backend="nccl", nproc_per_node=1))
    launch = vplan.Launch(plan=planned, backend="nccl", nproc_per_node=1, sizes=(), port=1,
                          env={host.name: env})
    return Measurement(launch=launch, world=1, sizes=(), logs={host.name: tuple(node_lines)})


def test_validate_records_each_node_and_warns_on_what_nccl_did_not_use() -> None:
    from nodetune.validate.run import effective_of

    host = Host("gpu-1", (), {"nodetune_env": {"NCCL_BUFFSIZE": 4194304}})
    env = worker_cmd.worker_env(host_env(host), backend="nccl", iface="eth0",
                           force_ring=False)
    m = _measured(host, captured(), env)
    section, warnings = effective_of(m.launch.plan, m)
    node = section["gpu-1"]
    assert node["settings"]["NCCL_BUFFSIZE"]["value"] == "8388608"
    assert node["check"]["status"] == "fail"
    assert warnings == ("nccl.effective on gpu-1: NCCL_BUFFSIZE=4194304 (nodetune_env): NCCL "
                        "used NCCL_BUFFSIZE=8388608 from environment (inherited environment "
                        "(not set by nodetune: host-wide, image or login))",)
    # NCCL_SOCKET_IFNAME=eth0, nodetune's own, was logged: proven used
    assert "NCCL_SOCKET_IFNAME=eth0" in node["check"]["used"]


def test_check_s_one_node_sweep_fails_nccl_effective() -> None:
    from nodetune.check.allreduce import judge_effective
    from nodetune.check.model import Status

    host = Host("gpu-1", (), {"nccl_config_extra": {"NCCL_BUFFSIZE": 4194304}})
    m = _measured(host, captured(), {"NCCL_SOCKET_IFNAME": "eth0"})
    result = judge_effective(host, m)
    assert result.status is Status.FAIL
    assert "NCCL used NCCL_BUFFSIZE=8388608 from environment" in result.message
    assert result.measured.startswith("NCCL 2.28.9+cuda13.0: NCCL_BUFFSIZE=8388608 "
                                      "(environment)")
    # the same sweep without ENV lines: a warning, not a pass
    quiet = _measured(host, lines("h200_p2p_2_28.log"), {"NCCL_SOCKET_IFNAME": "lo"})
    assert judge_effective(host, quiet).status is Status.WARN
