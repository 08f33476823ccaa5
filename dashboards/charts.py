"""Server-side SVG charts: time series (stacked bars or lines) and lanes of states, with axes and titles.

No script: the console's strict Content-Security-Policy needs nothing, the page is complete when it
arrives, and a screenshot or a screen reader sees what the operator sees. Colours come from CSS classes
(`dash-c-<key>`, custom properties in app.css) so the light and dark themes apply; the markup carries no
`style=` attribute. Every chart is drawn twice, wide and narrow, and the stylesheet shows the one that fits
the screen (SVG text scales with its box, so one drawing cannot stay legible on both a desktop and a phone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe


@dataclass(frozen=True)
class Series:
    """One coloured series: `key` names its colour class (dash-c-<key>); `dashed` draws a line dashed."""

    key: str
    label: str
    values: Sequence[float | None]
    dashed: bool = False


@dataclass(frozen=True)
class Segment:
    start: datetime
    end: datetime
    key: str  # colour class
    title: str


@dataclass(frozen=True)
class Lane:
    label: str
    segments: Sequence[Segment]


@dataclass(frozen=True)
class Size:
    width: int
    height: int
    left: int  # room for the value ticks (or the lane labels)
    time_ticks: int  # at most this many time labels
    font: int


WIDE = Size(width=560, height=220, left=52, time_ticks=6, font=11)  # half the content column
FULL = Size(width=1120, height=240, left=52, time_ticks=12, font=11)  # the whole content column
NARROW = Size(width=360, height=210, left=44, time_ticks=4, font=11)  # a phone
TOP, RIGHT, BOTTOM = 10, 10, 24


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value < 10 else f"{value:.0f}"


def nice_step(value: float, ticks: int = 4) -> float:
    """A round step (1, 2, 2.5 or 5 × 10^n) so that `ticks` steps reach at least `value` (1/ticks for nothing)."""
    if value <= 0:
        return 1.0 / ticks
    rough = value / ticks
    power = 10 ** math.floor(math.log10(rough))
    for factor in (1, 2, 2.5, 5, 10):
        if rough <= factor * power * (1 + 1e-9):
            return float(factor * power)
    return float(10 * power)


def nice_max(value: float, ticks: int = 4) -> float:
    """The top of a value axis at or above `value`, a whole number of round steps (1 for nothing)."""
    if value <= 0:
        return 1.0
    step = nice_step(value, ticks)
    return step * max(math.ceil(value / step - 1e-9), 1)


def count_label(value: float) -> str:
    if value >= 1_000_000:
        return f"{_num(value / 1_000_000)}M"
    if value >= 1000:
        return f"{_num(value / 1000)}k"
    return _num(value)


def ms_label(value: float) -> str:
    return f"{_num(value / 1000)} s" if value >= 1000 else f"{_num(value)} ms"


def percent_label(value: float) -> str:
    return f"{value * 100:.1f}".rstrip("0").rstrip(".") + "%"


# Time ticks: (step, label format) from the finest; the first that fits the size's tick count is used.
_TICK_STEPS = (
    (timedelta(minutes=5), "%H:%M"),
    (timedelta(minutes=10), "%H:%M"),
    (timedelta(minutes=15), "%H:%M"),
    (timedelta(minutes=30), "%H:%M"),
    (timedelta(hours=1), "%H:%M"),
    (timedelta(hours=3), "%H:%M"),
    (timedelta(hours=6), "%H:%M"),
    (timedelta(hours=12), "%d %b %H:%M"),
    (timedelta(days=1), "%a %d"),
    (timedelta(days=2), "%a %d"),
)


def time_ticks(since: datetime, until: datetime, most: int) -> list[tuple[datetime, str]]:
    """Round UTC moments in [since, until] with their labels, at most `most` of them."""
    length = until - since
    step, fmt = next(((st, f) for st, f in _TICK_STEPS if length / st <= most), _TICK_STEPS[-1])
    seconds = int(step.total_seconds())
    first = math.ceil(since.timestamp() / seconds) * seconds
    out = []
    t = first
    while t <= until.timestamp():
        moment = datetime.fromtimestamp(t, tz=UTC)
        out.append((moment, moment.strftime(fmt)))
        t += seconds
    return out


class _Frame:
    """Coordinates of one drawing: time on x over [since, until], values on y over [0, top]."""

    def __init__(self, size: Size, since: datetime, until: datetime, top: float, *, left: int | None = None) -> None:
        self.size = size
        self.since, self.until, self.top = since, until, top
        self.x0 = left if left is not None else size.left
        self.x1 = size.width - RIGHT
        self.y0, self.y1 = TOP, size.height - BOTTOM
        self.span = max((until - since).total_seconds(), 1.0)

    def x(self, moment: datetime) -> float:
        return self.x0 + (self.x1 - self.x0) * (moment - self.since).total_seconds() / self.span

    def y(self, value: float) -> float:
        return self.y1 - (self.y1 - self.y0) * min(value, self.top) / self.top

    def time_axis(self) -> list[str]:
        out = [f'<line class="dash-axis" x1="{self.x0}" y1="{self.y1}" x2="{self.x1}" y2="{self.y1}"/>']
        for moment, label in time_ticks(self.since, self.until, self.size.time_ticks):
            x = self.x(moment)
            # A label at either end is anchored inwards so it is not cut off by the drawing's edge.
            room = len(label) * self.size.font * 0.32
            anchor = "end" if x + room > self.size.width else "start" if x - room < 0 else "middle"
            out.append(f'<line class="dash-tick" x1="{x:.1f}" y1="{self.y1}" x2="{x:.1f}" y2="{self.y1 + 4}"/>')
            out.append(
                f'<text class="dash-label" x="{x:.1f}" y="{self.y1 + 15}" text-anchor="{anchor}">{escape(label)}</text>'
            )
        return out

    def value_axis(self, fmt: Callable[[float], str]) -> list[str]:
        out = []
        step = nice_step(self.top)
        count = max(round(self.top / step), 1)
        for i in range(count + 1):
            value = step * i
            y = self.y(value)
            out.append(f'<line class="dash-gridline" x1="{self.x0}" y1="{y:.1f}" x2="{self.x1}" y2="{y:.1f}"/>')
            out.append(
                f'<text class="dash-label" x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end">'
                f"{escape(fmt(value))}</text>"
            )
        return out


def _svg(size: Size, title: str, desc: str, body: list[str], variant: str) -> str:
    content = "".join(body)
    # A chart whose buckets are links is a group (an image may not hold interactive content).
    role = f'role="group" aria-label="{escape(title)}"' if "<a " in content else 'role="img"'
    return (
        f'<svg class="dash-svg dash-{variant}" viewBox="0 0 {size.width} {size.height}" {role} '
        f'font-size="{size.font}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>{content}</svg>"
    )


def _both(draw: Callable[[Size, str], str], wide: Size) -> SafeString:
    return mark_safe(draw(wide, "wide") + draw(NARROW, "narrow"))  # noqa: S308 - every text went through escape()


def time_chart(
    *,
    title: str,
    desc: str,
    buckets: Sequence[datetime],
    step: timedelta,
    series: Sequence[Series],
    stacked: bool,
    value_format: Callable[[float], str] = count_label,
    top: float | None = None,
    bucket_title: Callable[[int], str] | None = None,
    bucket_href: Callable[[int], str] | None = None,
    wide: Size = WIDE,
) -> SafeString:
    """A time series over `buckets` (each `step` wide): stacked bars, or lines with gaps where a value is None.

    `bucket_title(i)` gives a hover title per bucket, `bucket_href(i)` a link (the Request Logs of that bucket).
    """
    since, until = buckets[0], buckets[-1] + step
    if top is None:
        if stacked:
            peak = max((sum(s.values[i] or 0 for s in series) for i in range(len(buckets))), default=0)
        else:
            peak = max((v for s in series for v in s.values if v is not None), default=0)
        top = nice_max(peak)

    def draw(size: Size, variant: str) -> str:
        frame = _Frame(size, since, until, top)
        body = [*frame.value_axis(value_format)]
        width = (frame.x1 - frame.x0) / len(buckets)
        if stacked:
            gap = 1 if width > 3 else 0
            for i, moment in enumerate(buckets):
                base = 0.0
                x = frame.x(moment)
                for s in series:
                    value = s.values[i] or 0
                    if value <= 0:
                        continue
                    y_top, y_base = frame.y(base + value), frame.y(base)
                    body.append(
                        f'<rect class="dash-bar dash-c-{s.key}" x="{x:.2f}" y="{y_top:.2f}" '
                        f'width="{max(width - gap, 0.5):.2f}" height="{max(y_base - y_top, 0.5):.2f}"/>'
                    )
                    base += value
        else:
            for s in series:
                body.extend(_line(frame, buckets, step, s))
        body.extend(frame.time_axis())
        if variant == "wide" and (bucket_title or bucket_href):
            for i, moment in enumerate(buckets):
                hit = (
                    f'<rect class="dash-hit" x="{frame.x(moment):.2f}" y="{frame.y0}" width="{width:.2f}" '
                    f'height="{frame.y1 - frame.y0}">'
                    + (f"<title>{escape(bucket_title(i))}</title>" if bucket_title else "")
                    + "</rect>"
                )
                # Out of the Tab order: hundreds of bucket links would bury the page's other actions, and the
                # panel's own links lead to the same Request Logs.
                body.append(f'<a href="{escape(bucket_href(i))}" tabindex="-1">{hit}</a>' if bucket_href else hit)
        return _svg(size, title, desc, body, variant)

    return _both(draw, wide)


def _line(frame: _Frame, buckets: Sequence[datetime], step: timedelta, s: Series) -> list[str]:
    """Polylines through bucket centres, broken where a value is missing; a lone point is a dot."""
    runs: list[list[tuple[float, float]]] = [[]]
    for moment, value in zip(buckets, s.values, strict=True):
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((frame.x(moment + step / 2), frame.y(value)))
    dashed = " dash-dashed" if s.dashed else ""
    out = []
    for run in runs:
        if len(run) == 1:
            x, y = run[0]
            out.append(f'<circle class="dash-dot dash-c-{s.key}" cx="{x:.1f}" cy="{y:.1f}" r="2"/>')
        elif run:
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
            out.append(f'<polyline class="dash-line dash-c-{s.key}{dashed}" points="{points}"/>')
    return out


def lane_chart(
    *, title: str, desc: str, since: datetime, until: datetime, lanes: Sequence[Lane], wide: Size = WIDE
) -> SafeString:
    """One lane per subject (a circuit) with its segments as coloured stretches over [since, until].

    Wide: the label left of its lane. Narrow: the label above its lane, which then spans the whole width.
    """

    def draw(size: Size, variant: str) -> str:
        beside = variant == "wide"
        label_room = 170 if beside else 8
        bar, pitch = 14, (18 if beside else 32)
        chars = 26 if beside else 48
        height = TOP + pitch * len(lanes) + BOTTOM + 4
        sized = Size(size.width, height, label_room, size.time_ticks, size.font)
        frame = _Frame(sized, since, until, 1.0, left=label_room)
        body: list[str] = []
        for i, lane in enumerate(lanes):
            y = TOP + i * pitch
            bar_y = y + 2 if beside else y + 16
            label = lane.label if len(lane.label) <= chars else lane.label[: chars - 1] + "…"
            x, anchor, text_y = (label_room - 8, "end", y + 13) if beside else (frame.x0, "start", y + 11)
            body.append(
                f'<text class="dash-label dash-lane-label" x="{x}" y="{text_y}" text-anchor="{anchor}">'
                f"<title>{escape(lane.label)}</title>{escape(label)}</text>"
            )
            body.append(
                f'<rect class="dash-lane" x="{frame.x0}" y="{bar_y}" width="{frame.x1 - frame.x0}" height="{bar}"/>'
            )
            for seg in lane.segments:
                x_start = frame.x(max(seg.start, since))
                x_end = frame.x(min(seg.end, until))
                body.append(
                    f'<rect class="dash-bar dash-c-{seg.key}" x="{x_start:.2f}" y="{bar_y}" '
                    f'width="{max(x_end - x_start, 1.5):.2f}" height="{bar}">'
                    f"<title>{escape(seg.title)}</title></rect>"
                )
        frame.y1 = TOP + pitch * len(lanes) + 2
        body.extend(frame.time_axis())
        return _svg(sized, title, desc, body, variant)

    return _both(draw, wide)
