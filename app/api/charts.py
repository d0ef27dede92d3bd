"""Charts as inline SVG strings, drawn on the server: no script, nothing fetched.

Pure functions from numbers to markup. Every text that goes into the markup (titles, series
names, axis labels) is escaped here, so the result may be put into a page as it is
(``markupsafe.Markup``). A line chart takes one value per step of its x axis; ``None`` is a
gap (nothing measured there), drawn as a break in the line, and a point alone between gaps
is drawn as a dot so it stays visible.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 640
HEIGHT = 220
# Room around the plot for the y labels (left), the x labels (bottom) and the title (top).
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 28, 40
PALETTE = ("#0550ae", "#b42318", "#1a7f37", "#8250df", "#bc4c00", "#59636e")
AXIS = "#59636e"
GRID = "#d1d9e0"
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name (for the legend) and one value per x step (None: a gap)."""

    name: str
    values: Sequence[float | None]
    color: str = PALETTE[0]


@dataclass(frozen=True, slots=True)
class Bar:
    """One horizontal bar: a label, a value, and a text shown after the value."""

    label: str
    value: float
    note: str = ""
    color: str = PALETTE[0]


def text(value: object) -> str:
    """``value`` as text safe inside an SVG element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def number(value: float) -> str:
    """``value`` briefly: whole numbers without decimals, others with one."""
    if float(value).is_integer():
        return f"{int(value):,}".replace(",", "\u202f")
    return f"{value:.1f}"


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value`` (1 for
    nothing), so the y axis ends on a round number."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def _svg(title: str, width: int, height: int, body: list[str]) -> str:
    """The ``<svg>`` element, sized by its viewBox, titled for screen readers and tooltips."""
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{text(title)}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" {_FONT}><title>{text(title)}</title>'
        f'<text class="chart-title" x="{LEFT}" y="16" font-size="13" font-weight="600">'
        f"{text(title)}</text>" + "".join(body) + "</svg>"
    )


def empty_chart(title: str, message: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    """A chart frame that says why there is nothing to draw."""
    return _svg(
        title,
        width,
        height,
        [
            f'<text class="empty" x="{width // 2}" y="{height // 2}" text-anchor="middle" '
            f'fill="{AXIS}">{text(message)}</text>'
        ],
    )


@dataclass(frozen=True, slots=True)
class _Plot:
    """Where values land: the plot area in pixels and the largest value on the y axis."""

    width: int
    height: int
    steps: int
    y_max: float

    def x(self, index: int) -> float:
        span = self.width - LEFT - RIGHT
        return LEFT + (span * index / (self.steps - 1) if self.steps > 1 else span / 2)

    def y(self, value: float) -> float:
        span = self.height - TOP - BOTTOM
        return TOP + span * (1 - min(value, self.y_max) / self.y_max)


def _runs(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """The stretches of ``values`` without a gap, each as (index, value) pairs."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((index, value))
    if current:
        runs.append(current)
    return runs


def _line(plot: _Plot, series: Series) -> str:
    """One series: a path with a move at each gap, and a dot for each point alone."""
    paths, dots = [], []
    for run in _runs(series.values):
        if len(run) == 1:
            index, value = run[0]
            dots.append(
                f'<circle cx="{plot.x(index):.1f}" cy="{plot.y(value):.1f}" r="2.5" '
                f'fill="{text(series.color)}"/>'
            )
            continue
        points = " L".join(f"{plot.x(i):.1f} {plot.y(v):.1f}" for i, v in run)
        paths.append(f"M{points}")
    drawn = "".join(dots)
    if paths:
        drawn = (
            f'<path class="series" d="{" ".join(paths)}" fill="none" '
            f'stroke="{text(series.color)}" stroke-width="1.5" stroke-linejoin="round"/>' + drawn
        )
    return f'<g class="series-group" data-series="{text(series.name)}">{drawn}</g>'


def _y_axis(plot: _Plot, unit: str) -> list[str]:
    """The y axis: a grid line and a label at 0, half and the top."""
    parts = []
    for fraction in (0.0, 0.5, 1.0):
        value = plot.y_max * fraction
        y = plot.y(value)
        parts.append(
            f'<line x1="{LEFT}" x2="{plot.width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{GRID}"/><text class="y-label" x="{LEFT - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end" fill="{AXIS}">{text(number(value) + unit)}</text>'
        )
    bottom = plot.height - BOTTOM
    parts.append(
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}" stroke="{AXIS}"/>'
        f'<line class="axis" x1="{LEFT}" x2="{plot.width - RIGHT}" y1="{bottom}" '
        f'y2="{bottom}" stroke="{AXIS}"/>'
    )
    return parts


def _x_labels(plot: _Plot, labels: Sequence[tuple[int, str]]) -> list[str]:
    y = plot.height - BOTTOM + 14
    # A label on the last step ends there, so the chart's edge does not cut it.
    return [
        f'<text class="x-label" x="{plot.x(index):.1f}" y="{y}" '
        f'text-anchor="{"end" if index == plot.steps - 1 else "middle"}" '
        f'fill="{AXIS}">{text(label)}</text>'
        for index, label in labels
    ]


def _legend(plot: _Plot, series: Sequence[Series]) -> list[str]:
    parts, x = [], LEFT
    y = plot.height - 10
    for one in series:
        parts.append(
            f'<rect x="{x}" y="{y - 8}" width="10" height="10" fill="{text(one.color)}"/>'
            f'<text class="legend" x="{x + 14}" y="{y + 1}">{text(one.name)}</text>'
        )
        x += 24 + 7 * len(one.name)
    return parts


def line_chart(
    title: str,
    series: Sequence[Series],
    x_labels: Sequence[tuple[int, str]],
    *,
    unit: str = "",
    y_max: float | None = None,
    size: tuple[int, int] = (WIDTH, HEIGHT),
) -> str:
    """Lines over equal x steps, labelled at the (index, text) pairs of ``x_labels``; the y
    axis runs from 0 to ``y_max`` (default: a round number above the largest value)."""
    measured = [v for one in series for v in one.values if v is not None]
    if not measured:
        return empty_chart(title, "no data in this period", *size)
    steps = max(len(one.values) for one in series)
    width, height = size
    plot = _Plot(width, height, steps, y_max or nice_ceiling(max(measured)))
    body = [
        *_y_axis(plot, unit),
        *_x_labels(plot, x_labels),
        *(_line(plot, one) for one in series),
        *_legend(plot, series),
    ]
    return _svg(title, width, height, body)


def bar_chart(
    title: str,
    bars: Sequence[Bar],
    *,
    unit: str = "",
    width: int = 480,
    full: float | None = None,
) -> str:
    """Horizontal bars, one row each, scaled to the largest value (a round number), or to
    ``full`` when a bar has a most it can be (100 for a percentage): each bar then runs on a
    grey track that shows the whole."""
    if not bars:
        return empty_chart(title, "nothing to show", width, 80)
    row, label_width = 22, 130
    height = TOP + row * len(bars) + 8
    top = full or nice_ceiling(max(bar.value for bar in bars))
    values = [number(bar.value) + unit + (f" {bar.note}" if bar.note else "") for bar in bars]
    # Room after the bars for the longest value text (about 6.5 px a character).
    span = max(60, width - label_width - 12 - round(6.5 * max(len(v) for v in values)))
    parts = []
    for n, (bar, value) in enumerate(zip(bars, values, strict=True)):
        y = TOP + n * row
        length = span * min(max(bar.value, 0), top) / top
        after = label_width + (span if full else length) + 6
        track = (
            f'<rect class="track" x="{label_width}" y="{y + 3}" width="{span}" height="14" '
            f'fill="{GRID}"/>'
            if full
            else ""
        )
        parts.append(
            f'<g class="bar" data-label="{text(bar.label)}">'
            f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{text(bar.label)}</text>'
            f'{track}<rect x="{label_width}" y="{y + 3}" width="{length:.1f}" height="14" '
            f'fill="{text(bar.color)}"/><text x="{after:.1f}" '
            f'y="{y + 14}" fill="{AXIS}">{text(value)}</text></g>'
        )
    return _svg(title, width, height, parts)
