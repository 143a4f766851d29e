"""Virtual time, kept as integer nanoseconds so that sums never drift.

``time.sleep(0.1)`` three hundred times must land on exactly 30 s, as the
seed-000 stall is measured against acdirmin to the poll.
"""

from __future__ import annotations

import math
import numbers
from typing import Final

NS_PER_S: Final = 1_000_000_000
# time.time() inside the world: 2026-01-01T00:00:00Z plus virtual time, so
# wall-clock timestamps are as deterministic as everything else.
EPOCH_NS: Final = 1_767_225_600 * NS_PER_S


def seconds_to_ns(seconds: float, what: str = "duration") -> int:
    """Convert non-negative, finite seconds to ns, rounding up.

    Rounding up guarantees that a sleep of ``s`` wakes at a time ``t`` with
    ``t / 1e9 >= start + s`` as a float, so a deadline computed in float
    seconds (trio's) has always passed when the sleeper wakes.

    Raises:
        TypeError: ``seconds`` is not a number (a str, a bool, None).
        ValueError: negative, NaN or infinite seconds.
    """
    cls = seconds.__class__
    if cls is not float and cls is not int and (
            isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)):
        raise TypeError(f"{what} must be a number of seconds (an int or a float), "
                        f"not {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {seconds!r}")
    return math.ceil(seconds * NS_PER_S)


class VirtualClock:
    """The world's clock.  Only the scheduler moves it, and only forwards.

    ``now_ns`` is virtual time since the world began (what the monotonic clocks
    read); ``wall_ns`` is the one wall-clock rule: ``epoch_ns + now_ns``, what
    ``time.time_ns()``, ``datetime.now()``, ``uuid1``, ``utime(path)`` and
    the server's timestamps read inside the world.
    """

    __slots__ = ("epoch_ns", "now_ns")

    def __init__(self, epoch_ns: int = EPOCH_NS) -> None:
        self.now_ns = 0
        self.epoch_ns = epoch_ns

    @property
    def now(self) -> float:
        return self.now_ns / NS_PER_S

    @property
    def wall_ns(self) -> int:
        """Nanoseconds since the Unix epoch on the world's clock (``time.time_ns()``)."""
        return self.epoch_ns + self.now_ns

    def advance_to(self, when_ns: int) -> None:
        if when_ns < self.now_ns:
            raise ValueError(f"time can't go backwards ({when_ns} ns < {self.now_ns} ns)")
        self.now_ns = when_ns
