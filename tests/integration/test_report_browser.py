"""report.html looked at in real headless Chromium: plot drawn, bad node first, no console errors,
and a check's page showing each node's and each finding's action.

With ``NODETUNE_REPORT_SCREENSHOT=PATH`` the check page is also saved there as a PNG, for a
person to look at."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodetune.reports import html
from tests.cdp import Browser, chromium
from tests.unit.reports_samples import HOSTILE, hostile_fleet, load
from tests.unit.test_check_actions import record as check_record

GEOMETRY = """JSON.stringify({
  lines: [...document.querySelectorAll('svg.plot polyline')].map(p => {
    const b = p.getBBox(); return {cls: p.getAttribute('class'), w: b.width, h: b.height,
                                    len: p.getTotalLength()}; }),
  svg: (() => { const r = document.querySelector('svg.plot').getBoundingClientRect();
                return {w: r.width, h: r.height, top: r.top}; })(),
  rows: [...document.querySelectorAll('#nodes tbody tr')].map(tr => ({
    node: tr.cells[0].textContent, verdict: tr.cells[1].textContent,
    top: tr.getBoundingClientRect().top})),
  banner: (() => { const b = document.querySelector('#first-bad');
                   return b ? {top: b.getBoundingClientRect().top, text: b.textContent} : null; })(),
  scripts: document.scripts.length, images: document.images.length
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if chromium() is None:
        pytest.fail("chromium is missing: run scripts/bootstrap.sh (it installs Debian's chromium)")
    with Browser(width=1200, height=900) as b:
        yield b


def _look(browser: Browser, tmp_path: Path, doc: dict[str, object]) -> dict[str, object]:
    import json

    page = html.write(tmp_path, doc)
    browser.load(page)
    seen: dict[str, object] = json.loads(browser.evaluate(GEOMETRY))
    seen["problems"] = browser.console_problems()
    return seen


def test_fleet_page_renders_plot_and_puts_the_bad_node_first(browser: Browser,
                                                               tmp_path: Path) -> None:
    seen = _look(browser, tmp_path, load("validate-fleet"))
    assert seen["problems"] == []
    lines = seen["lines"]
    assert isinstance(lines, list) and len(lines) == 4
    assert all(ln["w"] > 100 and ln["len"] > 100 for ln in lines)  # drawn across the sizes
    assert max(ln["h"] for ln in lines) > 100  # the healthy curves climb
    rows = seen["rows"]
    assert isinstance(rows, list)
    assert (rows[0]["node"], rows[0]["verdict"]) == ("node-3", "bad")
    assert rows[0]["top"] < min(r["top"] for r in rows[1:])
    banner = seen["banner"]
    assert isinstance(banner, dict) and banner["top"] < 200 and "node-3" in banner["text"]
    assert seen["scripts"] == 0 and seen["images"] == 0


def test_hostile_names_render_as_text(browser: Browser, tmp_path: Path) -> None:
    seen = _look(browser, tmp_path, hostile_fleet())
    assert seen["problems"] == []
    rows = seen["rows"]
    assert isinstance(rows, list) and rows[0]["node"] == HOSTILE
    assert seen["scripts"] == 0 and seen["images"] == 0


def test_console_errors_would_be_seen(browser: Browser, tmp_path: Path) -> None:
    """The negative control: a page that tries to fetch and run something is caught."""
    page = tmp_path / "bad.html"
    page.write_text(html.render(load("validate-pair")).replace(
        "<h2>Nodes</h2>", '<h2>Nodes</h2><img src="http://127.0.0.1:9/x.png">'))
    browser.load(page)
    assert any("Content Security Policy" in p for p in browser.console_problems())


# Each table's action column: its heading's index, and each row's cell as drawn.
ACTIONS = """JSON.stringify({width: window.innerWidth, tables: ['checks', 'problems'].map(id => {
  const t = document.getElementById(id);
  const col = [...t.tHead.rows[0].cells].map(c => c.textContent).indexOf('action');
  return {id, col, rows: [...t.tBodies[0].rows].map(r => {
    const c = r.cells[col], b = c.getBoundingClientRect(), s = getComputedStyle(c);
    return {node: r.cells[0].textContent, check: r.cells[1].textContent, text: c.textContent,
            title: c.title, left: b.left, right: b.right, w: b.width, h: b.height,
            shown: s.visibility === 'visible' && s.display !== 'none' && s.opacity !== '0',
            weight: s.fontWeight}; })}; })})"""


def test_check_page_shows_each_nodes_and_each_findings_action(browser: Browser,
                                                               tmp_path: Path) -> None:
    import json

    page = html.write(tmp_path, check_record())
    browser.load(page)
    seen = json.loads(browser.evaluate(ACTIONS))
    assert browser.console_problems() == []
    shot = os.environ.get("NODETUNE_REPORT_SCREENSHOT")
    if shot:
        print(f"screenshot: {browser.screenshot(Path(shot))}")
    checks, problems = seen["tables"]
    assert checks["col"] == 2 and problems["col"] == 6  # after node, verdict / the finding
    assert {r["node"]: r["text"] for r in checks["rows"]} == {
        "n-bad": "reboot", "n-na": "re-run", "n-ok": "none"}
    assert {(r["node"], r["check"], r["text"], r["title"]) for r in problems["rows"]} == {
        ("n-bad", "gpu.xid", "reboot", "reboot the node"),
        ("n-bad", "fabric.mtu[eth1]", "re-run", "fix what the check names and re-run it"),
        ("n-na", "gpu.count", "re-run", "fix what the check names and re-run it")}
    for row in checks["rows"] + problems["rows"]:  # drawn, inside the window's width
        assert row["shown"] and row["w"] > 20 and row["h"] > 10, row
        assert row["left"] >= 0 and row["right"] <= seen["width"], row
    reboot = next(r for r in checks["rows"] if r["node"] == "n-bad")
    assert int(reboot["weight"]) >= 700  # the heavy rungs stand out
