"""``run NAME --report out.html``: a scenario's belief timeline as one HTML file.

The report covers the run's first session (one simulated world: for
handshake, the first group of trials; for prune, the first experiment and
variant), watching every path a syscall touched.  The paths where a host
trusted a cached answer that the server contradicted (stalls) are drawn
first, at most ``MAX_PATHS`` of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simfs._report import BeliefRecorder, render_html
from simfs._report._timeline import watch_paths_with_stalls

from ._base import Progress, ScenarioError
from ._sim import SimBackend, SimSession

MAX_PATHS = 8


class RecordingSimBackend(SimBackend):
    """The simulation backend, recording beliefs in its first session's world."""

    def __init__(self, **world: Any) -> None:
        super().__init__(**world)
        self.recorder: BeliefRecorder | None = None
        self.step = ""  # the scenario's last progress message
        self.context = ""  # what it said as the recorded session began

    def noting(self, progress: Progress) -> Progress:
        """``progress``, also remembering each message: the first session's names its
        variant, layout and direction (handshake: "group 1/8: variant exists, ...")."""
        def note(message: str) -> None:
            self.step = message
            progress(message)
        return note

    def session(self, hosts: Mapping[str, str], seed: int) -> SimSession:
        session = super().session(hosts, seed)
        if self.recorder is None:
            self.recorder = BeliefRecorder(session.world)
            self.context = self.step
        return session


def write_report(backend: RecordingSimBackend, path: str, title: str) -> str:
    """Write the HTML report; returns a one-line summary for the terminal.

    Raises:
        ScenarioError: the scenario opened no simulated session to report on.
    """
    if backend.recorder is None:
        raise ScenarioError("--report: the scenario ran no simulated world to report on")
    timeline = backend.recorder.timeline()
    shown = watch_paths_with_stalls(timeline, MAX_PATHS)
    context = f"the first session: {backend.context}" if backend.context else ""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(timeline, title=title, paths=shown, context=context))
    shown_stalls = sum(1 for stall in timeline.stalls() if stall.path in shown)
    return (f"report: {path} ({len(shown)} of {len(timeline.paths)} paths, {shown_stalls} of "
            f"{len(timeline.stalls())} stall(s) in the first session)")
