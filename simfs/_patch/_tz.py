"""The world's local time zone: UTC, whatever the real machine's is.

Local time reaches a program through C, past every Python route:
``time.localtime``/``mktime``/``strftime("%Z")``, ``time.timezone`` and
``tzname``, and ``datetime``'s ``fromtimestamp``, ``astimezone()`` and naive
``timestamp()`` all call the C library's ``localtime_r``/``mktime``, which
read the ``TZ`` environment variable (else ``/etc/localtime``).  Measured
before this: the same seed logged ``01:00 CET`` under ``TZ=Europe/Paris``
and ``00:00 UTC`` on a machine set to UTC.

So while a world runs, ``TZ`` is ``UTC0`` (the POSIX form: no tz database
needed) and ``time.tzset()`` has applied it; afterwards the caller's ``TZ``
and ``tzset`` state come back.  The zone is process-wide: a real thread of
the test process that formats local time during ``run()`` sees UTC too.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

# The world's zone, in POSIX TZ form (tzset(3)): UTC, offset 0, no DST.
WORLD_TZ = "UTC0"


@contextlib.contextmanager
def world_timezone() -> Iterator[None]:
    """Run a block with the process's local time zone set to the world's."""
    saved = os.environ.get("TZ")
    if saved == WORLD_TZ:
        yield
        return
    os.environ["TZ"] = WORLD_TZ
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()
