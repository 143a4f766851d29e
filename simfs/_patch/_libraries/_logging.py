"""``logging`` inside the world: a record's times are all on the world's clock.

``LogRecord.created`` reads ``time.time()`` (routed), but
``relativeCreated`` subtracts ``logging._startTime``, the real time at which
the test process imported ``logging``: measured, ``%(relativeCreated)d``
inside a world printed -28887664025, a number that changes with every
test process.  Inside the world it is the milliseconds since the world's
clock started, as if ``logging`` had been imported when the world began.
"""

from __future__ import annotations

import logging
from typing import Any

from ..._engine._clock import NS_PER_S
from ..._engine._scheduler import current_process
from .._registry import patch


def install() -> None:
    record_class: Any = logging.LogRecord
    real_init = record_class.__init__

    def __init__(self: logging.LogRecord, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        process = current_process()
        if process is not None:
            self.relativeCreated = process.syscalls.now_ns * 1000 / NS_PER_S

    patch(record_class, "__init__", __init__)
