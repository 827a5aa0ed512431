"""check's registries of checks (run.STATE_CHECKS, health.SIGNALS) stay complete, a counted
signal keeps what it names, and a read of its own reaches its check through the probe's
generic sections without a field of Probe."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nodetune.check import health, probe_parse, run
from nodetune.check.model import HelpLines
from nodetune.check.signal_read import Kept

CHECK = Path(run.__file__).parent
# Check modules (a NAME and a judge) in neither registry, and where they are judged.
ELSEWHERE = {
    "nccl": "allreduce.checks (gpu.allreduce)",
    "effective": "allreduce.checks (nccl.effective)",
    "sample": "sample.start (--sample)",
    "retired_pages": "gpu.judge_probe (state, with the other GPU checks)",
    "roce_cc": "fabric.judge_probe (state, between fabric.roce and fabric.nccl)",
}


def _defines(tree: ast.Module) -> set[str]:
    """The module-level functions and assigned names of a module."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _modules() -> dict[str, set[str]]:
    return {p.stem: _defines(ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(CHECK.glob("*.py"))}


def _module(fn: object) -> str:
    return str(getattr(fn, "__module__", "")).removeprefix("nodetune.check.")


def test_every_check_module_is_a_state_check_a_signal_or_named_as_judged_elsewhere() -> None:
    modules = _modules()
    state = [_module(fn) for fn in run.STATE_CHECKS]
    assert all(fn.__name__ == "judge_probe" for fn in run.STATE_CHECKS)
    assert len(set(state)) == len(state), "a module twice in STATE_CHECKS"
    signals = {_module(fn) for fn in health.SIGNALS}
    checks = {m for m, names in modules.items() if {"NAME", "judge"} <= names}
    assert checks - set(state) - signals - set(ELSEWHERE) == set(), \
        "a check module in neither run.STATE_CHECKS nor health.SIGNALS, nor in ELSEWHERE"
    assert set(ELSEWHERE) <= checks, "ELSEWHERE names a module that is no check module"
    assert not set(ELSEWHERE) & (set(state) | signals)
    assert not set(state) & signals
    with_probe = {m for m, names in modules.items() if "judge_probe" in names}
    assert with_probe == set(state), "a judge_probe that run.STATE_CHECKS does not call"


def test_every_judge_signal_is_in_health_signals_once() -> None:
    registered = [(_module(fn), fn.__name__) for fn in health.SIGNALS]
    assert len(set(registered)) == len(registered), "a signal twice in health.SIGNALS"
    assert all(name.startswith("judge_signal") for _m, name in registered)
    defined = {(m, name) for m, names in _modules().items() for name in names
               if name.startswith("judge_signal")}
    assert defined == set(registered), "a judge_signal that health.SIGNALS does not call"


def test_a_counted_signal_keeps_its_keys_and_nothing_else() -> None:
    """health.COUNTED is every signal module with KEEPS; what health.judge records for the
    next check is exactly gpu.xid's point and those keys (the run history and the
    node-local state keep them under these names)."""
    from nodetune.ansible.inventory import Host
    from nodetune.check.gpu_read import read
    from nodetune.measure.node_inputs import inputs

    with_keeps = {m for m, names in _modules().items() if "KEEPS" in names}
    assert with_keeps <= {_module(fn) for fn in health.SIGNALS}, \
        "a module with KEEPS that health.SIGNALS does not call"
    assert len(health.COUNTED) == len(with_keeps)
    keys = [k for keeps in health.COUNTED.values() for k in keeps]
    assert all(health.COUNTED.values()) and len(set(keys)) == len(keys)
    assert not set(keys) & {"time", "xid", "xid_last"}
    results, state = health.judge({}, {}, read({}), 0, inputs(Host("n", (), {})), None,
                                  health.Previous())
    assert list(state) == ["time", "xid", *keys, "xid_last"]
    assert [r.name for r in results] == [
        "gpu.xid", "gpu.sxid", "gpu.fabric", "gpu.imex", "gpu.kernel_module",
        "fabric.rdma_errors", "fabric.pcie", "node.pcie_aer", "gpu.nvlink_errors",
        "dcgm.diag", "gpu.pcie_acs"]


def test_previous_doc_carries_every_key_its_signals_keep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--launcher slurm's previous file keeps the older signals under keys of its own
    (health._DOC_KEYS): each maps exactly its signal's KEEPS, so a key added to a KEEPS
    reaches the nodes; a signal that leaves SIGNALS is no longer read back, and no crash."""
    for name, (keys, _at, _what) in health._DOC_KEYS.items():
        assert set(keys) == set(health.COUNTED[name]), name
    prev = health.Previous(kept={name: Kept({k: {"a": {"b": 1}} for k in keys}, 1.0, "T")
                                 for name, keys in health.COUNTED.items()}, time=1.0, what="T")
    doc = health.previous_doc(prev)
    assert health.previous_from(doc, source="f") == prev
    gone = next(iter(health._DOC_KEYS))
    monkeypatch.setattr(health, "COUNTED", {
        n: k for n, k in health.COUNTED.items() if n != gone})
    assert set(health.previous_from(doc, source="f").kept) == set(health.COUNTED)


def test_a_read_of_its_own_is_kept_as_a_section() -> None:
    parsed = probe_parse.parse("n", {
        "hostname": "n", "nvidia": {"pci_gpus": 0}, "shm": {"bytes": 1},
        "new_read": {"value": 3}, "time_sync": {"chronyc": None},
        "bad name!": {"x": 1}, "not_an_object": [1, 2], "also_not": "text"})
    assert parsed.sections == {"new_read": {"value": 3}, "time_sync": {"chronyc": None}}
    assert parsed.section("new_read") == {"value": 3}
    assert parsed.section("absent") == {}
    assert parsed.nvidia == {"pci_gpus": 0}  # a field of its own is not a section too


def test_the_state_checks_come_in_report_order() -> None:
    from nodetune.ansible.inventory import Host
    from nodetune.check.expect import expectations
    from nodetune.check.gpu_read import read

    parsed = probe_parse.parse("n", {})
    names = [r.name for r in run.judge(parsed, expectations(Host("n", (), {})),
                                       read(parsed.nvidia))]
    assert names[:8] == ["gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.pcie",
                         "gpu.clocks", "gpu.nvlink", "gpu.retired_pages"]
    assert names[8:12] == ["software.torch", "software.cuda", "software.nccl", "software.shm"]
    assert names[-2:] == ["node.time_sync", "node.global_env"]


# --- check --help's list of checks (nodetune.check.listing), from each module's HELP

# Check modules with no line in --help yet.
NOT_LISTED = {"hca_pcie", "pcie_aer"}


def _helps(names: set[str]) -> set[str]:
    """A module's lists of --help lines: HELP, or HELP_X for each of its several signals."""
    return {n for n in names if n == "HELP" or n.startswith("HELP_")}


def _help_lists() -> dict[str, HelpLines]:
    """Every list of --help lines under nodetune/check (by module, ``module.HELP_X`` for one
    of several signals), and those of the two elsewhere that judge a check of check's
    (container.*, fabric.rdma_bw)."""
    import importlib

    from nodetune.container import probe
    from nodetune.measure import rdma_peer

    found: dict[str, HelpLines] = {}
    for m, names in _modules().items():
        for h in _helps(names):
            module = importlib.import_module(f"nodetune.check.{m}")
            found[m if h == "HELP" else f"{m}.{h}"] = getattr(module, h)
    return {**found, "container.probe": probe.HELP, "measure.rdma_peer": rdma_peer.HELP}


def test_every_check_module_has_its_lines_in_the_list() -> None:
    from nodetune.check import listing

    for m, names in _modules().items():
        several = {n.removeprefix("judge_signal_").upper() for n in names
                   if n.startswith("judge_signal_")}
        if several:
            assert _helps(names) == {f"HELP_{s}" for s in several}, \
                f"{m}: not one HELP_X for each judge_signal_X"
        elif {"NAME", "judge"} <= names or {"judge_probe", "judge_signal"} & names:
            assert "HELP" in names, f"{m}: a check module without HELP"
    text = listing.text().splitlines()
    unlisted = set()
    for name, help_lines in _help_lists().items():
        assert all(isinstance(e, tuple) and len(e) >= 2 and all(isinstance(x, str) for x in e)
                   for e in help_lines), name
        if not help_lines:
            unlisted.add(name)
        for line in listing.lines(help_lines):
            assert line in text, f"{name}'s line is not in check's --help: {line!r}"
    assert unlisted == NOT_LISTED


def _base(name: str) -> str:
    return name.partition("[")[0]


def test_the_list_follows_the_registries_in_report_order() -> None:
    """The state checks' and the signals' lines come in the order the report gives their
    results (run.judge, then health.judge); then the checks run apart, then --sample's."""
    from nodetune.ansible.inventory import Host
    from nodetune.check import listing, sample
    from nodetune.check.expect import expectations
    from nodetune.check.gpu_read import read
    from nodetune.measure.node_inputs import inputs

    names = [line.split()[0] for line in listing.text().splitlines()
             if not line.startswith("   ")]
    assert names[-len(sample.HELP) - 1] == "with"  # --sample's, under their title
    registered = [_base(n) for n in names[:names.index(listing.apart()[0].HELP[0][0])]]
    host = Host("n", (), {})
    parsed = probe_parse.parse("n", {})
    reported = [r.name for r in run.judge(parsed, expectations(host), read(parsed.nvidia))]
    reported += [r.name for r in health.judge({}, {}, read({}), 0, inputs(host), None,
                                              health.Previous())[0]]
    in_order = list(dict.fromkeys(map(_base, reported)))
    assert registered[:2] == ["gpu.count", "gpu.driver"] and "gpu.xid" in registered
    assert registered == [n for n in in_order if n in registered]


def test_every_variable_the_expectations_and_the_health_inputs_read_has_its_line() -> None:
    """A state check's inventory variable is read in check/expect.py, a signal's in
    measure/node_inputs.py: each has its line in check's --help from there."""
    from nodetune.check import expect, listing
    from nodetune.measure import node_inputs

    text = listing.variables_text().splitlines()
    for module in (expect, node_inputs):
        read = {v for k, v in vars(module).items() if k.startswith("VAR_")}
        assert read == {e[0] for e in module.VARS_HELP}, module.__name__
    package = CHECK.parent
    with_lines = {p.relative_to(package).with_suffix("").as_posix().replace("/", ".")
                  for p in package.rglob("*.py") if "\nVARS_HELP: " in p.read_text("utf-8")}
    assert with_lines == {m.__name__.removeprefix("nodetune.") for m in listing.readers()}, \
        "a module with VARS_HELP that listing.readers() leaves out"
    for module in listing.readers():
        for line in listing.lines(module.VARS_HELP, width=listing.VAR_WIDTH, gap=2):
            assert line in text
