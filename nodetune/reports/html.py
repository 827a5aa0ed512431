"""``report.html``: one self-contained page per run record (inline CSS and SVG, no scripts).

Every value from the record (node names, reasons, task names, diffs) is
escaped on its way into the markup, and the page's Content-Security-Policy
forbids scripts and any fetch, so a hostile string in an inventory cannot
run or load anything in the reader's browser.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodetune.files import write_atomic
from nodetune.reports import model, svg
from nodetune.reports.diffs import read_diffs
from nodetune.reports.svg import esc

FILENAME = "report.html"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.meta{color:#555;font-size:13px} table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.good,.pass,.ok{background:#e3f4e1} .bad,.fail,.failed{background:#f9d6d5}
.unresolved,.warn,.changed{background:#fdf0c8} .unreachable,.error,.timeout{background:#e8d5f0}
.skip,.skipped{background:#eee;color:#666} .banner{padding:8px 12px;margin:12px 0;
border-left:4px solid #d62728;background:#fbeaea}
.banner.ok{border-color:#2ca02c;background:#eef8ec}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}
.diff-add{color:#116611} .diff-del{color:#aa1111} .diff-hdr{color:#555}
"""


def write(run_dir: Path, doc: Mapping[str, Any]) -> Path:
    """Write ``run_dir/report.html`` for ``doc`` (atomically); return its path."""
    target = run_dir / FILENAME
    write_atomic(target, render(doc, run_dir=run_dir))
    return target


def render(doc: Mapping[str, Any], *, run_dir: Path | None = None) -> str:
    """The whole page for one run record."""
    verb = str(doc.get("verb") or "run")
    body: list[str] = [_header(doc)]
    if verb == "validate":
        body.append(_validate(doc))
    elif verb == "check":
        body.append(_check(doc))
    elif verb in ("apply", "facts"):
        body.append(_apply(doc, run_dir))
    if isinstance(doc.get("slurm"), Mapping):
        body.append(_slurm(doc["slurm"]))
    body.append("<h2>Record</h2><details><summary>report.json</summary><pre>"
                + esc(json.dumps(doc, indent=2, default=str)) + "</pre></details>")
    title = f"nodetune {verb} {doc.get('run_id', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def _header(doc: Mapping[str, Any]) -> str:
    verb = doc.get("verb", "run")
    code = doc.get("exit_code")
    status = str(doc.get("status", ""))
    meta = " · ".join(esc(x) for x in (
        f"run {doc.get('run_id', '?')}", f"started {doc.get('started', '?')}",
        f"inventory {doc.get('inventory', '-')}", f"nodetune {doc.get('nodetune_version', '?')}")
    )
    ok = code == 0
    out = [f"<h1>nodetune {esc(verb)}: <span class=\"{'pass' if ok else 'fail'}\">"
           f"{esc(status or '?')}</span> (exit {esc(code)})</h1><div class=\"meta\">{meta}</div>"]
    err = doc.get("error")
    if isinstance(err, Mapping):
        who = f"{err.get('host')}: " if err.get("host") else ""
        out.append(f'<div class="banner" id="error"><b>{esc(err.get("type", "error"))}</b> '
                   f"{esc(who)}{esc(err.get('message', ''))}</div>")
    for reg in doc.get("regressions") or []:
        if isinstance(reg, Mapping):
            out.append(f'<div class="banner regression">regression: {esc(reg.get("message", ""))}'
                       "</div>")
    return "".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
           row_classes: Sequence[str] = (), table_id: str = "") -> str:
    """Rows are already-escaped cell markup (``<td ...>...</td>``)."""
    tid = f' id="{esc(table_id)}"' if table_id else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        f'<tr class="{esc(row_classes[i]) if i < len(row_classes) else ""}">{"".join(r)}</tr>'
        for i, r in enumerate(rows))
    return f"<table{tid}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(value: object, cls: str = "") -> str:
    text = "-" if value is None or value == "" else (
        f"{value:.2f}" if isinstance(value, float) else str(value))
    return f'<td class="{esc(cls)}">{esc(text)}</td>' if cls else f"<td>{esc(text)}</td>"


# --- validate -------------------------------------------------------------------------------

def _validate(doc: Mapping[str, Any]) -> str:
    pairs = model.pairs_of(doc)
    nodes = model.nodes_of(doc)
    out: list[str] = []
    bad = [n for n in nodes if not n.healthy]
    if bad:
        out.append('<div class="banner" id="first-bad">Look at first: '
                   + ", ".join(f"<b>{esc(n.name)}</b> ({esc(n.verdict)}: {esc(n.reason)})"
                               for n in bad) + "</div>")
    elif nodes:
        out.append(f'<div class="banner ok">All {len(nodes)} nodes good.</div>')
    for warning in dict.fromkeys(w for p in pairs for w in p.warnings):
        out.append(f'<div class="banner warn data-path">warning: {esc(warning)}</div>')
    out.append("<h2>Nodes</h2>")
    out.append(_table(
        ["node", "verdict", "busbw GB/s", "partners", "reason"],
        [[_td(n.name), _td(n.verdict, n.verdict), f'<td class="num">{esc(_num(n.busbw_gbps))}'
          "</td>", _td(", ".join(n.partners)), _td(n.reason)] for n in nodes],
        row_classes=[f"node {n.verdict}" for n in nodes], table_id="nodes"))
    rounds = sorted({p.round for p in pairs})
    if len(pairs) > 1:
        out.append("<h2>Node &times; round</h2>" + _grid(nodes, pairs, rounds))
    out.append("<h2>Bus bandwidth</h2>" + _plot(doc, pairs))
    out.append("<h2>Pairs</h2>")
    out.append(_table(
        ["pair", "round", "verdict", "transport / interface", "busbw GB/s", "threshold GB/s",
         "reason"],
        [[_td(" <-> ".join(p.hosts)), f'<td class="num">{p.round}</td>', _td(p.verdict, p.verdict),
          _td(p.path, "warn" if p.warnings else ""),
          f'<td class="num">{esc(_num(p.busbw_gbps))}</td>',
          f'<td class="num">{esc(_num(p.threshold_gbps))}</td>', _td(p.reason)]
         for p in sorted(pairs, key=lambda p: (p.verdict == "pass", p.round, p.hosts))],
        table_id="pairs"))
    return "".join(out)


def _grid(nodes: Sequence[model.Node], pairs: Sequence[model.Pair], rounds: Sequence[int]) -> str:
    names = [n.name for n in nodes]
    seen = set(names)
    for p in pairs:
        for h in p.hosts:
            if h not in seen:
                names.append(h)
                seen.add(h)
    rows, classes = [], []
    for name in names:
        cells = [_td(name)]
        for r in rounds:
            mine = [p for p in pairs if p.round == r and name in p.hosts]
            if not mine:
                cells.append('<td class="skip">-</td>')
                continue
            p = mine[0]
            other = p.hosts[1] if p.hosts[0] == name else p.hosts[0]
            cells.append(f'<td class="{esc(p.verdict)}" title="{esc(p.reason)}">'
                         f"{esc(p.verdict)} with {esc(other)} · {esc(_num(p.busbw_gbps))}</td>")
        rows.append(cells)
        classes.append("grid-row")
    return _table(["node", *(f"round {r}" for r in rounds)], rows, row_classes=classes,
                  table_id="grid")


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
    """The profile's nccl-tests curve, where the profile has one."""
    from nodetune.validate import thresholds

    name = model.profile_name(doc)
    profile = thresholds.PROFILES.get(name) if name else None
    if profile is None or not profile.reference:
        return None
    return profile.name, tuple((float(b), g) for b, g in profile.reference)


# --- check ----------------------------------------------------------------------------------

def _check(doc: Mapping[str, Any]) -> str:
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
        cells = [_td(name), _td(v.verdict if v else "", v.verdict if v else "")]
        for check in names:
            found = by_node.get(name, {}).get(check)
            if found is None:
                cells.append('<td class="skip">-</td>')
                continue
            tip = f"measured {found.measured}; expected {found.expected}; {found.message}"
            cells.append(f'<td class="{esc(found.status)}" title="{esc(tip)}">'
                         f"{esc(found.status)}</td>")
        rows.append(cells)
        classes.append(f"node {v.verdict}" if v else "node")
    out = ["<h2>Node &times; check</h2>",
           _table(["node", "verdict", *names], rows, row_classes=classes, table_id="checks")]
    problems = [c for c in checks if c.status in ("fail", "warn")]
    problems.sort(key=lambda c: (c.status != "fail", order.get(c.node, len(order)), c.node))
    if problems:
        out.append("<h2>Failures and warnings</h2>")
        out.append(_table(["node", "check", "status", "measured", "expected", "message"],
                          [[_td(c.node), _td(c.name), _td(c.status, c.status), _td(c.measured),
                            _td(c.expected), _td(c.message)] for c in problems]))
    return "".join(out)


# --- apply ----------------------------------------------------------------------------------

def _apply(doc: Mapping[str, Any], run_dir: Path | None) -> str:
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    hosts.sort(key=lambda h: (-int(h.get("unreachable") or 0), -int(h.get("failed") or 0),
                              str(h.get("host"))))
    out = ["<h2>Hosts</h2>", _table(
        ["host", "result", "ok", "changed", "failed", "unreachable", "skipped"],
        [[_td(h.get("host")), _td(h.get("state"), str(h.get("state") or "")),
          *(f'<td class="num">{esc(h.get(k, 0))}</td>'
            for k in ("ok", "changed", "failed", "unreachable", "skipped"))] for h in hosts],
        table_id="hosts")]
    for key, title in (("failed_tasks", "Failed tasks"), ("changed_tasks", "Changed tasks")):
        tasks = [t for t in doc.get(key) or [] if isinstance(t, Mapping)]
        if tasks:
            out.append(f"<h2>{esc(title)}</h2>")
            out.append(_table(["host", "role", "task", "status", "message"],
                              [[_td(t.get("host")), _td(t.get("role")), _td(t.get("task")),
                                _td(t.get("status"), str(t.get("status") or "")),
                                _td(t.get("message"))] for t in tasks]))
    artifacts = Path(str(doc["artifacts"])) if doc.get("artifacts") else (
        run_dir / "ansible" if run_dir else None)
    diffs = read_diffs(artifacts) if artifacts is not None else []
    if diffs:
        options = doc.get("options") if isinstance(doc.get("options"), Mapping) else {}
        check_mode = bool(options.get("check")) if isinstance(options, Mapping) else False
        out.append(f"<h2>{'Drift (check mode: nothing was changed)' if check_mode else 'Diffs'}"
                   "</h2>")
        for d in diffs:
            out.append(f"<h3>{esc(d.host)}: {esc(d.task)}</h3><pre>{_diff_markup(d.text)}</pre>")
    return "".join(out)


def _diff_markup(text: str) -> str:
    lines = []
    for line in text.splitlines():
        cls = ("diff-hdr" if line.startswith(("---", "+++", "@@")) else
               "diff-add" if line.startswith("+") else "diff-del" if line.startswith("-") else "")
        lines.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
    return "\n".join(lines)


def _slurm(slurm: Mapping[str, Any]) -> str:
    actions = [a for a in slurm.get("actions") or [] if isinstance(a, Mapping)]
    if not actions:
        return ""
    return "<h2>Slurm</h2>" + _table(
        ["node", "slurm node", "action", "reason", "dry run", "state after"],
        [[_td(a.get("node")), _td(a.get("slurm_node")), _td(a.get("action")), _td(a.get("reason")),
          _td("yes" if a.get("dry_run") else "no"), _td(a.get("state_after"))] for a in actions],
        table_id="slurm")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def human_bytes(n: float) -> str:
    """1048576 -> '1M' (axis labels, nccl-tests' -b/-e style)."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:g}"
