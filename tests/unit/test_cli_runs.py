"""`nodetune runs ID` shows a run the way a person reads it; `--json` prints the document;
the list tells a --plan run from a pass and has seconds for every verb."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodetune import records
from nodetune.cli import main
from tests.unit.reports_samples import load


@pytest.fixture()
def cli(tmp_path: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NODETUNE_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _store(runs_dir: Path, *docs: dict[str, Any]) -> None:
    for doc in docs:
        (runs_dir / doc["run_id"]).mkdir(parents=True)
        (runs_dir / doc["run_id"] / "report.json").write_text(json.dumps(doc))


def test_a_check_run_shows_matrix_findings_and_verdicts(cli: CliRunner, runs_dir: Path) -> None:
    doc = load("check")
    _store(runs_dir, doc)
    res = cli.invoke(main, ["runs", doc["run_id"]])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith(f"check {doc['inventory']}  run {doc['run_id']}\n")
    assert "exit 1 (a check failed)" in out
    assert "checks per node" in out and "findings" in out and "verdicts" in out
    fails = [(n, c["name"]) for n, rows in doc["checks"].items() for c in rows
             if c["status"] == "fail"]
    assert fails and all(f"FAIL {n} {name}" in out for n, name in fails)
    for node, v in doc["nodes"].items():
        assert f"  {node}: {v['verdict']}" in out
    assert not out.lstrip().startswith("{"), "the human view, not the JSON"
    assert len(out.splitlines()) < 80
    raw = cli.invoke(main, ["runs", doc["run_id"], "--json"])
    assert json.loads(raw.stdout) == doc


def test_a_validate_run_shows_its_pairs(cli: CliRunner, runs_dir: Path) -> None:
    doc = load("validate-fleet")
    _store(runs_dir, doc)
    out = cli.invoke(main, ["runs", doc["run_id"]], env={"COLUMNS": "120"}).stdout
    assert "pairs" in out and "node-3: bad" in out
    assert all(f"{p['hosts'][0]} <-> {p['hosts'][1]}" in out for p in doc["pairs"])


def test_an_apply_run_shows_hosts_failures_and_retry_list(cli: CliRunner,
                                                          runs_dir: Path) -> None:
    doc = {"verb": "apply", "run_id": "20261126T100000Z-apply", "inventory": "inv/prod",
           "started": "2026-11-26T10:00:00+00:00", "duration_s": 42.5, "exit_code": 1,
           "status": "failed",
           "hosts": [{"host": "n1", "state": "changed", "ok": 5, "changed": 2, "failed": 0,
                      "unreachable": 0, "skipped": 1},
                     {"host": "n2", "state": "failed", "ok": 3, "changed": 0, "failed": 1,
                      "unreachable": 0, "skipped": 0}],
           "failed_tasks": [{"host": "n2", "task": "net_mtu : Set", "message": "no eth9"}],
           "changed_tasks": [{"host": "n1", "task": "nccl_config : Write"}],
           "retry_file": "/runs/20261126T100000Z-apply/retry.txt", "reboot_required": {}}
    _store(runs_dir, doc)
    out = cli.invoke(main, ["runs", doc["run_id"][:10]]).stdout
    assert "42.5 s; exit 1 (a check failed)" in out
    assert "n2: [net_mtu : Set] no eth9" in out
    assert "[nccl_config : Write] 1 host(s): n1" in out
    assert "retry list: /runs/20261126T100000Z-apply/retry.txt" in out


def test_the_list_names_a_plan_run_and_has_seconds(cli: CliRunner, runs_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plan = records.new_run("validate", root=None)
    plan.write({"inventory": "inv", "status": "plan", "exit_code": 0,
                "fleet": {"seed": 7, "round_one": [{"hosts": ["a", "b"], "why": "random"}]}})
    passed = records.new_run("validate")
    passed.write({"inventory": "inv", "status": "pass", "exit_code": 0})
    listing = cli.invoke(main, ["runs"], env={"COLUMNS": "200"}).stdout
    rows = {ln.split()[0]: ln.split() for ln in listing.splitlines()[1:]}
    assert rows[plan.id][1:3] == ["validate", "--plan"]
    assert rows[passed.id][1:4] == ["validate", "inv", "0"]
    assert float(rows[passed.id][4]) >= 0, "seconds for a validate run"
    shown = cli.invoke(main, ["runs", plan.id]).stdout
    assert "plan only: nothing was contacted" in shown and "random" in shown
