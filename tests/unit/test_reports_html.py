"""report.html: content per verb, worst nodes first, everything escaped, nothing fetched."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nodetune.reports import html
from tests.unit.reports_samples import HOSTILE, hostile_fleet, load


class _Page(HTMLParser):
    """Tags, attributes and the text of each table's rows."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._table = a.get("id") or f"t{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _self_contained(page: _Page) -> None:
    assert not [t for t, _ in page.tags if t in ("script", "link", "iframe", "object", "img")]
    for _, attrs in page.tags:
        for key, value in attrs.items():
            assert not (key in ("src", "href") and value), (key, value)
            assert not key.startswith("on"), key
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    assert csp and "default-src 'none'" in (csp[0].get("content") or "")


def test_two_node_validate_page() -> None:
    doc = load("validate-pair")
    page = _Page(html.render(doc))
    _self_contained(page)
    nodes = page.tables["nodes"]
    assert [r[0] for r in nodes[1:]] == ["node-1", "node-2"]
    assert all(r[1] == "good" for r in nodes[1:])
    assert [t for t, _ in page.tags].count("polyline") == 1
    assert "grid" not in page.tables  # one pair: no node x round grid


def test_fleet_page_puts_the_bad_node_first_and_draws_every_pair() -> None:
    page = _Page(html.render(load("validate-fleet")))
    _self_contained(page)
    nodes = page.tables["nodes"]
    assert nodes[1][:2] == ["node-3", "bad"]
    assert {r[1] for r in nodes[2:]} == {"good"}
    polylines = [a for t, a in page.tags if t == "polyline"]
    assert len(polylines) == 4
    assert sum("fail" in (a.get("class") or "") for a in polylines) == 2
    assert [a for t, a in page.tags if t == "line" and a.get("class") == "hline"]
    grid = page.tables["grid"]
    assert grid[0] == ["node", "round 1", "round 2"]
    assert grid[1][0] == "node-3" and grid[1][1].startswith("fail with node-4")
    assert grid[1][2].startswith("fail with node-1")
    assert page.tables["pairs"][1][2] == "fail"  # failed pairs listed first


def test_reference_curve_when_the_profile_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    curve = ((float(1 << 20), 0.1), (float(64 << 20), 0.5))
    monkeypatch.setattr(html, "_reference", lambda _doc: ("lab-gloo", curve))
    page = _Page(html.render(load("validate-fleet")))
    refs = [a for t, a in page.tags if t == "polyline" and a.get("class") == "reference"]
    assert len(refs) == 1 and refs[0].get("stroke-dasharray")


def test_hostile_names_and_reasons_are_text_not_markup() -> None:
    text = html.render(hostile_fleet())
    page = _Page(text)
    _self_contained(page)
    assert "<script>" not in text and "<img" not in text
    assert page.tables["nodes"][1][0] == HOSTILE  # shown verbatim, first (it is the bad node)


def test_check_page_colours_each_cell() -> None:
    doc = load("check")
    text = html.render(doc)
    page = _Page(text)
    _self_contained(page)
    table = page.tables["checks"]
    assert table[0] == ["node", "verdict", "action", "gpu.count", "gpu.ecc", "net.mtu",
                        "ib.ports"]
    assert table[1][:4] == ["node-2", "bad", "-", "fail"]  # a record from before actions
    cells = [a.get("class") for t, a in page.tags if t == "td"]
    assert {"fail", "warn", "skip", "pass"} <= set(cells)
    assert "slurm" in page.tables and page.tables["slurm"][1][2] == "drain"


def _event(counter: int, host: str, task: str, res: dict[str, object]) -> dict[str, object]:
    return {"event": "runner_on_ok", "counter": counter,
            "event_data": {"host": host, "task": task, "role": "net_sysctl", "res": res}}


def test_apply_check_mode_shows_counts_and_drift_as_diffs(tmp_path: Path) -> None:
    events = tmp_path / "ansible" / "job_events"
    events.mkdir(parents=True)
    diff = {"before": "net.core.rmem_max = 212992\n", "after": "net.core.rmem_max = 16777216\n",
            "before_header": "/etc/sysctl.d/90-nodetune-net.conf",
            "after_header": "/etc/sysctl.d/90-nodetune-net.conf"}
    for i, ev in enumerate([
        _event(1, "node-1", "Write the sysctl file", {"changed": True, "diff": [diff]}),
        _event(2, "node-1", "Read the MTU", {"changed": False, "diff": {"before": "a", "after": "b"}}),
        _event(3, HOSTILE, "Set <b>MTU</b>", {"changed": True,
                                              "diff": {"prepared": "--- a\n+++ b\n-1500\n+9000"}}),
    ], start=1):
        (events / f"{i}-uuid{i}.json").write_text(json.dumps(ev))
    (events / "9-broken.json").write_text("{not json")
    doc = {"verb": "apply", "run_id": "r", "exit_code": 0, "status": "successful",
           "options": {"check": True, "diff": True},
           "hosts": [{"host": "node-1", "state": "changed", "ok": 5, "changed": 1, "failed": 0,
                      "unreachable": 0, "skipped": 2},
                     {"host": HOSTILE, "state": "failed", "ok": 1, "changed": 1, "failed": 1,
                      "unreachable": 0, "skipped": 0}],
           "changed_tasks": [{"host": "node-1", "task": "Write the sysctl file",
                              "role": "net_sysctl", "status": "changed", "message": ""}],
           "failed_tasks": [{"host": HOSTILE, "task": "Set <b>MTU</b>", "role": "net_mtu",
                             "status": "failed", "message": "RTNETLINK answers: <denied>"}],
           "artifacts": str(tmp_path / "ansible")}
    path = html.write(tmp_path, doc)
    text = path.read_text()
    page = _Page(text)
    _self_contained(page)
    hosts = page.tables["hosts"]
    assert hosts[1][0] == HOSTILE and hosts[1][4] == "1"  # failed host first
    assert "Drift (check mode: nothing was changed)" in text
    # The drift is the unified diff of the sysctl file, its lines marked as removed/added.
    assert ('<span class="diff-del">-net.core.rmem_max = 212992</span>\n'
            '<span class="diff-add">+net.core.rmem_max = 16777216</span>') in text
    assert "Read the MTU" not in text  # not changed: no diff shown
    assert "<b>MTU</b>" not in text and "&lt;b&gt;MTU&lt;/b&gt;" in text
    assert not list(tmp_path.glob("*.tmp"))


def test_error_record_says_what_failed() -> None:
    doc = {"verb": "validate", "run_id": "r", "status": "error", "exit_code": 3,
           "error": {"type": "SSHError", "host": "node-9", "message": "connection refused"}}
    page = _Page(html.render(doc))
    assert page.tables["nodes"][1][:2] == ["node-9", "unreachable"]
    assert any(a.get("id") == "error" for _, a in page.tags)


def test_profile_reference_curve_comes_from_thresholds() -> None:
    """validate writes the profile's nccl-tests curve into the record; the page draws it."""
    from nodetune.measure import thresholds

    doc = load("validate-pair")
    doc["options"]["profile"] = "h200-nv18-pair"
    doc.update(thresholds.reference_section("h200-nv18-pair"))
    ref = html._reference(doc)
    assert ref is not None and ref[0] == "h200-nv18-pair"
    assert dict(ref[1])[float(1 << 30)] == 328.54
    assert all(p.min_busbw_gbps <= max(g for _, g in p.reference)
               for p in thresholds.PROFILES.values() if p.reference)
    doc.pop("reference")
    doc.update(thresholds.reference_section("lab-gloo"))
    assert html._reference(doc) is None


def test_every_pair_row_shows_transport_and_interface_and_the_ssh_warning() -> None:
    page = _Page(html.render(load("validate-pair")))
    head, row = page.tables["pairs"]
    assert row[head.index("transport / interface")] == "gloo/TCP eth1"
    assert not [a for t, a in page.tags if "data-path" in (a.get("class") or "")]
    fleet = load("validate-fleet")
    for p in fleet["pairs"]:
        p["path"] = "gloo/TCP eth0"
        p["warnings"] = ["the data path is the interface SSH uses on node-1 (eth0)"]
    text = html.render(fleet)
    page = _Page(text)
    head, *rows = page.tables["pairs"]
    assert {r[head.index("transport / interface")] for r in rows} == {"gloo/TCP eth0"}
    assert text.count('class="banner warn data-path"') == 1
    assert "warning: the data path is the interface SSH uses on node-1 (eth0)" in text


def test_the_page_is_the_packaged_jinja2_template_with_autoescape() -> None:
    import importlib.resources

    template = importlib.resources.files("nodetune.reports") / "templates" / html.TEMPLATE
    assert template.is_file()  # package data: the wheel ships nodetune/reports/templates/
    assert html._template().environment.autoescape is True
    doc = load("check")
    doc["inventory"] = "<i>inv</i>"
    assert "&lt;i&gt;inv&lt;/i&gt;" in html.render(doc) and "<i>inv" not in html.render(doc)


def _container_doc() -> dict[str, object]:
    """A validate --image record that failed the checklist on node-2 (64 MB /dev/shm),
    its ``container`` section made by the checklist itself."""
    from nodetune.ansible.inventory import Host
    from nodetune.container import probe as cp
    from nodetune.container import runtime as ct
    node = {"gpu": True, "shm": 2**35, "rdma": ["uverbs0"], "ibverbs": True,
            "torch": "2.3.0", "cuda": "12.4", "nccl": "2.21.5"}
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    section = {}
    for name, inside in (("node-1", node), ("node-2", {**node, "shm": 64 * 2**20})):
        c = ct.config(Host(name, ("gpu_nodes",), {}), image)
        section[name] = cp.Probed(host=name, container=c, digest="sha256:0abc", node=node,
                                  inside=inside, results=cp.judge(node, inside)).to_dict()
    return {"verb": "validate", "run_id": "r", "status": "fail", "exit_code": 1,
            "error": {"type": "ImageCheckFailed", "host": "node-2",
                      "message": "/dev/shm inside the container is 64.0 MiB"},
            "container": section}


def test_the_training_image_section_shows_each_nodes_container_and_checklist() -> None:
    page = _Page(html.render(_container_doc()))
    _self_contained(page)
    rows = page.tables["container"]
    assert rows[0][:4] == ["node", "image", "digest", "runtime"]
    one = dict(zip(rows[0], rows[1], strict=True))
    assert one["node"] == "node-1" and one["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert (one["digest"], one["runtime"], one["IPC"]) == ("sha256:0abc", "podman", "host")
    assert (one["torch"], one["CUDA"], one["NCCL"], one["node's NCCL"]) == (
        "2.3.0", "12.4", "2.21.5", "2.21.5")
    assert (one["/dev/shm"], one["RDMA devices"], one["libibverbs"]) == (
        "32.0 GiB", "uverbs0", "yes")
    assert dict(zip(rows[0], rows[2], strict=True))["/dev/shm"] == "64.0 MiB"
    checks = page.tables["container-checks"]
    assert checks[1][:3] == ["node-2", "container.shm", "fail"]  # failures first
    assert "below 1.0 GiB" in checks[1][5]
    assert len(checks) == 1 + 2 * 5
    assert {r[2] for r in checks[2:]} == {"pass"}


def test_no_training_image_section_without_image_and_its_values_are_text() -> None:
    assert "container" not in _Page(html.render(load("validate-pair"))).tables
    doc = _container_doc()
    doc["container"]["node-1"]["image"] = HOSTILE  # type: ignore[index]
    text = html.render(doc)
    assert HOSTILE not in text and "container" in _Page(text).tables
