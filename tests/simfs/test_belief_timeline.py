"""Belief timelines: who believed what about a path, when, and by which rule.

The facts drawn are docs/nfs-facts.md's negative-lookup stall: a host that
looked up a missing name at t=0 keeps answering "absent" from its negative
dentry until its cached attributes of the parent expire, acdirmin later,
however early the file appears on the server.
"""

import os
import re
import xml.etree.ElementTree as ET

import pytest

from simfs import World, posix
from simfs._report import BeliefRecorder, render_html
from simfs._report._html import LABEL_W, PLOT_W

from .helpers import create_marker, poll_until_seen

MARKER = "/shared/t/marker"
SVG = "{http://www.w3.org/2000/svg}"


def _stall_world(mount="vers=3", created_at=1.0):
    world = World(seed=0)
    world.server.mkdir("/shared/t")
    world.spawn(world.host("a"), create_marker, MARKER, created_at)
    world.spawn(world.host("b", mount=mount), poll_until_seen, MARKER)
    recorder = BeliefRecorder(world, [MARKER])
    world.run()
    return recorder.timeline()


def _spans(lane):
    return [(i.start, i.end, i.believes) for i in lane.intervals]


def test_the_timeline_shows_the_negative_entry_outliving_the_file_until_acdirmin():
    timeline = _stall_world()
    assert _spans(timeline.lane("server", MARKER)) == [(0.0, 1.0, "absent"),
                                                       (1.0, 30.0, "present")]
    ((start, end, believes),) = _spans(timeline.lane("b", MARKER))
    assert (start, end, believes) == (0.0, 30.0, "absent")
    assert "negative dentry" in timeline.lane("b", MARKER).intervals[0].because
    assert "acdirmin=30" in timeline.lane("b", MARKER).intervals[0].because
    (stall,) = timeline.stalls()
    assert (stall.host, stall.start, stall.end, stall.believes, stall.truth) == (
        "b", 1.0, 30.0, "absent", "present")


def test_a_short_acdirmin_ends_the_stall_at_acdirmin():
    (stall,) = _stall_world("vers=3,acdirmin=3,acdirmax=3", created_at=1.2).stalls()
    assert (stall.start, stall.end) == (pytest.approx(1.2), pytest.approx(3.0))
    assert "acdirmin=3" in stall.because


def test_a_cached_answer_ends_on_its_own_when_its_attributes_expire():
    def look_once_then_sleep():
        posix.exists(MARKER)
        posix.sleep(40.0)

    world = World()
    world.server.mkdir("/shared/t")
    world.spawn(world.host("b"), look_once_then_sleep)
    recorder = BeliefRecorder(world, [MARKER])
    world.run()
    lane = recorder.timeline().lane("b", MARKER)
    assert _spans(lane) == [(0.0, 30.0, "absent"), (30.0, 40.0, "unknown")]
    assert "expired at 30.000 s" in lane.intervals[1].because


def test_watching_every_path_finds_the_touched_paths_and_the_stall():
    world = World(seed=0)
    world.server.mkdir("/shared/t")
    world.spawn(world.host("a"), create_marker, MARKER, 1.0)
    world.spawn(world.host("b"), poll_until_seen, MARKER)
    recorder = BeliefRecorder(world)
    world.run()
    timeline = recorder.timeline()
    assert MARKER in timeline.paths
    assert [(s.host, s.path, s.start, s.end) for s in timeline.stalls()] == [
        ("b", MARKER, 1.0, 30.0)]


def test_a_path_outside_the_export_is_refused():
    with pytest.raises(ValueError, match="outside the export '/shared'"):
        BeliefRecorder(World(), ["/etc/hostname"])


def test_the_text_rendering_lists_each_lane_and_the_stall_with_its_rule():
    text = _stall_world().format()
    assert "  server:\n        0.000-    1.000 s  absent\n" in text
    assert "  b:\n        0.000-   30.000 s  absent    (negative dentry" in text
    assert text.endswith("1 stall(s):\n  b believed /shared/t/marker absent while the server "
                         "said present for 29.000 s (1.000-30.000 s): negative dentry for "
                         "'marker' in /shared/t, trusted while /shared/t's cached attributes "
                         "are valid (acdirmin=30)")


def _svgs(html):
    return [ET.fromstring(match) for match in re.findall(r"<svg .*?</svg>", html, re.S)]


def test_the_html_draws_each_interval_as_a_lane_rectangle_at_its_time():
    timeline = _stall_world()
    html = render_html(timeline, title="stall")
    (svg,) = _svgs(html)
    rects = svg.findall(f"{SVG}rect")
    beliefs = [(r.get("data-host"), float(r.get("data-start")), float(r.get("data-end")),
                r.get("data-believes")) for r in rects if r.get("class") == "belief"]
    assert ("server", 1.0, 30.0, "present") in beliefs and ("b", 0.0, 30.0, "absent") in beliefs
    scale = PLOT_W / timeline.end
    for rect in rects:
        assert float(rect.get("x")) == pytest.approx(LABEL_W + float(rect.get("data-start"))
                                                     * scale, abs=0.01)
    (stall,) = [r for r in rects if r.get("class") == "stall"]
    assert (stall.get("data-host"), float(stall.get("data-start"))) == ("b", 1.0)
    assert "acdirmin=30" in stall.find(f"{SVG}title").text


def test_the_html_is_self_contained():
    html = render_html(_stall_world(), title="<stall & co>")
    assert "<title>&lt;stall &amp; co&gt;</title>" in html
    for outside in ("<script", "src=", "href=", "<link", "url(", "@import"):
        assert outside not in html
    assert re.findall(r"https?://[^\"' ]+", html) == ["http://www.w3.org/2000/svg"]


def test_a_file_name_that_is_not_utf8_is_shown_by_its_bytes_and_the_page_can_be_written():
    # Linux names are bytes; os.fsdecode hands a non-UTF-8 one over as lone
    # surrogates, which a UTF-8 page cannot hold.  The page shows the byte
    # as "\xff", as ``ls -b`` does, instead of failing where it is written.
    marker = os.fsdecode(b"/shared/t/m\xff")
    world = World(seed=0)
    world.server.mkdir("/shared/t")
    world.spawn(world.host("a"), create_marker, marker, 1.0)
    world.spawn(world.host("b"), poll_until_seen, marker)
    recorder = BeliefRecorder(world, [marker])
    world.run()
    html = render_html(recorder.timeline(), title="not utf-8")
    html.encode("utf-8")
    assert "<h2>/shared/t/m\\xff</h2>" in html
    (stall,) = [r for r in _svgs(html)[0].findall(f"{SVG}rect") if r.get("class") == "stall"]
    assert stall.get("data-host") == "b"


def test_a_stall_in_a_long_run_is_drawn_zoomed_to_the_disagreement_and_the_whole_run_below():
    # A 29 s stall in a 600 s run was a sliver of a lane drawn over the whole run.
    world = World(seed=0)
    world.server.mkdir("/shared/t")
    world.spawn(world.host("a"), create_marker, MARKER, 1.0)
    world.spawn(world.host("b"), poll_until_seen, MARKER)
    world.spawn("a", posix.sleep, 600)  # the rest of a long job
    recorder = BeliefRecorder(world, [MARKER])
    world.run()
    timeline = recorder.timeline()
    html = render_html(timeline, title="long run")
    zoomed, whole = _svgs(html)
    ticks = [float(t.text.removesuffix(" s")) for t in zoomed.iter(f"{SVG}text")
             if t.text.endswith(" s")]
    # The stall is 1-30 s; the window adds a tenth of it on each side.
    assert min(ticks) >= 0 and max(ticks) <= 30 + 2.9 + 1e-6
    (stall,) = [r for r in zoomed.iter(f"{SVG}rect") if r.get("class") == "stall"]
    assert float(stall.get("width")) > PLOT_W * 0.8
    whole_ticks = [float(t.text.removesuffix(" s")) for t in whole.iter(f"{SVG}text")
                   if t.text.endswith(" s")]
    assert max(whole_ticks) == 600
    assert "<details><summary>the whole run, 0-600.000 s</summary>" in html


def test_the_rule_behind_each_stall_is_written_under_its_lanes_not_only_in_a_tooltip():
    html = render_html(_stall_world(), title="stall")
    without_tooltips = re.sub(r"<title>.*?</title>", "", html, flags=re.S)
    rules = re.findall(r'<ul class="rules">\s*<li>(.*?)</li>', without_tooltips, re.S)
    assert len(rules) == 1 and "acdirmin=30" in rules[0] and rules[0].startswith("b believed")


def test_the_report_says_how_many_paths_and_stalls_it_shows_of_how_many():
    timeline = _stall_world()
    html = render_html(timeline, title="stall", paths=[], context="variant exists")
    assert '<p class="counts">0 of 1 paths shown (those with stalls first); 0 of 1 stalls ' \
        "shown.</p>" in html
    assert '<p class="context">variant exists</p>' in html
