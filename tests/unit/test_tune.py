"""`nodetune tune`'s decisions without nodes: the values NCCL accepts, the grid, the
interleaved order, the recommendation rule and the group_vars snippet."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodetune import records
from nodetune.ansible.inventory import Host, Inventory
from nodetune.cli import main
from nodetune.collective.launch import Measurement
from nodetune.collective.plan import Launch, Options, Plan
from nodetune.errors import InputError, LaunchError
from nodetune.measure.sweep import SizeResult
from nodetune.tune import grid as grid_mod
from nodetune.tune import schedule, snippet, stats
from nodetune.tune import verb as tune_verb
from nodetune.tune.grid import Combo, Grid
from tests.plugins import load_plugin

ROOT = Path(__file__).resolve().parents[2]
ROLE_VARS = yaml.safe_load((ROOT / "roles/nccl_config/vars/main.yml").read_text())
KNOWN = ROLE_VARS["__nccl_config_known"]
nccl_filter = load_plugin("plugins/filter/nccl_config.py")

DEFAULT = Combo()
RING = Combo((("NCCL_ALGO", "Ring"),))
TREE = Combo((("NCCL_ALGO", "Tree"),))
SIZES = (1 << 20, 4 << 20)


def rows(*busbw: float, wrong: int = 0) -> tuple[SizeResult, ...]:
    """One run's sizes with these busbw (GB/s), smallest size first."""
    return tuple(SizeResult(bytes=b, count=b // 4, type="float", time_us=1.0, algbw=v,
                            busbw=v, wrong=wrong) for b, v in zip(SIZES, busbw, strict=True))


# -- values NCCL accepts --------------------------------------------------------------

def test_values_take_nccls_spelling_and_lists() -> None:
    assert grid_mod.checked("NCCL_ALGO", ["ring", "^tree,nvls", "Ring"]) == ("Ring", "^Tree,NVLS")
    assert grid_mod.checked("NCCL_PROTO", ["ll128", "Simple"]) == ("LL128", "Simple")
    assert grid_mod.checked("NCCL_BUFFSIZE", ["8M", "4194304"]) == ("8388608", "4194304")
    assert grid_mod.checked("NCCL_MIN_NCHANNELS", ["32"]) == ("32",)
    assert grid_mod.checked("NCCL_TOPO_FILE", ["/opt/topo.xml"]) == ("/opt/topo.xml",)


@pytest.mark.parametrize(("name", "value", "said"), [
    ("NCCL_ALGO", "foo", "--algo 'foo': 'foo' is not an NCCL algorithm"),
    ("NCCL_ALGO", "Ring,", "is not an NCCL algorithm"),
    ("NCCL_PROTO", "LL256", "--proto 'LL256': 'LL256' is not an NCCL protocol"),
    ("NCCL_MIN_NCHANNELS", "0", "--min-nchannels '0'"),
    ("NCCL_MAX_NCHANNELS", "65", "--max-nchannels '65'"),
    ("NCCL_BUFFSIZE", "lots", "--buffsize 'lots'"),
    ("NCCL_TOPO_FILE", "topo.xml", "--topo-file 'topo.xml': the absolute path"),
    ("NCCL_TOPO_FILE", "/opt/t.xml\nNCCL_ALGO=Tree", "--topo-file"),
])
def test_values_nccl_refuses_are_bad_input_naming_the_option(name: str, value: str,
                                                            said: str) -> None:
    with pytest.raises(InputError) as exc:
        grid_mod.checked(name, [value])
    assert said in exc.value.message
    assert exc.value.exit_code == 2


def test_checked_values_pass_the_roles_own_type_check() -> None:
    """What tune accepts, the nccl_config role accepts when apply writes it."""
    values = {"NCCL_ALGO": "^Tree,NVLS", "NCCL_PROTO": "LL128", "NCCL_MIN_NCHANNELS": "32",
              "NCCL_MAX_NCHANNELS": "64", "NCCL_BUFFSIZE": "8388608",
              "NCCL_TOPO_FILE": "/opt/topo.xml"}
    checked = {k: grid_mod.checked(k, [v])[0] for k, v in values.items()}
    assert nccl_filter.nccl_config_check(checked, KNOWN, {}) == {"errors": [], "warnings": []}


# -- the grid ---------------------------------------------------------------------------

def test_default_grid_is_small_and_starts_with_the_default() -> None:
    combos = grid_mod.grid_from({}).combos()
    assert combos[0] == DEFAULT
    assert [c.name for c in combos[1:]] == ["NCCL_ALGO=Ring", "NCCL_ALGO=Tree",
                                            "NCCL_PROTO=Simple", "NCCL_BUFFSIZE=8388608"]


def test_named_values_replace_the_default_grid_one_at_a_time_or_crossed() -> None:
    given = {"NCCL_ALGO": ["Ring", "Tree"], "NCCL_PROTO": ["Simple"]}
    alone = grid_mod.grid_from(given).combos()
    assert [c.name for c in alone] == ["default", "NCCL_ALGO=Ring", "NCCL_ALGO=Tree",
                                       "NCCL_PROTO=Simple"]
    crossed = grid_mod.grid_from(given, cross=True).combos()
    assert len(crossed) == 3 * 2 and crossed[0] == DEFAULT
    assert "NCCL_ALGO=Tree NCCL_PROTO=Simple" in [c.name for c in crossed]


def test_too_many_combinations_is_bad_input() -> None:
    with pytest.raises(InputError, match="combinations"):
        grid_mod.grid_from({"NCCL_MIN_NCHANNELS": [str(n) for n in range(1, 6)],
                            "NCCL_BUFFSIZE": ["1M", "2M", "4M", "8M", "16M"]}, cross=True)


# -- the order --------------------------------------------------------------------------

def test_runs_are_interleaved_round_robin_and_rotated() -> None:
    order = schedule.interleaved(3, 3)
    assert [(s.repeat, s.combo) for s in order] == [
        (0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 0), (2, 2), (2, 0), (2, 1)]
    assert Counter(s.combo for s in order) == {0: 3, 1: 3, 2: 3}
    for r in range(3):  # every round holds every combination once
        assert sorted(s.combo for s in order if s.repeat == r) == [0, 1, 2]
    # no combination runs twice in a row: the repeats of one are spread over the run
    assert all(a.combo != b.combo for a, b in itertools.pairwise(order))


# -- the recommendation rule ------------------------------------------------------------

def test_a_winner_inside_the_spread_is_not_recommended() -> None:
    """Ring's median is higher, but its slowest run is below the default's fastest."""
    judged = stats.judge_all({DEFAULT: [rows(5, 10.0), rows(5, 11.0), rows(5, 10.5)],
                              RING: [rows(5, 10.8), rows(5, 12.0), rows(5, 11.5)]},
                             min_gain=0.0)
    assert judged[1].verdict == "within spread" and judged[1].gain_pct == pytest.approx(9.52)
    rec = stats.recommend(judged, backend="nccl", min_gain=0.0)
    assert rec.combo is None and "spread" in rec.reason


def test_a_winner_beyond_the_spread_is_recommended() -> None:
    judged = stats.judge_all({DEFAULT: [rows(5, 10.0), rows(5, 11.0), rows(5, 10.5)],
                              RING: [rows(5, 12.0), rows(5, 12.5), rows(5, 12.2)],
                              TREE: [rows(5, 8.0), rows(5, 8.5), rows(5, 8.2)]},
                             min_gain=2.0)
    assert [j.verdict for j in judged] == ["default", "better", "worse"]
    rec = stats.recommend(judged, backend="nccl", min_gain=2.0)
    assert rec.combo == RING and "+16.2 %" in rec.reason


def test_a_winner_by_less_than_min_gain_is_not_recommended() -> None:
    judged = stats.judge_all({DEFAULT: [rows(5, 10.0), rows(5, 10.1)],
                              RING: [rows(5, 10.15), rows(5, 10.2)]}, min_gain=2.0)
    assert judged[1].verdict == "within spread"
    assert stats.recommend(judged, backend="nccl", min_gain=2.0).combo is None


def test_a_winner_that_costs_a_smaller_size_is_not_recommended() -> None:
    judged = stats.judge_all({DEFAULT: [rows(5.0, 10.0), rows(5.2, 10.2)],
                              RING: [rows(3.0, 12.0), rows(3.1, 12.2)]}, min_gain=2.0)
    assert judged[1].verdict == "within spread" and str(1 << 20) in judged[1].note
    assert stats.recommend(judged, backend="nccl", min_gain=2.0).combo is None


def test_wrong_results_disqualify_and_gloo_never_recommends() -> None:
    fast_but_wrong = {DEFAULT: [rows(5, 10.0), rows(5, 10.1)],
                      RING: [rows(5, 20.0, wrong=1), rows(5, 20.0)]}
    judged = stats.judge_all(fast_but_wrong, min_gain=2.0)
    assert judged[1].verdict == "wrong results"
    assert stats.recommend(judged, backend="nccl", min_gain=2.0).combo is None
    clear_win = stats.judge_all({DEFAULT: [rows(5, 10.0), rows(5, 10.1)],
                                 RING: [rows(5, 20.0), rows(5, 20.1)]}, min_gain=2.0)
    assert stats.recommend(clear_win, backend="nccl", min_gain=2.0).combo == RING
    rec = stats.recommend(clear_win, backend="gloo", min_gain=2.0)
    assert rec.combo is None and "reads no NCCL_* variable" in rec.reason


def test_spreads_per_size() -> None:
    (small, large) = stats.spreads([rows(1, 10), rows(3, 12), rows(2, 11)])
    assert (small.median, small.low, small.high, small.runs) == (2, 1, 3, (1, 3, 2))
    assert large.spread_pct == pytest.approx(100 * 2 / 11)


# -- the snippet ------------------------------------------------------------------------

def test_snippet_loads_back_into_the_roles_variable_and_passes_its_check() -> None:
    text = snippet.group_vars({"NCCL_ALGO": "^Tree,NVLS", "NCCL_BUFFSIZE": "8388608",
                               "NCCL_TOPO_FILE": "/opt/my topo: 'x'.xml"},
                              {"NCCL_IB_DISABLE": 0, "NCCL_ALGO": "Tree"}, run_id="r1")
    data = yaml.safe_load(text)
    assert list(data) == ["nccl_config_extra"]
    # nccl_config_extra is the role's own variable (defaults/main.yml)
    defaults = yaml.safe_load((ROOT / "roles/nccl_config/defaults/main.yml").read_text())
    assert "nccl_config_extra" in defaults
    assert data["nccl_config_extra"] == {"NCCL_IB_DISABLE": 0, "NCCL_ALGO": "^Tree,NVLS",
                                         "NCCL_BUFFSIZE": 8388608,
                                         "NCCL_TOPO_FILE": "/opt/my topo: 'x'.xml"}
    checked = nccl_filter.nccl_config_check(data["nccl_config_extra"], KNOWN, {})
    assert checked == {"errors": [], "warnings": []}
    assert all(line.startswith("#") for line in text.splitlines()[:3])


def test_existing_extra_must_be_a_mapping() -> None:
    assert snippet.existing_extra({}, "a") == {}
    with pytest.raises(InputError, match="nccl_config_extra must be a mapping") as exc:
        snippet.existing_extra({"nccl_config_extra": "NCCL_ALGO=Ring"}, "node-a")
    assert exc.value.host == "node-a"


def test_write_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    target = tmp_path / "nccl.yml"
    snippet.check_target(target, force=False)
    snippet.write(target, "a: 1\n", force=False)
    with pytest.raises(InputError, match="exists; pass --force"):
        snippet.check_target(target, force=False)
    with pytest.raises(InputError, match="exists; pass --force"):
        snippet.write(target, "a: 2\n", force=False)
    assert target.read_text() == "a: 1\n"
    snippet.check_target(target, force=True)
    snippet.write(target, "a: 3\n", force=True)
    assert target.read_text() == "a: 3\n"
    with pytest.raises(InputError, match="does not exist"):
        snippet.check_target(tmp_path / "no" / "x.yml", force=False)


def test_grid_values_reach_the_combination_env() -> None:
    grid = Grid({"NCCL_ALGO": ("Ring",), "NCCL_BUFFSIZE": ("8388608",)}, cross=True)
    envs = [dict(c.env) for c in grid.combos()]
    assert {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "8388608"} in envs and envs[0] == {}


def test_under_gloo_every_verdict_says_no_setting_took_effect() -> None:
    clear_win = {DEFAULT: [rows(5, 10.0), rows(5, 10.1)], RING: [rows(5, 20.0), rows(5, 20.1)]}
    judged = stats.judge_all(clear_win, min_gain=2.0, backend="gloo")
    assert [j.verdict for j in judged] == ["default", "not read by gloo"]
    assert "better" in judged[1].note and "noise" in judged[1].note


# -- the plan each run gets -------------------------------------------------------------

def _inventory(tmp_path: Path, **extra: object) -> Inventory:
    hosts = tuple(Host(name=n, groups=("gpu_nodes",),
                       vars={"ansible_host": f"10.0.0.{i}", **extra})
                  for i, n in enumerate(("gpu-a", "gpu-b", "gpu-c"), start=1))
    return Inventory(source=tmp_path, hosts=hosts, groups=("gpu_nodes",))


def test_each_run_adds_only_its_settings_and_the_default_is_the_node_as_configured(
        tmp_path: Path) -> None:
    """A ring-forcing profile in the inventory must not turn the default into NCCL_ALGO=Ring."""
    inv = _inventory(tmp_path, nodetune_validate_profile="h100-ring-multinode",
                     nodetune_env={"NCCL_IB_HCA": "mlx5_0"},
                     nccl_config_extra={"NCCL_IB_DISABLE": 0})
    request = tune_verb.Request(inventory=inv, pair="gpu-b,gpu-a", options=Options(),
                                grid=grid_mod.grid_from({"NCCL_ALGO": ["Tree"]}), repeats=2)
    prepared = tune_verb.prepare(request)
    assert [n.name for n in prepared.plan.nodes] == ["gpu-b", "gpu-a"]
    assert prepared.plan.force_ring is False
    assert prepared.extra == {"NCCL_IB_DISABLE": 0}
    assert [prepared.combos[s.combo].name for s in prepared.order] == [
        "default", "NCCL_ALGO=Tree", "NCCL_ALGO=Tree", "default"]
    tree = tune_verb.with_env(prepared.plan, prepared.combos[1])
    for node in tree.nodes:
        assert dict(node.env) == {"NCCL_IB_HCA": "mlx5_0", "NCCL_ALGO": "Tree"}
    for node in prepared.plan.nodes:  # the plan the default runs with is left as it was
        assert dict(node.env) == {"NCCL_IB_HCA": "mlx5_0"}


@pytest.mark.parametrize(("pair", "said"), [
    ("gpu-a,nope", "host 'nope' is not a node"), ("gpu-a", "name two hosts"),
    ("gpu-a,gpu-a", "two different hosts")])
def test_pair_names_two_hosts_of_the_group(tmp_path: Path, pair: str, said: str) -> None:
    request = tune_verb.Request(inventory=_inventory(tmp_path), pair=pair, options=Options(),
                                grid=grid_mod.grid_from({}))
    with pytest.raises(InputError, match=said):
        tune_verb.prepare(request)


def test_one_repeat_is_refused(tmp_path: Path) -> None:
    request = tune_verb.Request(inventory=_inventory(tmp_path), pair="gpu-a,gpu-b",
                                options=Options(), grid=grid_mod.grid_from({}), repeats=1)
    with pytest.raises(InputError, match="--repeats 1: at least 2"):
        tune_verb.prepare(request)


def test_runs_id_shows_a_tune_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nodetune runs ID` renders the record's spreads, verdicts and snippet."""
    judged = stats.judge_all({DEFAULT: [rows(5, 10.0), rows(5, 10.1)],
                              RING: [rows(5, 20.0), rows(5, 20.1)]}, min_gain=2.0)
    rec = stats.recommend(judged, backend="nccl", min_gain=2.0)
    text = snippet.group_vars(dict(RING.env), {}, run_id="20261127T000000Z-tune")
    doc = {"schema_version": 1, "verb": "tune", "run_id": "20261127T000000Z-tune",
           "inventory": "inv", "status": "ok", "exit_code": 0, "duration_s": 1.0,
           "started": "2026-11-27T00:00:00+00:00", "judged": [j.to_dict() for j in judged],
           "recommendation": rec.to_dict(), "snippet": text, "written": None}
    runs = tmp_path / "runs"
    (runs / doc["run_id"]).mkdir(parents=True)
    (runs / doc["run_id"] / "report.json").write_text(json.dumps(doc))
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(runs))
    res = CliRunner().invoke(main, ["runs", str(doc["run_id"])])
    assert res.exit_code == 0, res.output
    assert re.search(r"NCCL_ALGO=Ring\s+4 MiB\s+20\.05\s+20\.00\s+20\.10\s+0\.5\s+\+99\.5",
                     res.stdout), res.stdout
    assert "NCCL_ALGO=Ring: better" in res.stdout and "default: the baseline" in res.stdout
    assert "recommended: NCCL_ALGO=Ring: +99.5 %" in res.stdout
    assert "nccl_config_extra:\n  NCCL_ALGO: Ring" in res.stdout


def test_a_setting_nccl_refuses_is_dropped_and_the_rest_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in for the GPU measurement (no GPU here): run_pair answers as NCCL would, and
    fails to launch with NCCL_ALGO=Tree as NCCL does where the pair has no tree."""
    calls: list[str] = []

    def stand_in_run_pair(plan: Plan, *, progress: object) -> Measurement:
        env = dict(plan.nodes[0].env)
        calls.append(env.get("NCCL_ALGO", "default"))
        if env.get("NCCL_ALGO") == "Tree":
            raise LaunchError("rank 0 exited: NCCL error: invalid usage (no algorithm/protocol "
                              "available)", host="gpu-a")
        busbw = {"Ring": 20.0, "default": 10.0}[env.get("NCCL_ALGO", "default")]
        launch = Launch(plan=plan, backend="nccl", nproc_per_node=1, sizes=SIZES, port=1,
                        env={n.name: dict(n.env) for n in plan.nodes})
        return Measurement(launch=launch, world=2, sizes=rows(5, busbw + 0.1 * len(calls)),
                           logs={n.name: () for n in plan.nodes})

    monkeypatch.setattr(tune_verb, "run_pair", stand_in_run_pair)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    request = tune_verb.Request(inventory=_inventory(tmp_path), pair="gpu-a,gpu-b",
                                options=Options(backend="nccl"), repeats=2,
                                grid=grid_mod.grid_from({"NCCL_ALGO": ["Tree", "Ring"]}))
    heard: list[tune_verb.RunDone] = []
    out = tune_verb.run(request, record=records.new_run("tune"),
                        listen=tune_verb.Listener(run=heard.append))
    # Tree failed in round 1 and was not run again; default and Ring ran twice each
    assert calls == ["default", "Tree", "Ring", "Ring", "default"]
    assert [j.verdict for j in out.judged] == ["default", "failed", "better"]
    assert "no algorithm/protocol available" in out.judged[1].note
    assert out.judged[1].note.startswith("gpu-a: ")
    assert out.recommendation.combo == RING
    assert [h.error != "" for h in heard] == [False, True, False, False, False]
    assert out.doc["runs"][1] == {"repeat": 0, "combo": "NCCL_ALGO=Tree",
                                  "error": out.judged[1].note}
    assert yaml.safe_load(out.snippet or "") == {"nccl_config_extra": {"NCCL_ALGO": "Ring"}}
    assert json.loads(out.record.read_text())["recommendation"]["combo"] == "NCCL_ALGO=Ring"


def test_the_default_failing_stops_the_tune_with_a_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stand_in_run_pair(plan: Plan, *, progress: object) -> Measurement:
        raise LaunchError("the worker died", host="gpu-b")

    monkeypatch.setattr(tune_verb, "run_pair", stand_in_run_pair)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    request = tune_verb.Request(inventory=_inventory(tmp_path), pair="gpu-a,gpu-b",
                                options=Options(), grid=grid_mod.grid_from({}), repeats=2)
    record = records.new_run("tune")
    with pytest.raises(LaunchError, match=r"default \(run 1 of 10\): the worker died") as exc:
        tune_verb.run(request, record=record)
    assert exc.value.host == "gpu-b" and exc.value.exit_code == 3
    doc = json.loads((record.path / "report.json").read_text())
    assert doc["status"] == "error" and doc["exit_code"] == 3 and doc["runs"] == []


def _pair_inventory(tmp_path: Path, a: object, b: object) -> Inventory:
    hosts = (Host(name="gpu-a", groups=("gpu_nodes",),
                  vars={"ansible_host": "10.0.0.1", "nccl_config_extra": a}),
             Host(name="gpu-b", groups=("gpu_nodes",),
                  vars={"ansible_host": "10.0.0.2", "nccl_config_extra": b}))
    return Inventory(source=tmp_path, hosts=hosts, groups=("gpu_nodes",))


def test_the_snippet_carries_each_pair_hosts_own_extra_when_they_agree(tmp_path: Path) -> None:
    inv = _pair_inventory(tmp_path, {"NCCL_IB_DISABLE": 0}, {"NCCL_IB_DISABLE": 0})
    request = tune_verb.Request(inventory=inv, pair="gpu-a,gpu-b", options=Options(),
                                grid=grid_mod.grid_from({"NCCL_ALGO": ["Tree"]}), repeats=2,
                                write=tmp_path / "nccl.yml")
    prepared = tune_verb.prepare(request)
    assert prepared.extra == {"NCCL_IB_DISABLE": 0} and prepared.withheld == ""


@pytest.mark.parametrize(("a", "b", "named"), [
    ({"NCCL_IB_DISABLE": 0}, {"NCCL_IB_DISABLE": 1}, "NCCL_IB_DISABLE"),
    ({}, {"NCCL_TOPO_FILE": "/etc/topo.xml"}, "NCCL_TOPO_FILE"),
])
def test_write_refuses_a_pair_whose_extras_differ_naming_key_and_hosts(
        tmp_path: Path, a: object, b: object, named: str) -> None:
    """The second host's own setting would be replaced by the first's: exit 2 before any run."""
    inv = _pair_inventory(tmp_path, a, b)
    request = tune_verb.Request(inventory=inv, pair="gpu-a,gpu-b", options=Options(),
                                grid=grid_mod.grid_from({"NCCL_ALGO": ["Tree"]}), repeats=2,
                                write=tmp_path / "nccl.yml")
    with pytest.raises(InputError) as err:
        tune_verb.prepare(request)
    assert err.value.exit_code == 2 and err.value.host == "gpu-b"
    assert named in err.value.message and "gpu-a" in err.value.message
    assert not (tmp_path / "nccl.yml").exists()
    # Without --write the run goes on; no snippet is offered, with the reason.
    prepared = tune_verb.prepare(dataclasses.replace(request, write=None))
    assert prepared.extra is None and named in prepared.withheld


NCCL_FIXTURES = ROOT / "tests" / "fixtures" / "nccl"


def test_the_winner_is_proven_by_its_own_runs_and_a_value_nccl_did_not_use_is_not_recommended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in for the GPU measurement: every run's worker lines are NCCL's real INIT,ENV
    capture on an H200 (tests/fixtures/nccl/h200_init_env_2_28.log), which logs
    NCCL_BUFFSIZE 8388608 and NCCL_MIN_NCHANNELS 4. The setting NCCL_MIN_NCHANNELS=8 is
    measured fastest, but NCCL's log shows it ran with 4 (something in the ranks' process
    set it): its numbers measured something else, so NCCL_BUFFSIZE=8388608 wins, proven."""
    capture = tuple((NCCL_FIXTURES / "h200_init_env_2_28.log").read_text().splitlines())

    def stand_in_run_pair(plan: Plan, *, progress: object) -> Measurement:
        env = dict(plan.nodes[0].env)
        busbw = 30.0 if "NCCL_MIN_NCHANNELS" in env else 20.0 if "NCCL_BUFFSIZE" in env \
            else 10.0
        launch = Launch(plan=plan, backend="nccl", nproc_per_node=1, sizes=SIZES, port=1,
                        env={n.name: dict(n.env) for n in plan.nodes})
        return Measurement(launch=launch, world=2, sizes=rows(busbw, busbw),
                           logs={n.name: capture for n in plan.nodes})

    monkeypatch.setattr(tune_verb, "run_pair", stand_in_run_pair)
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(tmp_path / "runs"))
    request = tune_verb.Request(
        inventory=_inventory(tmp_path), pair="gpu-a,gpu-b", options=Options(backend="nccl"),
        repeats=2, grid=grid_mod.grid_from({"NCCL_MIN_NCHANNELS": ["8"],
                                            "NCCL_BUFFSIZE": ["8388608"]}))
    out = tune_verb.run(request, record=records.new_run("tune"))
    verdicts = {j.combo.name: j for j in out.judged}
    chans = verdicts["NCCL_MIN_NCHANNELS=8"]
    assert chans.verdict == "not used by NCCL"
    assert "gpu-a: NCCL_MIN_NCHANNELS=8 (tune's setting under test): NCCL used " \
           "NCCL_MIN_NCHANNELS=4 from environment" in chans.note
    assert verdicts["NCCL_BUFFSIZE=8388608"].verdict == "better"
    assert out.recommendation.combo == Combo((("NCCL_BUFFSIZE", "8388608"),))
    assert out.recommendation.reason.endswith(
        "NCCL's log shows it used: gpu-a: NCCL_BUFFSIZE=8388608, gpu-b: NCCL_BUFFSIZE=8388608")
    doc = json.loads(out.record.read_text())
    by_name = {j["combo"]: j for j in doc["judged"]}
    assert by_name["NCCL_MIN_NCHANNELS=8"]["nccl_used"]["ignored"] is True
    assert by_name["NCCL_BUFFSIZE=8388608"]["nccl_used"]["proven"] is True
    assert "nccl_used" not in by_name["default"]
    assert yaml.safe_load(out.snippet or "") == {"nccl_config_extra":
                                                 {"NCCL_BUFFSIZE": 8388608}}


def test_runs_without_nccls_env_lines_leave_the_winner_recommended_but_not_proven() -> None:
    from nodetune.tune import proof

    said = proof.prove(RING, [({"gpu-a": (), "gpu-b": ()}, {"gpu-a": {}, "gpu-b": {}})])
    assert not said.ignored and not said.proven
    assert said.summary().startswith("not proven: not assessed: gpu-a: no 'set by environment' line")
    assert proof.prove(DEFAULT, [({"gpu-a": ()}, {})]) == proof.Proof()


def test_each_combination_is_proven_once_and_the_winner_keeps_its_proof(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tune's judgement proves every combination once (NCCL's real INIT,ENV capture on an
    H200 as each run's worker lines) and the recommendation's reason is the winner's
    proof from that pass, not a second one."""
    from nodetune.tune import proof

    capture = tuple((NCCL_FIXTURES / "h200_init_env_2_28.log").read_text().splitlines())
    buff = Combo((("NCCL_BUFFSIZE", "8388608"),))
    combos = (DEFAULT, RING, buff)
    measured = {DEFAULT: [rows(10, 10), rows(10.5, 10.5)], RING: [rows(11, 11), rows(10, 10)],
                buff: [rows(20, 20), rows(21, 21)]}
    logs = {c: [({"gpu-a": capture}, {"gpu-a": dict(c.env)})] * 2 for c in combos}
    proven: list[Combo] = []
    real = proof.prove

    def counted(combo: Combo, runs: list[tuple[object, object]]) -> proof.Proof:
        proven.append(combo)
        return real(combo, runs)  # type: ignore[arg-type]

    monkeypatch.setattr(proof, "prove", counted)
    judged, rec = tune_verb._judge(combos, measured, {}, logs, backend="nccl", min_gain=1.0)
    assert Counter(proven) == Counter(combos)  # once each, the winner too
    assert rec.combo == buff
    assert rec.reason.endswith("; NCCL's log shows it used: gpu-a: NCCL_BUFFSIZE=8388608")
    assert {j.combo: j.nccl_used for j in judged}[buff] == real(buff, logs[buff]).to_dict()
    proven.clear()
    _, gloo = tune_verb._judge(combos, measured, {}, logs, backend="gloo", min_gain=1.0)
    assert proven == [] and gloo.combo is None  # nothing NCCL logged to prove under gloo


def test_each_topo_file_is_looked_for_on_both_nodes_through_their_executors(
        tmp_path: Path) -> None:
    """--topo-file: a readable file on both nodes passes; one missing names the node and
    the file (read through each node's executor; here local sessions)."""
    from nodetune.collective.plan import Pair
    from nodetune.tune import pair as pair_mod

    here = tmp_path / "topo.xml"
    here.write_text("<system/>\n")
    a, b = (Host(n, (), {"ansible_connection": "local"}) for n in ("gpu-a", "gpu-b"))
    pair_mod.check_topo_files(Pair(a, b), (str(here),), accept_new_host_keys=False)
    with pytest.raises(InputError, match="no readable file there") as missing:
        pair_mod.check_topo_files(Pair(a, b), (str(tmp_path / "none.xml"),),
                                  accept_new_host_keys=False)
    assert missing.value.host == "gpu-a"
