"""Progress on stderr while a scenario runs: one line, rewritten, with an ETA.

A scenario reports progress as plain messages (``handshake: group 3/16 ...``);
a message that carries a ``k/n`` count gets an estimate of the wall time
left, from the pace of the steps done so far.  Wall time is only shown here,
never fed to a run: results stay a function of the seed.  When stderr is not
a terminal (CI logs, pipes) nothing is written at all.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import TextIO

_COUNT = re.compile(r"\b(\d+)/(\d+)\b")


class ProgressLine:
    """A ``Progress`` callable that rewrites one status line on a terminal."""

    def __init__(self, stream: TextIO | None, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._stream = stream
        self._clock = clock
        self._started: dict[tuple[str, int], float] = {}
        self._shown = False
        self.prefix = ""

    @classmethod
    def for_stderr(cls, quiet: bool) -> ProgressLine:
        """Progress on stderr if it is a terminal and ``quiet`` is not set."""
        stream = sys.stderr
        enabled = not quiet and stream.isatty()
        return cls(stream if enabled else None)

    def __call__(self, message: str) -> None:
        if self._stream is None:
            return
        line = self.prefix + message + self._eta(message)
        self._stream.write("\r\x1b[K" + line)
        self._stream.flush()
        self._shown = True

    def _eta(self, message: str) -> str:
        """`` (about N s left)`` once a ``k/n`` count has advanced past its first step."""
        match = _COUNT.search(message)
        if match is None:
            return ""
        step, total = int(match.group(1)), int(match.group(2))
        key = (message[:match.start()], total)  # one clock per counted sequence
        now = self._clock()
        started = self._started.setdefault(key, now)
        done = step - 1  # the message announces step ``step`` as it begins
        if done < 1 or total <= done:
            return ""
        left = (now - started) / done * (total - done)
        return f" (about {_duration(left)} left)"

    def finish(self) -> None:
        """End the status line, so the table prints on a clean line."""
        if self._stream is not None and self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        self._shown = False


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
