"""The reports wired into the verbs: report.html on every exit, --junit/--prom-textfile checked
first and written at the end, the regression judgement, `runs --open` and `runs --node`.

Nodes here are this machine (``ansible_connection: local``) or an address nothing listens on
(127.0.0.1:1); no lab is needed.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from nodetune.cli import main, report_opts
from nodetune.reports import history
from tests.conftest import run_nodetune
from tests.unit.reports_samples import load

etree = pytest.importorskip("lxml.etree", reason="the dev extra installs lxml")
parser = pytest.importorskip("prometheus_client.parser", reason="the dev extra installs it")

LOCAL = {"ansible_connection": "local", "net_sysctl_enabled": False}
NOWHERE = {"ansible_host": "127.0.0.1", "ansible_port": 1}


def inventory(tmp_path: Path, **hosts: dict[str, Any]) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def only_run(runs_dir: Path) -> Path:
    (run,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return run


def junit_valid(path: Path) -> Any:
    xsd = importlib.resources.files("ub_test_reports") / "schemas" / "JUnit.xsd"
    schema = etree.XMLSchema(etree.parse(str(xsd)))
    doc = etree.parse(str(path))
    assert schema.validate(doc), schema.error_log
    return doc


def metrics(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(dict(s.labels), s.value) for s in f.samples]
            for f in parser.text_string_to_metric_families(path.read_text())}


def test_check_leaves_page_junit_and_metrics(tmp_path: Path, runs_dir: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_expected_gpus": 8})
    res = run_nodetune("check", str(inv), "--junit", str(out / "check.xml"),
                       "--prom-textfile", str(out / "check.prom"), runs_dir=runs_dir)
    assert res.code == 1, res.stdout + res.stderr
    run = only_run(runs_dir)
    page = (run / "report.html").read_text()
    assert "gpu.count" in page and 'class="node bad"' in page
    doc = junit_valid(out / "check.xml")
    failed = [c.get("name") for c in doc.iter("testcase") if c.find("failure") is not None]
    assert failed == ["here", "gpu.count"]  # the node, then its failing check
    fams = metrics(out / "check.prom")
    assert fams["nodetune_node_healthy"] == [({"node": "here", "verb": "check"}, 0.0)]
    status = {lab["check"]: v for lab, v in fams["nodetune_check_status"]}
    assert status["gpu.count"] == 2.0 and status["software.shm"] == 0.0
    assert sorted(f.name for f in out.iterdir()) == ["check.prom", "check.xml"]  # no temp files


@pytest.mark.parametrize("verb,hosts", [("check", 1), ("validate", 2), ("validate", 3)])
@pytest.mark.parametrize("option", ["--junit", "--prom-textfile"])
def test_unwritable_output_exits_2_before_any_node_is_contacted(
        tmp_path: Path, runs_dir: Path, verb: str, hosts: int, option: str) -> None:
    # Nothing listens on 127.0.0.1:1: had the verb gone on, it would have exited 3.
    inv = inventory(tmp_path, **{f"n{i}": NOWHERE for i in range(hosts)})
    target = tmp_path / "missing" / "out.file"
    res = run_nodetune(verb, str(inv), option, str(target), "--json", runs_dir=runs_dir)
    assert res.code == 2, res.stdout + res.stderr
    doc = res.json()
    assert doc["error"]["type"] == "InputError"
    assert doc["error"]["message"].startswith(f"{option} {target}: folder ")
    assert f"{option} {target}" in res.stderr
    assert not any(k in doc for k in ("nodes", "pairs", "checks", "result"))
    assert "connect" not in res.stderr and "unreachable" not in res.stdout
    assert not (tmp_path / "missing").exists()
    run = only_run(runs_dir)
    assert "InputError" in (run / "report.html").read_text()


def test_a_directory_given_as_file_is_a_usage_error(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("validate", str(inventory(tmp_path, a=NOWHERE, b=NOWHERE)),
                       "--junit", str(tmp_path), runs_dir=runs_dir)
    assert res.code == 2
    assert "--junit" in res.stderr and "is a directory" in res.stderr


def test_an_unreachable_pair_still_leaves_junit_metrics_and_page(tmp_path: Path,
                                                                 runs_dir: Path) -> None:
    out = tmp_path / "j.xml"
    res = run_nodetune("validate", str(inventory(tmp_path, a=NOWHERE, b=NOWHERE)),
                       "--junit", str(out), "--prom-textfile", str(tmp_path / "m.prom"),
                       "--timeout", "5", runs_dir=runs_dir)
    assert res.code == 3, res.stdout + res.stderr
    doc = junit_valid(out)
    errors = [(c.get("name"), c.find("error").get("type")) for c in doc.iter("testcase")
              if c.find("error") is not None]
    assert errors == [("a", "unreachable")]
    assert metrics(tmp_path / "m.prom")["nodetune_node_healthy"] == [
        ({"node": "a", "verb": "validate"}, 0.0)]
    assert "cannot reach 127.0.0.1:1" in (only_run(runs_dir) / "report.html").read_text()


def test_bad_input_leaves_a_page_but_no_metrics(tmp_path: Path, runs_dir: Path) -> None:
    inv = inventory(tmp_path, here={**LOCAL, "nodetune_min_shm": "lots"})
    res = run_nodetune("check", str(inv), "--prom-textfile", str(tmp_path / "m.prom"),
                       "--junit", str(tmp_path / "j.xml"), runs_dir=runs_dir)
    assert res.code == 2
    assert not (tmp_path / "m.prom").exists()  # nothing measured: last metrics stay
    (case,) = junit_valid(tmp_path / "j.xml").iter("testcase")
    assert case.find("error") is not None and "nodetune_min_shm" in case.find("error").text
    assert "nodetune_min_shm" in (only_run(runs_dir) / "report.html").read_text()


@pytest.mark.parametrize("verb", ["apply", "facts", "check", "validate"])
def test_every_verb_leaves_a_page_beside_its_record(tmp_path: Path, runs_dir: Path,
                                                    verb: str) -> None:
    res = run_nodetune(verb, str(tmp_path / "nope"), runs_dir=runs_dir)
    assert res.code == 2
    run = only_run(runs_dir)
    assert sorted(p.name for p in run.iterdir()) == ["report.html", "report.json"]
    page = (run / "report.html").read_text()
    assert f"nodetune {verb}" in page and "does not exist" in page


def test_usage_error_leaves_a_page(tmp_path: Path, runs_dir: Path) -> None:
    res = run_nodetune("validate", "inv", "--max-regression", "120", runs_dir=runs_dir)
    assert res.code == 2 and "--max-regression" in res.stderr
    assert "UsageError" in (only_run(runs_dir) / "report.html").read_text()


@pytest.fixture()
def cli(tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(runs_dir))
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_a_page_that_fails_to_render_only_warns(cli: CliRunner, tmp_path: Path, runs_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> str:
        raise RuntimeError("renderer broke")

    monkeypatch.setattr("nodetune.reports.html.render", broken)
    res = cli.invoke(main, ["check", str(inventory(tmp_path, here=LOCAL)), "--json",
                            "--junit", str(tmp_path / "j.xml")])
    assert res.exit_code == 0, res.output
    assert "report.html in" in res.stderr and "renderer broke" in res.stderr
    assert json.loads(res.stdout)["status"] == "pass"
    junit_valid(tmp_path / "j.xml")  # the other files are still written
    assert not (only_run(runs_dir) / "report.html").exists()


def test_ctrl_c_leaves_page_and_junit(cli: CliRunner, tmp_path: Path, runs_dir: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("nodetune.check.verb.check_nodes", interrupted)
    res = cli.invoke(main, ["check", str(inventory(tmp_path, here=LOCAL)),
                            "--junit", str(tmp_path / "j.xml"),
                            "--prom-textfile", str(tmp_path / "m.prom")])
    assert res.exit_code == 130
    assert "interrupted" in (only_run(runs_dir) / "report.html").read_text()
    (case,) = junit_valid(tmp_path / "j.xml").iter("testcase")
    assert case.find("error").get("type") == "interrupted"
    assert not (tmp_path / "m.prom").exists()


def _judge(doc: dict[str, Any], code: int, argv: list[str]) -> int:
    """Judge as the validate verb does, with the policy its options parse from argv; show the
    regressions as the verb shows them."""
    from nodetune import records
    from nodetune.cli.validate import validate_cmd

    ctx = validate_cmd.make_context("validate", ["inv", *argv])
    with ctx:
        report_opts.regression_options(lambda **_kw: None)(
            max_regression=ctx.params["max_regression"],
            fail_on_regression=ctx.params["fail_on_regression"])
        policy = report_opts.regression_policy()
        assert policy is not None
        code = history.judge(doc, records.runs_dir(), policy, exit_code=code)
        report_opts.show_regressions(doc)
        return code


def _slower_than_history(runs_dir: Path, factor: float) -> dict[str, Any]:
    base = load("validate-pair")
    for i in range(6):
        past = json.loads(json.dumps(base))
        past["run_id"] = f"2026110{i}T000000Z-validate"
        for s in past["result"]["sizes"]:
            s["busbw"] *= factor
        past["result"]["largest_busbw_gbps"] *= factor
        (runs_dir / past["run_id"]).mkdir(parents=True)
        (runs_dir / past["run_id"] / "report.json").write_text(json.dumps(past))
    now = json.loads(json.dumps(base))
    del now["run_id"]  # not written yet, as when the verb judges it
    return now


def test_regression_warns_by_default_and_fails_when_asked(
        runs_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(runs_dir))
    now = _slower_than_history(runs_dir, 1.25)  # history 25 % faster: now is 20 % below
    warned = dict(now)
    assert _judge(warned, 0, []) == 0
    assert warned["status"] == "pass" and warned["max_regression"] == 0.10
    assert [r["node"] for r in warned["regressions"]] == ["node-1", "node-2"]
    assert all(0.19 < r["drop"] < 0.21 for r in warned["regressions"])
    assert "regression" in capsys.readouterr().err
    failed = dict(now)
    assert _judge(failed, 0, ["--fail-on-regression"]) == 1
    assert (failed["status"], failed["exit_code"], failed["fail_on_regression"]) == ("fail", 1,
                                                                                    True)
    lenient = dict(now)
    assert _judge(lenient, 0, ["--fail-on-regression", "--max-regression", "25"]) == 0
    assert lenient["regressions"] == []
    broken = dict(now, status="error")
    assert _judge(broken, 3, ["--fail-on-regression"]) == 3 and "regressions" not in broken


def test_judge_reads_the_record_as_it_will_be_written(tmp_path: Path) -> None:
    """validate judges its doc before writing it: sizes and hosts are still tuples there."""
    runs = tmp_path / "runs"
    now = _slower_than_history(runs, 1.5)
    now["result"]["hosts"] = tuple(now["result"]["hosts"])
    now["result"]["sizes"] = tuple(now["result"]["sizes"])
    assert history.judge(now, runs, history.RegressionPolicy(), exit_code=0) == 0
    assert [r["node"] for r in now["regressions"]] == ["node-1", "node-2"]


def test_judge_keeps_a_worse_exit_code(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    now = _slower_than_history(runs, 2.0)
    now["status"] = "fail"
    policy = history.RegressionPolicy(fail=True)
    assert history.judge(now, runs, policy, exit_code=1) == 1
    assert len(now["regressions"]) == 2 and now["status"] == "fail"


def _store(runs_dir: Path, *docs: dict[str, Any]) -> None:
    for doc in docs:
        (runs_dir / doc["run_id"]).mkdir(parents=True)
        (runs_dir / doc["run_id"] / "report.json").write_text(json.dumps(doc))


def test_runs_open_prints_the_page_writing_it_for_an_old_record(
        cli: CliRunner, runs_dir: Path) -> None:
    doc = load("validate-fleet")
    _store(runs_dir, doc)
    res = cli.invoke(main, ["runs", doc["run_id"][:12], "--open"])
    assert res.exit_code == 0, res.output
    page = Path(res.stdout.strip())
    assert page == runs_dir.absolute() / doc["run_id"] / "report.html"
    assert page.is_file() and "node-3" in page.read_text()
    again = cli.invoke(main, ["runs", doc["run_id"], "--open"])
    assert again.stdout == res.stdout and "wrote" not in again.stderr
    res = cli.invoke(main, ["runs", "--open"])
    assert res.exit_code == 2 and "--open needs a run ID" in res.stderr


def test_runs_open_under_json_prints_a_json_document(cli: CliRunner, runs_dir: Path) -> None:
    doc = load("validate-fleet")
    _store(runs_dir, doc)
    res = cli.invoke(main, ["runs", doc["run_id"], "--open", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {
        "run_id": doc["run_id"], "page": str(runs_dir.absolute() / doc["run_id"] / "report.html")}


def test_runs_node_lists_history_as_table_and_json(cli: CliRunner, runs_dir: Path) -> None:
    fleet, check = load("validate-fleet"), load("check")
    _store(runs_dir, fleet, check)
    res = cli.invoke(main, ["runs", "--node", "node-3", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["run_id"] for r in rows] == sorted([fleet["run_id"], check["run_id"]])
    mine = next(r for r in rows if r["verb"] == "validate")
    assert mine["verdict"] == "bad" and mine["busbw_gbps"] == fleet["nodes"]["node-3"][
        "busbw_gbps"]
    table = cli.invoke(main, ["runs", "--node", "node-3"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "history of node-3" in table.stdout
    assert fleet["run_id"] in table.stdout and "bad" in table.stdout
    none = cli.invoke(main, ["runs", "--node", "nobody"])
    assert none.exit_code == 0 and "names nobody" in none.stdout


def test_help_teaches_the_report_options() -> None:
    for verb, wanted in (("check", ["--junit", "--prom-textfile", "report.html"]),
                         ("validate", ["--junit", "--prom-textfile", "--max-regression",
                                       "--fail-on-regression", "docs/validate.md"])):
        res = CliRunner().invoke(main, [verb, "--help"])
        assert res.exit_code == 0
        for word in wanted:
            assert word in res.output, (verb, word)
    reference = (Path(__file__).resolve().parents[2] / "docs" / "validate.md").read_text()
    assert "runs --node" in reference and "report.html" in reference
    res = CliRunner().invoke(main, ["runs", "--help"])
    assert "--open" in res.output and "--node" in res.output


def test_options_reach_a_click_context() -> None:
    """The decorators keep the verb a plain click command (no stray parameters)."""
    from nodetune.cli.validate import validate_cmd

    names = [p.name for p in validate_cmd.params]
    assert {"junit", "prom_textfile", "max_regression", "fail_on_regression"} <= set(names)
    assert isinstance(validate_cmd, click.Command)


def test_runs_node_says_over_which_path_each_run_measured(cli: CliRunner,
                                                          runs_dir: Path) -> None:
    fleet = load("validate-fleet")
    for p in fleet["pairs"]:
        p["path"] = "gloo/TCP eth1"
    _store(runs_dir, fleet)
    rows = json.loads(cli.invoke(main, ["runs", "--node", "node-3", "--json"]).stdout)
    assert [r["path"] for r in rows] == ["gloo/TCP eth1"]
    table = cli.invoke(main, ["runs", "--node", "node-3"], env={"COLUMNS": "200"})
    assert "over" in table.stdout and "gloo/TCP eth1" in table.stdout
