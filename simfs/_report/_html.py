"""A belief timeline as one self-contained HTML file with inline SVG swimlanes.

No scripts, fonts, stylesheets or images from anywhere else: the file opens
offline and can be attached to a bug report.  Per watched path, one lane for
the server's truth and one per host against virtual time; stalls (a host
trusting a cached answer the server contradicts) are shaded with their
cause in a tooltip; the related trace events are listed below.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ._timeline import SERVER, Timeline

COLOURS = {"present": "#2e7d32", "absent": "#546e7a", "unknown": "#e0e0e0"}
STALL = "#d32f2f"
LANE_H, LANE_GAP, LABEL_W, PLOT_W, AXIS_H = 22, 6, 110, 860, 26
MAX_EVENTS = 2000


def _ticks(end: float) -> list[float]:
    """About eight round tick positions from 0 to ``end``."""
    if end <= 0:
        return [0.0]
    raw = end / 8
    step = 1.0
    for candidate in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300,
                      600, 1800, 3600):
        step = candidate
        if candidate >= raw:
            break
    count = int(end / step)
    return [round(index * step, 6) for index in range(count + 1)]


def _svg(timeline: Timeline, path: str) -> str:
    hosts = [SERVER, *timeline.hosts]
    height = AXIS_H + len(hosts) * (LANE_H + LANE_GAP)
    width = LABEL_W + PLOT_W + 10
    scale = PLOT_W / timeline.end if timeline.end > 0 else 0.0

    def x(seconds: float) -> float:
        return round(LABEL_W + seconds * scale, 2)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="lanes" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="belief timeline of {escape(path)}">']
    for tick in _ticks(timeline.end):
        parts.append(f'<line x1="{x(tick)}" y1="0" x2="{x(tick)}" y2="{height - AXIS_H}" '
                     'stroke="#bdbdbd" stroke-width="0.5"/>')
        parts.append(f'<text x="{x(tick)}" y="{height - 8}" font-size="10" '
                     f'text-anchor="middle">{tick:g} s</text>')
    stalls = [stall for stall in timeline.stalls() if stall.path == path]
    for row, host in enumerate(hosts):
        top = row * (LANE_H + LANE_GAP)
        parts.append(f'<text x="4" y="{top + LANE_H - 6}" font-size="12" '
                     f'font-weight="{"bold" if host == SERVER else "normal"}">'
                     f'{escape(host)}</text>')
        for interval in timeline.lane(host, path).intervals:
            tip = (f"{host}: {interval.believes} {interval.start:.3f}-{interval.end:.3f} s"
                   + ("" if host == SERVER else f" ({interval.because})"))
            parts.append(
                f'<rect class="belief" data-host="{escape(host)}" '
                f'data-believes="{interval.believes}" data-start="{interval.start:.6f}" '
                f'data-end="{interval.end:.6f}" x="{x(interval.start)}" y="{top}" '
                f'width="{max(x(interval.end) - x(interval.start), 0.5):.2f}" '
                f'height="{LANE_H}" fill="{COLOURS.get(interval.believes, "#9e9e9e")}">'
                f'<title>{escape(tip)}</title></rect>')
        for stall in (s for s in stalls if s.host == host):
            parts.append(
                f'<rect class="stall" data-host="{escape(host)}" data-start="{stall.start:.6f}" '
                f'data-end="{stall.end:.6f}" x="{x(stall.start)}" y="{top + LANE_H - 5}" '
                f'width="{max(x(stall.end) - x(stall.start), 0.5):.2f}" height="5" '
                f'fill="{STALL}"><title>{escape(stall.format())}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(timeline: Timeline, *, title: str, paths: Sequence[str] | None = None) -> str:
    """The whole report as one HTML document (inline SVG and CSS only).

    Args:
        timeline: what ``BeliefRecorder.timeline()`` returned.
        title: the page's heading, e.g. the scenario and its seed.
        paths: the watched paths to draw, in order (default: all of them).
    """
    shown = list(timeline.paths if paths is None else paths)
    legend = " ".join(
        f'<span class="key" style="background:{colour}"></span>{name}'
        for name, colour in [*COLOURS.items(), ("stall", STALL)])
    body = [f"<h1>{escape(title)}</h1>",
            f"<p>Virtual time 0-{timeline.end:.3f} s. Each host's belief comes from its "
            "own caches (no RPC); the server's truth is the first lane. A red bar marks a "
            "stall: a cached answer the server contradicted (hover for the rule that kept "
            f"it trusted). {legend}</p>"]
    for path in shown:
        body.append(f"<h2>{escape(path)}</h2>")
        body.append(_svg(timeline, path))
    stalls = [stall for stall in timeline.stalls() if stall.path in shown]
    body.append(f"<h2>Stalls ({len(stalls)})</h2><ul>")
    body.extend(f"<li>{escape(stall.format())}</li>" for stall in stalls)
    body.append("</ul>")
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
             "margin:0 .3em 0 1em;vertical-align:middle}")
    document = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{escape(title)}</title><style>{style}</style></head><body>\n"
                + "\n".join(body) + "\n</body></html>\n")
    # A file name that is not UTF-8 reaches here as os.fsdecode gives it
    # (lone surrogates), which no UTF-8 file can hold: show its bytes as
    # ``\xff``, as ``ls -b`` does, so the page can be written.
    return document.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
