"""A belief timeline as one self-contained HTML file with inline SVG swimlanes.

No scripts, fonts, stylesheets or images from anywhere else: the file opens
offline and can be attached to a bug report.  Per watched path, one lane for
the server's truth and one per host, zoomed to where they disagree (the
whole run folded below); stalls (a host trusting a cached answer the
server contradicts) are red bars, with the rule behind each written under
the lanes; the related trace events are listed below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ._timeline import SERVER, Timeline

COLOURS = {"present": "#2e7d32", "absent": "#546e7a", "unknown": "#e0e0e0"}
STALL = "#d32f2f"
LANE_H, LANE_GAP, LABEL_W, PLOT_W, AXIS_H = 22, 6, 110, 860, 26
MAX_EVENTS = 2000
ZOOM_MARGIN = 0.1  # of the disagreement's span, each side


def _ticks(low: float, high: float) -> list[float]:
    """About eight round tick positions from ``low`` to ``high``."""
    if high <= low:
        return [low]
    raw = (high - low) / 8
    step = 1.0
    for candidate in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300,
                      600, 1800, 3600):
        step = candidate
        if candidate >= raw:
            break
    first = math.ceil(low / step - 1e-9)
    count = int((high - low) / step) + 1
    return [round(index * step, 6) for index in range(first, first + count + 1)
            if low - 1e-9 <= index * step <= high + 1e-9]


def zoom_window(timeline: Timeline, path: str) -> tuple[float, float]:
    """Where ``path``'s beliefs and the server disagree, with a margin; else the whole run.

    A 30 s stall in a 600 s run is a sliver of a lane drawn over the whole
    run: each path is drawn over this window first, the whole run below it.
    """
    stalls = [stall for stall in timeline.stalls() if stall.path == path]
    if not stalls or timeline.end <= 0:
        return 0.0, timeline.end
    start = min(stall.start for stall in stalls)
    end = max(stall.end for stall in stalls)
    margin = max((end - start) * ZOOM_MARGIN, 0.5)
    return max(0.0, start - margin), min(timeline.end, end + margin)


def _svg(timeline: Timeline, path: str, window: tuple[float, float] | None = None) -> str:
    hosts = [SERVER, *timeline.hosts]
    height = AXIS_H + len(hosts) * (LANE_H + LANE_GAP)
    width = LABEL_W + PLOT_W + 10
    low, high = window if window is not None else (0.0, timeline.end)
    scale = PLOT_W / (high - low) if high > low else 0.0

    def x(seconds: float) -> float:
        return round(LABEL_W + (min(max(seconds, low), high) - low) * scale, 2)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="lanes" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="belief timeline of {escape(path)}">']
    for tick in _ticks(low, high):
        parts.append(f'<line x1="{x(tick)}" y1="0" x2="{x(tick)}" y2="{height - AXIS_H}" '
                     'stroke="#bdbdbd" stroke-width="0.5"/>')
        parts.append(f'<text x="{x(tick)}" y="{height - 8}" font-size="10" '
                     f'text-anchor="middle">{round(tick, 6):g} s</text>')
    stalls = [stall for stall in timeline.stalls() if stall.path == path]
    for row, host in enumerate(hosts):
        top = row * (LANE_H + LANE_GAP)
        parts.append(f'<text x="4" y="{top + LANE_H - 6}" font-size="12" '
                     f'font-weight="{"bold" if host == SERVER else "normal"}">'
                     f'{escape(host)}</text>')
        for interval in timeline.lane(host, path).intervals:
            if interval.end < low or interval.start > high:
                continue
            tip = (f"{host}: {interval.believes} {interval.start:.3f}-{interval.end:.3f} s"
                   + ("" if host == SERVER else f" ({interval.because})"))
            parts.append(
                f'<rect class="belief" data-host="{escape(host)}" '
                f'data-believes="{interval.believes}" data-start="{interval.start:.6f}" '
                f'data-end="{interval.end:.6f}" x="{x(interval.start)}" y="{top}" '
                f'width="{max(x(interval.end) - x(interval.start), 0.5):.2f}" '
                f'height="{LANE_H}" fill="{COLOURS.get(interval.believes, "#9e9e9e")}">'
                f'<title>{escape(tip)}</title></rect>')
        for stall in (s for s in stalls if s.host == host and s.end >= low and s.start <= high):
            parts.append(
                f'<rect class="stall" data-host="{escape(host)}" data-start="{stall.start:.6f}" '
                f'data-end="{stall.end:.6f}" x="{x(stall.start)}" y="{top + LANE_H - 5}" '
                f'width="{max(x(stall.end) - x(stall.start), 0.5):.2f}" height="5" '
                f'fill="{STALL}"><title>{escape(stall.format())}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(timeline: Timeline, *, title: str, paths: Sequence[str] | None = None,
                context: str = "") -> str:
    """The whole report as one HTML document (inline SVG and CSS only).

    Args:
        timeline: what ``BeliefRecorder.timeline()`` returned.
        title: the page's heading, e.g. the scenario and its seed.
        paths: the watched paths to draw, in order (default: all of them).
        context: what the recorded run was (a scenario's variant, layout and
            direction), shown under the heading.
    """
    shown = list(timeline.paths if paths is None else paths)
    every_stall = timeline.stalls()
    stalls = [stall for stall in every_stall if stall.path in shown]
    legend = " ".join(
        f'<span class="key" style="background:{colour}"></span>{name}'
        for name, colour in [*COLOURS.items(), ("stall", STALL)])
    body = [f"<h1>{escape(title)}</h1>"]
    if context:
        body.append(f'<p class="context">{escape(context)}</p>')
    body.append(f'<p class="counts">{len(shown)} of {len(timeline.paths)} paths shown '
                f"(those with stalls first); {len(stalls)} of {len(every_stall)} stalls "
                "shown.</p>")
    body.append(f"<p>Virtual time 0-{timeline.end:.3f} s. Each host's belief comes from its "
                "own caches (no RPC); the server's truth is the first lane. A red bar marks "
                "a stall: a cached answer the server contradicted; the rule that kept it "
                "trusted is written under the lanes. Each path is drawn where its hosts and "
                f"the server disagree; the whole run is one click below. {legend}</p>")
    for path in shown:
        window = zoom_window(timeline, path)
        zoomed = window != (0.0, timeline.end)
        body.append(f"<h2>{escape(path)}"
                    + (f" <small>({window[0]:.3f}-{window[1]:.3f} s)</small>" if zoomed
                       else "") + "</h2>")
        body.append(_svg(timeline, path, window))
        own = [stall for stall in stalls if stall.path == path]
        if own:
            body.append('<ul class="rules">')
            body.extend(f"<li>{escape(stall.format())}</li>" for stall in own)
            body.append("</ul>")
        if zoomed:
            body.append(f"<details><summary>the whole run, 0-{timeline.end:.3f} s</summary>"
                        f"{_svg(timeline, path)}</details>")
    events = [event for event in timeline.events
              if any(event.path == path or path.startswith(event.path + "/")
                     or event.path.startswith(path + "/") for path in shown)]
    body.append(f"<h2>Trace ({len(events)} events on these paths"
                + (f", first {MAX_EVENTS} shown" if len(events) > MAX_EVENTS else "")
                + ")</h2><pre>")
    body.extend(escape(event.format()) + "\n" for event in events[:MAX_EVENTS])
    body.append("</pre>")
    style = ("body{font-family:sans-serif;margin:1.5em;color:#212121}"
             "h2{font-size:1em;margin-top:1.5em}pre{font-size:11px;background:#fafafa;"
             "padding:.5em;overflow-x:auto}.key{display:inline-block;width:1em;height:1em;"
             "margin:0 .3em 0 1em;vertical-align:middle}.rules{font-size:12px;margin:.2em 0;"
             "color:#b71c1c}.context,.counts{font-weight:bold}")
    document = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{escape(title)}</title><style>{style}</style></head><body>\n"
                + "\n".join(body) + "\n</body></html>\n")
    # A file name that is not UTF-8 reaches here as os.fsdecode gives it
    # (lone surrogates), which no UTF-8 file can hold: show its bytes as
    # ``\xff``, as ``ls -b`` does, so the page can be written.
    return document.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
