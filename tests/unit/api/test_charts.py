"""SVG charts: well-formed markup with axes and labels, every text escaped, and the edge
cases a dashboard meets (no data, one point, gaps)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from app.api.charts import (
    HEIGHT,
    TOP,
    WIDTH,
    Bar,
    Series,
    bar_chart,
    empty_chart,
    line_chart,
    nice_ceiling,
    number,
)

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert(\"x\")</script> & 'quoted'"


def parse(svg: str) -> ET.Element:
    """The chart as XML: parsing fails on anything unescaped."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element, css_class: str | None = None) -> list[str]:
    return [
        "".join(e.itertext())
        for e in root.iter(f"{SVG}text")
        if css_class is None or e.get("class") == css_class
    ]


def path_moves(root: ET.Element) -> list[int]:
    """For each series path, how many stretches it draws (one "M" each)."""
    return [p.get("d", "").count("M") for p in root.iter(f"{SVG}path")]


def test_a_line_chart_has_axes_labels_a_legend_and_a_line_per_series() -> None:
    sent = Series("SMS", [0, 5, 10, 7], color="#0550ae")
    failed = Series("EMAIL", [1, 1, 2, 0], color="#b42318")
    root = parse(line_chart("Deliveries", [sent, failed], [(0, "00:00"), (3, "00:03")]))

    assert root.get("viewBox") == f"0 0 {WIDTH} {HEIGHT}"
    assert texts(root, "chart-title") == ["Deliveries"]
    assert root.find(f"{SVG}title") is not None
    assert len([e for e in root.iter(f"{SVG}line") if e.get("class") == "axis"]) == 2
    # The y axis ends on a round number above the largest value, labelled at 0, half, top.
    assert texts(root, "y-label") == ["0", "5", "10"]
    assert texts(root, "x-label") == ["00:00", "00:03"]
    assert texts(root, "legend") == ["SMS", "EMAIL"]
    assert path_moves(root) == [1, 1]
    # The largest value touches the top of the plot, 0 its bottom.
    points = re.findall(r"([\d.]+) ([\d.]+)", root.find(f".//{SVG}path").get("d", ""))  # type: ignore[union-attr]
    ys = [float(y) for _, y in points]
    assert min(ys) == pytest.approx(TOP)
    assert max(ys) > min(ys)


def test_a_unit_and_a_fixed_top_label_the_y_axis() -> None:
    root = parse(line_chart("Failure rate", [Series("SMS", [0, 25.0])], [], unit=" %", y_max=100))
    assert texts(root, "y-label") == ["0 %", "50 %", "100 %"]


def test_every_text_is_escaped() -> None:
    chart = line_chart(
        HOSTILE, [Series(HOSTILE, [1, 2], color='"/><script>')], [(0, HOSTILE)], unit=HOSTILE
    )
    bars = bar_chart(HOSTILE, [Bar(HOSTILE, 3, note=HOSTILE, color="<b>")])
    empty = empty_chart(HOSTILE, HOSTILE)
    for svg in (chart, bars, empty):
        assert "<script" not in svg
        root = parse(svg)
        assert HOSTILE in texts(root)[0]  # the title, read back as the text it was
        assert all(HOSTILE in t for t in texts(root) if "script" in t)
    assert HOSTILE in texts(parse(chart), "legend")
    assert HOSTILE in texts(parse(chart), "x-label")


def test_a_chart_without_data_says_so() -> None:
    for series in ([], [Series("SMS", [])], [Series("SMS", [None, None])]):
        root = parse(line_chart("Deliveries", series, [(0, "00:00")]))
        assert texts(root, "empty") == ["no data in this period"]
        assert list(root.iter(f"{SVG}path")) == []
    assert texts(parse(bar_chart("Circuits", [])), "empty") == ["nothing to show"]


def test_one_point_is_a_dot() -> None:
    root = parse(line_chart("Dead letters", [Series("all", [None, 4, None])], []))
    assert list(root.iter(f"{SVG}path")) == []
    [dot] = root.iter(f"{SVG}circle")
    assert float(dot.get("cx", 0)) > 0


def test_a_single_step_sits_in_the_middle() -> None:
    [dot] = parse(line_chart("One", [Series("all", [3])], [])).iter(f"{SVG}circle")
    assert float(dot.get("cx", 0)) > WIDTH / 3


def test_gaps_break_the_line_and_leave_lone_points_as_dots() -> None:
    values: list[float | None] = [1, 2, None, None, 3, 4, 5, None, 6]
    root = parse(line_chart("Failure rate", [Series("SMS", values)], []))
    assert path_moves(root) == [2]  # 1-2 and 3-4-5
    assert len(list(root.iter(f"{SVG}circle"))) == 1  # 6 alone


def test_bars_scale_to_the_largest_value() -> None:
    root = parse(bar_chart("Lag", [Bar("HIGH", 50), Bar("LOW", 100, note="oldest 2 s")]))
    widths = [float(r.get("width", 0)) for r in root.iter(f"{SVG}rect")]
    assert widths[1] == pytest.approx(2 * widths[0])
    assert "100 oldest 2 s" in texts(root)


def test_round_numbers() -> None:
    assert [nice_ceiling(v) for v in (0, 0.3, 1, 3, 7, 11, 240, 1001)] == [
        1, 0.5, 1, 5, 10, 20, 250, 2000,
    ]  # fmt: skip
    assert number(3.0) == "3"
    assert number(2.25) == "2.2"
    assert number(12345) == "12\u202f345"
