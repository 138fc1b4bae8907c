"""Small inline SVG charts (line charts and scatter plots) generated in Python: no JavaScript, no network.

Each chart is one ``<svg>`` element with ``data-chart`` naming it, a title, axes with ticks, and one
``<polyline>`` (line) or ``<circle>`` (point) per series member, so a browser, a DOM dump or a test can
find the plots.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 60, 170, 30, 45
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

Point = tuple[float, float]


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.2e}"


class _Frame:
    def __init__(self, xs: Sequence[float], ys: Sequence[float], *, pad: float = 0.0) -> None:
        self.x0, self.x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
        self.y0, self.y1 = (min(0.0, *ys), max(ys)) if ys else (0.0, 1.0)
        if self.x1 == self.x0:
            self.x1 = self.x0 + 1
        if self.y1 == self.y0:
            self.y1 = self.y0 + 1
        # room around the data, so markers and their labels stay inside the plot
        dx, dy = (self.x1 - self.x0) * pad, (self.y1 - self.y0) * pad
        self.x0, self.x1, self.y1 = self.x0 - dx, self.x1 + dx, self.y1 + dy

    def x(self, value: float) -> float:
        return LEFT + (value - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return HEIGHT - BOTTOM - (value - self.y0) / (self.y1 - self.y0) * (HEIGHT - TOP - BOTTOM)

    def axes(self, x_label: str, y_label: str) -> list[str]:
        parts = [
            f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" '
            f'y2="{HEIGHT - BOTTOM}" stroke="#333"/>',
            f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#333"/>',
        ]
        for tick in _ticks(self.x0, self.x1):
            x = self.x(tick)
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" font-size="11" text-anchor="middle">'
                f"{_label(tick)}</text>"
            )
        for tick in _ticks(self.y0, self.y1):
            y = self.y(tick)
            parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
            parts.append(
                f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_label(tick)}</text>'
            )
        parts.append(
            f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" font-size="12" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
        parts.append(
            f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})">{escape(y_label)}</text>'
        )
        return parts


def _svg(chart_id: str, title: str, body: list[str]) -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" data-chart="{escape(chart_id)}" width="{WIDTH}" '
            f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title>",
            '<rect width="100%" height="100%" fill="white"/>',
            f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
            *body,
            "</svg>",
        ]
    )


def _legend(index: int, name: str, color: str, dashed: bool = False) -> list[str]:
    y = TOP + 10 + index * 18
    x = WIDTH - RIGHT + 12
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    return [
        f'<line x1="{x}" y1="{y}" x2="{x + 20}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/>',
        f'<text class="legend" x="{x + 26}" y="{y + 4}" font-size="11">{escape(legend_label(name))}'
        f"<title>{escape(name)}</title></text>",
    ]


LEGEND_CHARS = 22
"""What fits between the plot and the chart's right edge at font size 11 (``recorded: desired pods`` does)."""


def legend_label(name: str) -> str:
    """``name`` cut to fit the legend, keeping its end: runs of a sweep differ in their last words
    (the repetition, the node count), and a label cut at the end would make them all look alike."""
    if len(name) <= LEGEND_CHARS:
        return name
    tail = LEGEND_CHARS * 2 // 3
    return f"{name[: LEGEND_CHARS - tail - 1]}…{name[-tail:]}"


def line_chart(
    chart_id: str,
    title: str,
    lines: Mapping[str, Sequence[Point]],
    *,
    x_label: str,
    y_label: str,
    dashed: Sequence[str] = (),
) -> str:
    """One polyline per entry of ``lines`` (drawn as steps: the value holds until the next point)."""
    xs = [x for points in lines.values() for x, _ in points]
    ys = [y for points in lines.values() for _, y in points]
    frame = _Frame(xs, ys)
    body = frame.axes(x_label, y_label)
    for index, (name, points) in enumerate(lines.items()):
        color = PALETTE[index % len(PALETTE)]
        steps: list[str] = []
        for i, (x, y) in enumerate(points):
            if i:
                steps.append(f"{frame.x(x):.1f},{frame.y(points[i - 1][1]):.1f}")
            steps.append(f"{frame.x(x):.1f},{frame.y(y):.1f}")
        dash = ' stroke-dasharray="5 3"' if name in dashed else ""
        body.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{color}" '
            f'stroke-width="2"{dash} points="{" ".join(steps)}"/>'
        )
        body.extend(_legend(index, name, color, name in dashed))
    return _svg(chart_id, title, body)


def scatter_chart(
    chart_id: str,
    title: str,
    points: Mapping[str, Point],
    frontier: Sequence[str],
    *,
    x_label: str,
    y_label: str,
    short_names: Mapping[str, str] | None = None,
) -> str:
    """Every point as a circle, the frontier's points filled and joined by a line; each point is
    labelled with its short name (default: its name) and carries its full name as a tooltip."""
    frame = _Frame([p[0] for p in points.values()], [p[1] for p in points.values()], pad=0.1)
    body = frame.axes(x_label, y_label)
    path = " ".join(f"{frame.x(points[k][0]):.1f},{frame.y(points[k][1]):.1f}" for k in frontier)
    if path:
        body.append(
            f'<polyline class="frontier" fill="none" stroke="#d62728" stroke-width="2" points="{path}"/>'
        )
    for name, (x, y) in points.items():
        on = name in frontier
        body.append(
            f'<circle class="point{" on-frontier" if on else ""}" data-config="{escape(name)}" '
            f'cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="6" fill="{"#d62728" if on else "white"}" '
            f'stroke="#d62728"><title>{escape(name)}: ({x:g}, {y:g})</title></circle>'
        )
        body.append(
            f'<text class="point-label" x="{frame.x(x) + 9:.1f}" y="{frame.y(y) - 8:.1f}" '
            f'font-size="11">{escape((short_names or {}).get(name, name))}</text>'
        )
    body.extend(_legend(0, "Pareto frontier", "#d62728"))
    return _svg(chart_id, title, body)
