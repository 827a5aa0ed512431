"""A small SVG line-plot writer: log-scaled x, linear y, series, reference lines, a legend.

Written by hand instead of taking matplotlib as a dependency: the controller
install stays free of numpy/matplotlib (tens of MB), the output is a few KB
of inline SVG a browser draws without scripts, and every string that reaches
the markup goes through one escape function. See docs/design.md, "Reports".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

# Colour-blind-safe palette (Okabe-Ito); failing series are drawn in FAIL_COLOUR.
PALETTE = ("#0072b2", "#009e73", "#e69f00", "#56b4e9", "#cc79a7", "#f0e442", "#000000")
FAIL_COLOUR = "#d62728"
THRESHOLD_COLOUR = "#7f7f7f"
REFERENCE_COLOUR = "#9467bd"


def esc(value: object) -> str:
    """Escape text for SVG/HTML element content and quoted attribute values."""
    return escape(str(value), quote=True)


@dataclass(frozen=True, slots=True)
class Series:
    """One line: points (x, y), a label for the legend, a colour and a dash pattern."""

    label: str
    points: tuple[tuple[float, float], ...]
    colour: str = PALETTE[0]
    dashed: bool = False
    css_class: str = "series"


@dataclass(frozen=True, slots=True)
class HLine:
    """A horizontal reference line across the plot (a threshold)."""

    label: str
    y: float
    colour: str = THRESHOLD_COLOUR


@dataclass(frozen=True, slots=True)
class Plot:
    """What to draw; ``line_plot`` turns it into SVG markup."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    hlines: tuple[HLine, ...] = ()
    x_format: Callable[[float], str] = lambda v: f"{v:g}"
    width: int = 720
    height: int = 360


_MARGIN_L, _MARGIN_R, _MARGIN_T, _MARGIN_B = 64, 16, 32, 48


def line_plot(plot: Plot) -> str:
    """Render ``plot`` as a standalone ``<svg>`` element (x axis log2, y axis linear from 0)."""
    xs = [x for s in plot.series for x, _ in s.points if x > 0]
    ys = [y for s in plot.series for _, y in s.points] + [h.y for h in plot.hlines]
    inner_w = plot.width - _MARGIN_L - _MARGIN_R
    inner_h = plot.height - _MARGIN_T - _MARGIN_B
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" '
             f'width="{plot.width}" height="{plot.height}" '
             f'viewBox="0 0 {plot.width} {plot.height}">',
             f"<title>{esc(plot.title)}</title>",
             f'<text class="plot-title" x="{_MARGIN_L}" y="18" font-size="14" '
             f'font-weight="bold">{esc(plot.title)}</text>']
    if not xs:
        parts.append(f'<text x="{plot.width // 2}" y="{plot.height // 2}" text-anchor="middle">'
                     "no measurements</text></svg>")
        return "".join(parts)
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    y_top = _nice_ceiling(max(ys) if ys else 1.0)

    def px(x: float) -> float:
        return _MARGIN_L + (math.log2(x) - lo) / (hi - lo) * inner_w

    def py(y: float) -> float:
        return _MARGIN_T + inner_h - (max(y, 0.0) / y_top) * inner_h

    parts.append(_axes(plot, lo, hi, y_top, px, py, inner_w, inner_h))
    for h in plot.hlines:
        y = py(h.y)
        parts.append(f'<line class="hline" x1="{_MARGIN_L}" x2="{_MARGIN_L + inner_w}" '
                     f'y1="{y:.1f}" y2="{y:.1f}" stroke="{esc(h.colour)}" stroke-width="1.5" '
                     f'stroke-dasharray="6 4"><title>{esc(h.label)}</title></line>')
    for s in plot.series:
        pts = sorted((x, y) for x, y in s.points if x > 0)
        if not pts:
            continue
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="3 3"' if s.dashed else ""
        parts.append(f'<polyline class="{esc(s.css_class)}" fill="none" stroke="{esc(s.colour)}" '
                     f'stroke-width="2"{dash} points="{coords}">'
                     f"<title>{esc(s.label)}</title></polyline>")
        parts.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{esc(s.colour)}">'
                     f"<title>{esc(s.label)}: {esc(plot.x_format(x))}, {y:.3g}</title></circle>"
                     for x, y in pts)
    parts.append(_legend(plot))
    parts.append("</svg>")
    return "".join(parts)


def _axes(plot: Plot, lo: float, hi: float, y_top: float, px: Callable[[float], float],
          py: Callable[[float], float], inner_w: int, inner_h: int) -> str:
    out = [f'<rect x="{_MARGIN_L}" y="{_MARGIN_T}" width="{inner_w}" height="{inner_h}" '
           'fill="none" stroke="#ccc"/>']
    step = max(1, math.ceil((hi - lo) / 8))
    for e in range(math.ceil(lo), math.floor(hi) + 1, step):
        x = px(2.0 ** e)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_MARGIN_T}" y2="{_MARGIN_T + inner_h}" '
                   'stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{_MARGIN_T + inner_h + 16}" font-size="11" '
                   f'text-anchor="middle">{esc(plot.x_format(2.0 ** e))}</text>')
    for i in range(6):
        v = y_top * i / 5
        y = py(v)
        out.append(f'<line x1="{_MARGIN_L}" x2="{_MARGIN_L + inner_w}" y1="{y:.1f}" '
                   f'y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{_MARGIN_L - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{v:.3g}</text>')
    out.append(f'<text x="{_MARGIN_L + inner_w / 2:.0f}" y="{plot.height - 8}" font-size="12" '
               f'text-anchor="middle">{esc(plot.x_label)}</text>')
    out.append(f'<text transform="translate(14 {_MARGIN_T + inner_h / 2:.0f}) rotate(-90)" '
               f'font-size="12" text-anchor="middle">{esc(plot.y_label)}</text>')
    return "".join(out)


def _legend(plot: Plot) -> str:
    entries = [(s.label, s.colour, s.dashed) for s in plot.series]
    entries += [(h.label, h.colour, True) for h in plot.hlines]
    out = []
    for i, (label, colour, dashed) in enumerate(entries[:12]):
        y = _MARGIN_T + 14 + 16 * i
        x = _MARGIN_L + 10
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        out.append(f'<line x1="{x}" x2="{x + 20}" y1="{y - 4}" y2="{y - 4}" '
                   f'stroke="{esc(colour)}" stroke-width="2"{dash}/>'
                   f'<text x="{x + 26}" y="{y}" font-size="11">{esc(label)}</text>')
    return '<g class="legend">' + "".join(out) + "</g>"


def _nice_ceiling(value: float) -> float:
    """The next 1/2/5 x 10^k at or above ``value`` (a readable top for the y axis)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = math.floor(math.log10(value))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = m * 10.0 ** exp
        if top >= value * 1.0001:
            return top
    return 10.0 ** (exp + 1)


def colour_for(index: int, *, failed: bool = False) -> str:
    """The palette colour of the index-th series, or the failure colour."""
    return FAIL_COLOUR if failed else PALETTE[index % len(PALETTE)]


def series_from(label: str, points: Sequence[tuple[float, float]], *, index: int,
                failed: bool = False) -> Series:
    """A Series coloured by position, red when it failed."""
    return Series(label=label, points=tuple(points), colour=colour_for(index, failed=failed),
                  css_class="series fail" if failed else "series")
