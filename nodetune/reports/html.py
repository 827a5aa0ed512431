"""``report.html``: one self-contained page per run record (inline CSS and SVG, no scripts).

The page is the Jinja2 template ``templates/report.html.j2`` (package data),
rendered with autoescape: every value from the record (node names, reasons,
task names, diffs) reaches the markup as text. The page's Content-Security-Policy
forbids scripts and any fetch, so a hostile string in an inventory cannot run
or load anything in the reader's browser. This module only shapes the record
into rows of cells (:func:`_cell`: text, class, tooltip) for the template.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from nodetune.action import Action
from nodetune.files import write_atomic
from nodetune.reports import model, svg
from nodetune.reports.diffs import read_diffs

FILENAME = "report.html"
TEMPLATE = "report.html.j2"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

Cell = dict[str, str]


@functools.cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("nodetune.reports", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template(TEMPLATE)


def write(run_dir: Path, doc: Mapping[str, Any]) -> Path:
    """Write ``run_dir/report.html`` for ``doc`` (atomically); return its path."""
    target = run_dir / FILENAME
    write_atomic(target, render(doc, run_dir=run_dir))
    return target


def render(doc: Mapping[str, Any], *, run_dir: Path | None = None) -> str:
    """The whole page for one run record."""
    verb = str(doc.get("verb") or "run")
    code = doc.get("exit_code")
    err = doc.get("error")
    error = None
    if isinstance(err, Mapping):
        error = {"type": str(err.get("type", "error")),
                 "who": f"{err.get('host')}: " if err.get("host") else "",
                 "message": str(err.get("message", ""))}
    context = {
        "csp": CSP, "title": f"nodetune {verb} {doc.get('run_id', '')}", "verb": verb,
        "status": str(doc.get("status", "")), "ok": code == 0, "code": str(code),
        "meta": [f"run {doc.get('run_id', '?')}", f"started {doc.get('started', '?')}",
                 f"inventory {doc.get('inventory', '-')}",
                 f"nodetune {doc.get('nodetune_version', '?')}"],
        "error": error,
        "regressions": [str(r.get("message", "")) for r in doc.get("regressions") or []
                        if isinstance(r, Mapping)],
        "validate": _validate(doc) if verb == "validate" else None,
        "check": _check(doc) if verb == "check" else None,
        "apply": _apply(doc, run_dir) if verb in ("apply", "facts") else None,
        "slurm": _slurm(doc["slurm"]) if isinstance(doc.get("slurm"), Mapping) else None,
        "container": (_container(doc["container"]) if isinstance(doc.get("container"), Mapping)
                      and doc["container"] else None),
        "record": json.dumps(doc, indent=2, default=str),
    }
    return _template().render(**context) + "\n"


def _cell(value: object, cls: str = "", title: str = "") -> Cell:
    text = "-" if value is None or value == "" else (
        f"{value:.2f}" if isinstance(value, float) else str(value))
    return {"text": text, "cls": cls, "title": title}


def _numcell(value: object) -> Cell:
    text = _num(value) if isinstance(value, float) or value is None else str(value)
    return {"text": text, "cls": "num", "title": ""}


# --- validate -------------------------------------------------------------------------------

def _validate(doc: Mapping[str, Any]) -> dict[str, Any]:
    pairs = model.pairs_of(doc)
    nodes = model.nodes_of(doc)
    rounds = sorted({p.round for p in pairs})
    return {
        "bad": [{"name": n.name, "verdict": n.verdict, "reason": n.reason}
                for n in nodes if not n.healthy],
        "good": len(nodes),
        "warnings": list(dict.fromkeys(w for p in pairs for w in p.warnings)),
        "nodes": [[_cell(n.name), _cell(n.verdict, n.verdict), _numcell(n.busbw_gbps),
                   _cell(", ".join(n.partners)), _cell(n.reason)] for n in nodes],
        "node_classes": [f"node {n.verdict}" for n in nodes],
        "grid": _grid(nodes, pairs, rounds) if len(pairs) > 1 else None,
        "plot": Markup(_plot(doc, pairs)),  # noqa: S704 - svg.py escapes every value itself
        "pairs": [[_cell(p.name), _numcell(p.round), _cell(p.verdict, p.verdict),
                   _cell(p.path, "warn" if p.warnings else ""), _numcell(p.busbw_gbps),
                   _numcell(p.threshold_gbps), _cell(p.reason)]
                  for p in sorted(pairs, key=lambda p: (p.verdict == "pass", p.round, p.hosts))],
    }


def _grid(nodes: Sequence[model.Node], pairs: Sequence[model.Pair],
          rounds: Sequence[int]) -> dict[str, Any]:
    names = [n.name for n in nodes]
    seen = set(names)
    for p in pairs:
        for h in p.hosts:
            if h not in seen:
                names.append(h)
                seen.add(h)
    rows = []
    for name in names:
        cells = [_cell(name)]
        for r in rounds:
            mine = [p for p in pairs if p.round == r and name in p.hosts]
            if not mine:
                cells.append(_cell("-", "skip"))
                continue
            p = mine[0]
            other = p.peer(name)
            cells.append(_cell(f"{p.verdict} with {other} · {_num(p.busbw_gbps)}", p.verdict,
                               p.reason))
        rows.append(cells)
    return {"headers": ["node", *(f"round {r}" for r in rounds)], "rows": rows,
            "classes": ["grid-row"] * len(rows)}


def _plot(doc: Mapping[str, Any], pairs: Sequence[model.Pair]) -> str:
    series = [svg.series_from(p.label, [(s.bytes, s.busbw) for s in p.sizes], index=i,
                              failed=p.verdict not in ("pass", ""))
              for i, p in enumerate(pairs)]
    reference = _reference(doc)
    if reference:
        name, points = reference
        series.append(svg.Series(label=f"nccl-tests reference ({name})", points=points,
                                 colour=svg.REFERENCE_COLOUR, dashed=True,
                                 css_class="reference"))
    thresholds = sorted({p.threshold_gbps for p in pairs if p.threshold_gbps is not None})
    hlines = tuple(svg.HLine(label=f"threshold {t:g} GB/s", y=t) for t in thresholds)
    return svg.line_plot(svg.Plot(
        title=f"{model.collective(doc)} busbw vs message size",
        x_label="message size (bytes, log scale)", y_label="busbw (GB/s)",
        series=tuple(series), hlines=hlines, x_format=human_bytes))


def _reference(doc: Mapping[str, Any]) -> tuple[str, tuple[tuple[float, float], ...]] | None:
    """The profile's nccl-tests curve, where the record carries one (validate writes it)."""
    ref = doc.get("reference")
    if not isinstance(ref, Mapping) or not isinstance(ref.get("points"), list):
        return None
    points = tuple((float(b), float(g)) for b, g in ref["points"])
    return str(ref.get("profile") or ""), points


# --- check ----------------------------------------------------------------------------------

def _check(doc: Mapping[str, Any]) -> dict[str, Any]:
    checks = model.checks_of(doc)
    nodes = model.nodes_of(doc)
    order = {n.name: i for i, n in enumerate(nodes)}
    names = list(dict.fromkeys(c.name for c in checks))
    by_node: dict[str, dict[str, model.Check]] = {}
    for c in checks:
        by_node.setdefault(c.node, {})[c.name] = c
    node_names = sorted(by_node, key=lambda n: (order.get(n, len(order)), n))
    node_names += [n.name for n in nodes if n.name not in by_node]
    verdict = {n.name: n for n in nodes}
    rows, classes = [], []
    for name in node_names:
        v = verdict.get(name)
        cells = [_cell(name), _cell(v.verdict if v else "", v.verdict if v else ""),
                 _action_cell(v.action if v else "")]
        for check in names:
            found = by_node.get(name, {}).get(check)
            if found is None:
                cells.append(_cell("-", "skip"))
                continue
            tip = f"measured {found.measured}; expected {found.expected}; {found.message}"
            cells.append(_cell(found.status, found.status, tip))
        rows.append(cells)
        classes.append(f"node {v.verdict}" if v else "node")
    rank = {"fail": 0, "unknown": 1, "warn": 2}
    problems = [c for c in checks if c.status in rank]
    problems.sort(key=lambda c: (rank[c.status], order.get(c.node, len(order)), c.node))
    return {"headers": ["node", "verdict", "action", *names], "rows": rows, "classes": classes,
            "problems": [[_cell(c.node), _cell(c.name), _cell(c.status, c.status),
                          _cell(c.measured), _cell(c.expected), _cell(c.message),
                          _action_cell(c.action)]
                         for c in problems]}


def _action_cell(action: str) -> Cell:
    """An action of the ladder (nodetune.action), in plain words on hover; "-" in a record
    from before actions."""
    try:
        words = Action(action).words
    except ValueError:
        words = ""
    return _cell(action, f"action action-{action}" if action else "", words)


# --- apply ----------------------------------------------------------------------------------

def _apply(doc: Mapping[str, Any], run_dir: Path | None) -> dict[str, Any]:
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    hosts.sort(key=lambda h: (-int(h.get("unreachable") or 0), -int(h.get("failed") or 0),
                              str(h.get("host"))))
    tasks = []
    for key, title in (("failed_tasks", "Failed tasks"), ("changed_tasks", "Changed tasks")):
        rows = [[_cell(t.get("host")), _cell(t.get("role")), _cell(t.get("task")),
                 _cell(t.get("status"), str(t.get("status") or "")), _cell(t.get("message"))]
                for t in doc.get(key) or [] if isinstance(t, Mapping)]
        if rows:
            tasks.append({"title": title, "rows": rows})
    artifacts = Path(str(doc["artifacts"])) if doc.get("artifacts") else (
        run_dir / "ansible" if run_dir else None)
    diffs = read_diffs(artifacts) if artifacts is not None else []
    options = doc.get("options") if isinstance(doc.get("options"), Mapping) else {}
    check_mode = bool(options.get("check")) if isinstance(options, Mapping) else False
    return {
        "hosts": [[_cell(h.get("host")), _cell(h.get("state"), str(h.get("state") or "")),
                   *(_numcell(h.get(k, 0))
                     for k in ("ok", "changed", "failed", "unreachable", "skipped"))]
                  for h in hosts],
        "tasks": tasks,
        "diff_title": "Drift (check mode: nothing was changed)" if check_mode else "Diffs",
        "diffs": [{"host": d.host, "task": d.task, "lines": _diff_lines(d.text)} for d in diffs],
    }


def _diff_lines(text: str) -> list[tuple[str, str]]:
    """Each line of a unified diff with its class (header, added, removed, context)."""
    return [("diff-hdr" if line.startswith(("---", "+++", "@@")) else
             "diff-add" if line.startswith("+") else "diff-del" if line.startswith("-") else "",
             line) for line in text.splitlines()]


def _slurm(slurm: Mapping[str, Any]) -> list[list[Cell]] | None:
    actions = [a for a in slurm.get("actions") or [] if isinstance(a, Mapping)]
    return [[_cell(a.get("node")), _cell(a.get("slurm_node")), _cell(a.get("action")),
             _cell(a.get("reason")), _cell("yes" if a.get("dry_run") else "no"),
             _cell(a.get("state_after"))] for a in actions] or None


def _container(section: Mapping[str, Any]) -> dict[str, Any]:
    """report.json's ``container`` (``--image``): each node's image and what its container
    reported, and every check of the container checklist, failures first."""
    nodes = {str(k): v for k, v in section.items() if isinstance(v, Mapping)}
    rows = []
    for name, c in nodes.items():
        nccl, node_nccl = c.get("nccl"), c.get("node_nccl")
        rows.append([
            _cell(name), _cell(c.get("image")), _cell(c.get("digest") or "?"),
            _cell(c.get("runtime")), _cell(c.get("ipc")), _cell(c.get("torch")),
            _cell(c.get("cuda")),
            _cell(nccl, "fail" if nccl and node_nccl and nccl != node_nccl else ""),
            _cell(node_nccl), _cell(c.get("shm")),
            _cell(", ".join(str(d) for d in c.get("rdma_devices") or []) or None),
            _cell(None if c.get("libibverbs") is None else "yes" if c["libibverbs"] else "no"),
            _cell(c.get("missing"), "fail" if c.get("missing") else "")])
    checks = [(name, r) for name, c in nodes.items() for r in c.get("checks") or []
              if isinstance(r, Mapping)]
    order = {"fail": 0, "warn": 1, "skip": 3}
    checks.sort(key=lambda nr: order.get(str(nr[1].get("status")), 2))
    return {"nodes": rows, "checks": [
        [_cell(name), _cell(r.get("name")), _cell(r.get("status"), str(r.get("status", ""))),
         _cell(r.get("measured")), _cell(r.get("expected")), _cell(r.get("message"))]
        for name, r in checks]}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def human_bytes(n: float) -> str:
    """1048576 -> '1M' (axis labels, nccl-tests' -b/-e style)."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:g}"
