"""Seeing a run: belief timelines recorded from ``Host.belief``, as text or HTML."""

from ._html import render_html
from ._timeline import BeliefRecorder, Interval, Lane, Stall, Timeline

__all__ = ["BeliefRecorder", "Interval", "Lane", "Stall", "Timeline", "render_html"]
