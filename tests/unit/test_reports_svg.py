"""The hand-written SVG plot: geometry, log axis, escaping, empty input."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from nodetune.reports import svg

NS = {"s": "http://www.w3.org/2000/svg"}


def _plot(**kw: object) -> svg.Plot:
    series = (svg.Series("a <-> b", ((1 << 20, 1.0), (1 << 22, 2.0), (1 << 24, 4.0))),)
    args: dict[str, object] = {"title": "t", "x_label": "x", "y_label": "y", "series": series}
    args.update(kw)
    return svg.Plot(**args)  # type: ignore[arg-type]


def _points(el: ET.Element) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in el.attrib["points"].split()]  # type: ignore[misc]


def test_log_x_axis_spaces_powers_evenly_and_y_grows_upward() -> None:
    root = ET.fromstring(svg.line_plot(_plot()))
    (line,) = root.findall("s:polyline", NS)
    pts = _points(line)
    assert len(pts) == 3
    # x4 steps are equal steps on a log axis
    assert abs((pts[1][0] - pts[0][0]) - (pts[2][0] - pts[1][0])) < 0.2
    assert pts[0][1] > pts[1][1] > pts[2][1]  # SVG y grows downward: higher busbw is higher up
    # points stay inside the drawing area
    w, h = float(root.attrib["width"]), float(root.attrib["height"])
    assert all(0 < x < w and 0 < y < h for x, y in pts)


def test_threshold_line_sits_at_its_value() -> None:
    root = ET.fromstring(svg.line_plot(_plot(hlines=(svg.HLine("threshold 2 GB/s", 2.0),))))
    (hline,) = [e for e in root.iter("{http://www.w3.org/2000/svg}line")
                if e.attrib.get("class") == "hline"]
    (line,) = root.findall("s:polyline", NS)
    assert abs(float(hline.attrib["y1"]) - _points(line)[1][1]) < 0.2  # same y as the 2.0 point


def test_labels_are_escaped() -> None:
    evil = '</title><script>alert(1)</script>"'
    text = svg.line_plot(_plot(title=evil, series=(svg.Series(evil, ((1.0, 1.0), (2.0, 2.0))),)))
    assert "<script>" not in text
    ET.fromstring(text)  # still well-formed XML
    assert "&lt;script&gt;" in text


def test_no_points_says_so() -> None:
    text = svg.line_plot(_plot(series=()))
    assert "no measurements" in text
    ET.fromstring(text)


def test_single_size_still_draws() -> None:
    root = ET.fromstring(svg.line_plot(_plot(series=(svg.Series("p", ((64.0, 3.0),)),))))
    assert root.findall("s:circle", NS)


def test_nice_ceiling() -> None:
    assert svg._nice_ceiling(0.41) == 0.5
    assert svg._nice_ceiling(347) == 500
    assert svg._nice_ceiling(0) == 1.0
    assert re.fullmatch(r"#[0-9a-f]{6}", svg.colour_for(3))
    assert svg.colour_for(0, failed=True) == svg.FAIL_COLOUR
