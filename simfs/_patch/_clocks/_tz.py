"""The world's local time zone (``World(tz=)``, UTC by default), whatever the machine's is.

Local time reaches a program through C, past every Python route:
``time.localtime``/``mktime``/``strftime("%Z")``, ``time.timezone`` and
``tzname``, and ``datetime``'s ``fromtimestamp``, ``astimezone()`` and naive
``timestamp()`` all call the C library's ``localtime_r``/``mktime``, which
read the ``TZ`` environment variable (else ``/etc/localtime``).  Measured
before this: the same seed logged ``01:00 CET`` under ``TZ=Europe/Paris``
and ``00:00 UTC`` on a machine set to UTC.

So while a world runs, the real ``TZ`` is the world's zone and
``time.tzset()`` has applied it; afterwards the caller's ``TZ`` and
``tzset`` state come back.  UTC is set in POSIX form (``UTC0``: no tz
database needed); any other zone must be a file of the ``tzdata`` package
(one pinned IANA release on every machine) or of the system's tz database
(``zoneinfo.TZPATH``), and is set by its absolute path
(``TZ=:/usr/share/zoneinfo/Europe/Berlin``, tzset(3)), so glibc reads
exactly the file that was checked.  glibc does not fail on an
unknown name: it silently uses UTC under that name (measured:
``TZ=Nowhere/Bogus`` gave ``tzname ('Nowhere', 'Nowhere')``, offset 0),
which is why the name is checked when the world is made.  The zone is
process-wide: a real thread of the test process that formats local time
during ``run()`` sees the world's zone too.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from ..._os._machine import DEFAULT_ZONE, check_zone, zone_file

# The POSIX TZ form of UTC (tzset(3)): offset 0, no DST, no tz database needed.
_UTC_RULE = "UTC0"


def posix_rule(zone: str) -> str:
    """The ``TZ`` value that makes the C library use ``zone`` (checked by ``check_zone``)."""
    if zone == DEFAULT_ZONE:
        return _UTC_RULE
    path = zone_file(zone)
    if path is None:  # removed from the machine since the world was made
        check_zone(zone)
        raise AssertionError(zone)
    return ":" + path


@contextlib.contextmanager
def world_timezone(zone: str = DEFAULT_ZONE) -> Iterator[None]:
    """Run a block with the process's local time zone set to the world's ``zone``."""
    rule = posix_rule(zone)
    saved = os.environ.get("TZ")
    if saved == rule:
        yield
        return
    os.environ["TZ"] = rule
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()
