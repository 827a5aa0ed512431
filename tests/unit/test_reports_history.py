"""History over run records and the busbw regression check."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from nodetune.reports import history
from tests.unit.reports_samples import load


def _scaled(doc: dict[str, Any], run_id: str, factor: float, *,
            node: str | None = None) -> dict[str, Any]:
    """``doc`` as run ``run_id``, busbw times ``factor`` (only for ``node``'s pairs if named)."""
    new = copy.deepcopy(doc)
    new["run_id"] = run_id
    for p in new.get("pairs") or [new["result"]]:
        if node is None or node in p["hosts"]:
            for s in p["sizes"]:
                s["busbw"] *= factor
            key = "busbw_gbps" if "busbw_gbps" in p else "largest_busbw_gbps"
            p[key] = p[key] * factor
    for name, v in (new.get("nodes") or {}).items():
        if v["busbw_gbps"] is not None and (node is None or name == node):
            v["busbw_gbps"] *= factor
    return new


def _store(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    runs = tmp_path / "runs"
    for doc in docs:
        d = runs / doc["run_id"]
        d.mkdir(parents=True)
        (d / "report.json").write_text(json.dumps(doc))
    (runs / "20260101T000000Z-validate-broken").mkdir()
    (runs / "20260101T000000Z-validate-broken" / "report.json").write_text("{")
    return runs


def test_synthetic_history_of_faster_runs_warns(tmp_path: Path) -> None:
    base = load("validate-pair")
    past = [_scaled(base, f"2026110{i}T000000Z-validate", f)
            for i, f in enumerate([1.30, 1.25, 1.20, 1.22, 1.28, 1.24], start=1)]
    runs = _store(tmp_path, past)
    now = _scaled(base, "20261122T080000Z-validate", 1.0)
    found = history.regressions(now, runs)
    assert {r.node for r in found} == {"node-1", "node-2"}
    r = found[0]
    # median of the LAST 5 passing runs: 1.25,1.20,1.22,1.28,1.24 -> 1.24 x 0.41
    assert abs(r.median_gbps - 1.24 * 0.41) < 1e-6
    assert abs(r.drop - (1 - 1 / 1.24)) < 1e-6
    assert len(r.baseline_runs) == 5 and past[0]["run_id"] not in r.baseline_runs
    assert "below the median" in r.message and r.to_dict()["profile"] == "lab-gloo"
    assert history.regressions(now, runs, max_regression=0.25) == []


def test_only_the_slowed_node_of_a_fleet_and_only_same_profile_and_size(tmp_path: Path) -> None:
    base = load("validate-fleet")
    healthy = _scaled(base, "x", 1.0)
    healthy["nodes"]["node-3"] = dict(healthy["nodes"]["node-1"])  # node-3 was good then
    healthy["nodes"]["node-3"]["busbw_gbps"] = 0.41
    past = [_scaled(healthy, f"2026110{i}T000000Z-validate", 1.0) for i in range(1, 4)]
    other_profile = _scaled(healthy, "20261110T000000Z-validate", 2.0)
    other_profile["options"]["profile"] = "h200-nv18-pair"
    runs = _store(tmp_path, [*past, other_profile])
    now = _scaled(base, "20261122T090000Z-validate", 1.0)
    found = history.regressions(now, runs)
    assert [r.node for r in found] == ["node-3"]
    assert found[0].baseline_runs == tuple(p["run_id"] for p in past)


def test_failed_runs_are_not_a_baseline_and_no_history_is_no_warning(tmp_path: Path) -> None:
    base = load("validate-pair")
    failed = _scaled(base, "20261101T000000Z-validate", 2.0)
    failed["result"]["verdict"] = "fail"
    runs = _store(tmp_path, [failed])
    assert history.regressions(base, runs) == []
    assert history.regressions(base, tmp_path / "none") == []


def test_the_run_itself_is_not_its_own_baseline(tmp_path: Path) -> None:
    base = load("validate-pair")
    runs = _store(tmp_path, [_scaled(base, base["run_id"], 2.0)])
    assert history.regressions(base, runs) == []


def test_node_history_lists_runs_oldest_first(tmp_path: Path) -> None:
    base = load("validate-fleet")
    runs = _store(tmp_path, [_scaled(base, f"2026110{i}T000000Z-validate", 1.0)
                             for i in (2, 1)] + [load("validate-pair")])
    rows = history.node_history("node-3", history.load_records(runs))
    assert [r.run_id for r in rows] == ["20261101T000000Z-validate", "20261102T000000Z-validate"]
    assert rows[0].verdict == "bad" and rows[0].partners == ("node-4", "node-1")
    assert rows[0].bytes == 64 << 20
    assert [r.run_id for r in history.node_history("node-1", history.load_records(runs))][-1] \
        == "20261122T080000Z-validate"


def test_history_of_a_node_includes_its_check_runs(tmp_path: Path) -> None:
    check = load("check")
    runs = _store(tmp_path, [load("validate-pair"), check])
    rows = history.history_of("node-2", runs)
    assert [(r.verb, r.verdict) for r in rows] == [("validate", "good"), ("check", "bad")]
    assert rows[0].busbw_gbps == 0.41 and rows[1].busbw_gbps is None


def _over(doc: dict[str, Any], iface: str) -> dict[str, Any]:
    """``doc`` as if measured over ``iface`` (the transport the record names)."""
    for p in doc.get("pairs") or [doc["result"]]:
        if "transport" in p:
            p["transport"]["interfaces"] = [iface]
        else:
            p["path"] = f"gloo/TCP {iface}"
    return doc


def test_history_compares_only_runs_over_the_same_transport_and_interface(
        tmp_path: Path) -> None:
    base = load("validate-pair")
    # Faster runs over the management network (eth0) are no baseline for the fabric (eth1).
    past = [_over(_scaled(base, f"2026110{i}T000000Z-validate", 3.0), "eth0")
            for i in range(1, 6)]
    runs = _store(tmp_path, past)
    now = _scaled(base, "20261122T080000Z-validate", 1.0)
    assert history.regressions(now, runs) == []
    assert [o.path for o in history.history_of("node-1", runs)] == ["gloo/TCP eth0"] * 5
    # Over the same interface, the same drop is a regression, and says over what.
    same = [_scaled(base, f"2026111{i}T000000Z-validate", 3.0) for i in range(1, 3)]
    runs = _store(tmp_path / "same", [*past, *same])
    (r, _) = history.regressions(now, runs)
    assert r.baseline_runs == tuple(d["run_id"] for d in same)
    assert r.path == "gloo/TCP eth1" and "over gloo/TCP eth1" in r.message


def test_fleet_pairs_carry_their_path_into_history(tmp_path: Path) -> None:
    base = load("validate-fleet")
    past = [_over(_scaled(base, f"2026110{i}T000000Z-validate", 3.0), "eth0")
            for i in range(1, 4)]
    now = _over(_scaled(base, "20261122T080000Z-validate", 1.0), "eth1")
    assert history.regressions(now, _store(tmp_path, past)) == []
    again = [_over(_scaled(base, f"2026111{i}T000000Z-validate", 3.0), "eth1")
             for i in range(1, 4)]
    found = history.regressions(now, _store(tmp_path / "b", [*past, *again]))
    assert found and all(r.path == "gloo/TCP eth1" for r in found)


def test_history_compares_only_runs_of_the_same_collective(tmp_path: Path) -> None:
    """An all_gather (busbw factor (n-1)/n) is no baseline for an all_reduce, nor the reverse:
    on 2x H200 an all_gather read 19 % below the all_reduce runs before it."""
    base = load("validate-pair")
    faster = [_scaled(base, f"2026110{i}T000000Z-validate", 1.3) for i in range(1, 6)]
    runs = _store(tmp_path, faster)
    gather = _scaled(base, "20261122T080000Z-validate", 1.0)
    gather["options"] = {**gather.get("options", {}), "collective": "all_gather"}
    assert history.regressions(gather, runs) == []
    reduce_now = _scaled(base, "20261122T090000Z-validate", 1.0)
    assert {r.node for r in history.regressions(reduce_now, runs)} == {"node-1", "node-2"}
    assert {o.collective for o in history.history_of("node-1", runs)} == {"all_reduce"}


def _with_cv(doc: dict[str, Any], run_id: str, cv: float, *,
             node: str | None = None) -> dict[str, Any]:
    """``doc`` as run ``run_id``, every size's rounds with CV ``cv`` (``node``'s pairs only
    if named)."""
    new = _scaled(doc, run_id, 1.0)
    for p in new.get("pairs") or [new["result"]]:
        if node is None or node in p["hosts"]:
            for s in p["sizes"]:
                s["per_iter"] = {"cv_pct": cv}
    return new


def test_history_keeps_the_cv_of_each_size(tmp_path: Path) -> None:
    doc = _with_cv(load("validate-pair"), "20261101T000000Z-validate", 3.5)
    obs = history.observations(doc)
    sizes = [s["bytes"] for s in doc["result"]["sizes"]]
    assert obs and all(o.cv_pct == tuple((b, 3.5) for b in sorted(sizes)) for o in obs)
    assert obs[0].to_dict()["cv_pct"] == {str(b): 3.5 for b in sizes}
    assert history.observations(load("validate-pair"))[0].cv_pct == ()   # an older record


def test_a_node_whose_cv_rose_beyond_the_factor_is_flagged_like_a_slower_one(
        tmp_path: Path) -> None:
    base = load("validate-pair")
    past = [_with_cv(base, f"2026110{i}T000000Z-validate", cv)
            for i, cv in enumerate([9.0, 3.0, 4.0, 2.0, 3.0, 5.0], start=1)]
    runs = _store(tmp_path, past)
    # baseline: the last five, 3, 4, 2, 3, 5 -> median 3 %; 2 x 3 = 6 %
    assert history.regressions(_with_cv(base, "20261122T080000Z-validate", 6.0), runs) == []
    now = _with_cv(base, "20261122T080000Z-validate", 7.5)
    found = history.regressions(now, runs)
    assert {r.node for r in found} == {"node-1", "node-2"}
    r = found[0]
    assert isinstance(r, history.Noisier)
    assert (r.cv_pct, r.median_cv_pct, len(r.baseline_runs)) == (7.5, 3.0, 5)
    assert r.to_dict()["kind"] == "noise" and "2.5x the median 3.0 %" in r.message
    # --fail-on-regression fails it as it fails a slower node
    now.update(status="pass", exit_code=0)
    code = history.judge(now, runs, history.RegressionPolicy(fail=True), exit_code=0)
    assert code == 1 and now["status"] == "fail"
    assert {d["kind"] for d in now["regressions"]} == {"noise"}


def test_a_low_cv_that_doubled_is_below_the_floor(tmp_path: Path) -> None:
    base = load("validate-pair")
    runs = _store(tmp_path, [_with_cv(base, f"2026110{i}T000000Z-validate", 1.0)
                             for i in range(1, 4)])
    assert history.regressions(_with_cv(base, "20261122T080000Z-validate", 4.9), runs) == []
    assert history.regressions(_with_cv(base, "20261122T080000Z-validate", 5.0), runs) != []


def test_only_the_noisier_node_of_a_fleet_is_flagged(tmp_path: Path) -> None:
    base = load("validate-fleet")
    runs = _store(tmp_path, [_with_cv(base, f"2026110{i}T000000Z-validate", 2.0)
                             for i in range(1, 4)])
    pair = base["pairs"][0]["hosts"]
    found = history.regressions(_with_cv(_with_cv(base, "20261122T080000Z-validate", 2.0),
                                         "20261122T080000Z-validate", 9.0, node=pair[0]), runs)
    assert {r.node for r in found} == set(pair)


def test_a_baseline_of_one_round_sizes_has_no_spread_to_compare(tmp_path: Path) -> None:
    """Sizes timed in one round have CV 0: a later CV is not "infinitely" noisier, and no
    message divides by that zero."""
    base = load("validate-pair")
    runs = _store(tmp_path, [_with_cv(base, f"2026110{i}T000000Z-validate", 0.0)
                             for i in range(1, 4)])
    assert history.regressions(_with_cv(base, "20261122T080000Z-validate", 9.0), runs) == []


def _failed(doc: dict[str, Any]) -> dict[str, Any]:
    doc["result"]["verdict"] = "fail"
    return doc


def _profile(doc: dict[str, Any]) -> dict[str, Any]:
    doc["options"]["profile"] = "h200-nv18-pair"
    return doc


def _gather(doc: dict[str, Any]) -> dict[str, Any]:
    doc["options"] = {**doc.get("options", {}), "collective": "all_gather"}
    return doc


def _smaller(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without its largest message size (its largest is another size then)."""
    for p in doc.get("pairs") or [doc["result"]]:
        top = max(s["bytes"] for s in p["sizes"])
        p["sizes"] = [s for s in p["sizes"] if s["bytes"] != top]
    return doc


def _check_verb(doc: dict[str, Any]) -> dict[str, Any]:
    doc["verb"] = "check"
    return doc


def test_one_baseline_rule_for_a_slower_and_a_noisier_node(tmp_path: Path) -> None:
    """Past runs both faster and calmer than now: each is a baseline for both findings, and
    each way a run may differ (failed, another largest size, profile, transport or
    collective, not a validate run) keeps it out of both: the rule is written once
    (history._comparable)."""
    base = load("validate-pair")

    def past(i: int) -> dict[str, Any]:
        return _with_cv(_scaled(base, f"2026110{i}T000000Z-validate", 1.3),
                        f"2026110{i}T000000Z-validate", 2.0)

    now = _with_cv(_scaled(base, "20261122T080000Z-validate", 1.0),
                   "20261122T080000Z-validate", 9.0)
    found = history.regressions(now, _store(tmp_path / "same", [past(i) for i in (1, 2, 3)]))
    assert {type(r).__name__ for r in found} == {"Regression", "Noisier"}
    for name, differ in (("failed", _failed), ("size", _smaller), ("profile", _profile),
                         ("path", lambda d: _over(d, "eth0")), ("collective", _gather),
                         ("verb", _check_verb)):
        runs = _store(tmp_path / name, [differ(past(i)) for i in (1, 2, 3)])
        assert history.regressions(now, runs) == [], name
