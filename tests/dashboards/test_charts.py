"""The SVG renderer: round axes, UTC time ticks, both sizes, escaped text, colours by class only."""

import re
from datetime import UTC, datetime, timedelta

from dashboards.charts import (
    Lane,
    Segment,
    Series,
    count_label,
    lane_chart,
    ms_label,
    nice_max,
    percent_label,
    time_chart,
    time_ticks,
)

T = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_value_axis_tops_are_round():
    assert [nice_max(v) for v in (0, 3, 7, 180, 199, 201, 0.05)] == [1.0, 3.0, 8.0, 200.0, 200.0, 300.0, 0.06]


def test_value_labels():
    assert [count_label(v) for v in (0, 50, 1500, 2_000_000)] == ["0", "50", "1.5k", "2M"]
    assert [ms_label(v) for v in (0, 250, 1250, 30000)] == ["0 ms", "250 ms", "1.25 s", "30 s"]
    assert [percent_label(v) for v in (0, 0.0125, 0.25, 1)] == ["0%", "1.2%", "25%", "100%"]


def test_time_ticks_are_round_utc_moments():
    hour = time_ticks(T, T + timedelta(hours=1), 6)
    week = time_ticks(T, T + timedelta(days=7), 8)

    assert [label for _, label in hour] == ["10:00", "10:10", "10:20", "10:30", "10:40", "10:50", "11:00"]
    assert [label for _, label in week] == ["Wed 02", "Thu 03", "Fri 04", "Sat 05", "Sun 06", "Mon 07", "Tue 08"]
    assert all(moment.tzinfo is UTC for moment, _ in week)


def test_stacked_chart_draws_each_value_in_both_sizes():
    buckets = [T + timedelta(minutes=i) for i in range(3)]

    svg = time_chart(
        title="Requests",
        desc="three minutes",
        buckets=buckets,
        step=timedelta(minutes=1),
        series=[Series("primary", "Primary", [5, 0, 2]), Series("step1", "Step 1", [1, 3, 0])],
        stacked=True,
        bucket_title=lambda i: f"minute {i}",
        bucket_href=lambda i: f"/logs/?i={i}&x=1",
    )

    assert svg.count("<svg ") == 2 and 'class="dash-svg dash-wide"' in svg and 'class="dash-svg dash-narrow"' in svg
    assert svg.count('class="dash-bar dash-c-primary"') == 4  # two non-zero values, twice
    assert svg.count('class="dash-bar dash-c-step1"') == 4
    assert svg.count('<a href="/logs/?i=1&amp;x=1" tabindex="-1">') == 1  # links in the wide drawing only
    assert 'role="group" aria-label="Requests"' in svg  # an image role may not hold links
    assert "<title>minute 2</title>" in svg
    assert "<title>Requests</title><desc>three minutes</desc>" in svg
    assert "style=" not in svg and "fill=" not in svg and "stroke=" not in svg


def test_line_chart_breaks_at_missing_values():
    buckets = [T + timedelta(minutes=i) for i in range(5)]

    svg = time_chart(
        title="Latency",
        desc="",
        buckets=buckets,
        step=timedelta(minutes=1),
        series=[Series("lat", "p95", [100, 120, None, 90, None], dashed=True)],
        stacked=False,
        value_format=ms_label,
    )

    wide = svg.split("</svg>")[0]
    assert len(re.findall(r'<polyline class="dash-line dash-c-lat dash-dashed"', wide)) == 1
    assert len(re.findall(r'<circle class="dash-dot dash-c-lat"', wide)) == 1  # the lone 90
    assert ">150 ms</text>" in wide and ">100 ms</text>" in wide  # round steps of 50 up to the top over 120


def test_lane_chart_escapes_names_and_titles_segments():
    lanes = [Lane("<b>prov</b> / m", [Segment(T, T + timedelta(minutes=6), "open", "open 10:00–10:06 UTC")])]

    svg = lane_chart(title="Circuits", desc="", since=T, until=T + timedelta(hours=1), lanes=lanes)

    assert "<b>" not in svg and "&lt;b&gt;prov&lt;/b&gt; / m" in svg
    assert svg.count('class="dash-bar dash-c-open"') == 2
    assert "<title>open 10:00–10:06 UTC</title>" in svg
