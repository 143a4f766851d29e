"""``os.environ`` inside the world: the simulated process's own environment.

Every way a program reads or changes its environment goes through one
attribute: ``os.environ`` and ``os.environb`` are ``os._Environ`` objects
whose methods (``[]``, ``get``, iteration, ``copy``, ``setdefault``, and
``os.getenv``/``getenvb``, which call them) all read the instance's
``_data`` dict.  A property on the class answers ``_data`` with the calling
simulated process's dict (``ProcessGroup.environ``, ``simfs/_engine/_scheduler.py``) inside the
world and with the real dict anywhere else, so the real ``os.environ``
object stays in place for pytest and the test body, and modules that bound
it early (``from os import environ``) are routed too.  Changes a simulated
process makes are its own, shared by its threads, as in a real process, and
never reach the real environment:

- ``os.putenv``/``os.unsetenv`` (which ``os.environ[k] = v`` and ``del``
  call) change the process's C-level environment, which, as in CPython,
  ``os.environ`` does not show;
- ``time.tzset()`` reads ``TZ`` from that C-level environment: the world's
  zone (or no ``TZ``: the host's ``/etc/localtime`` is the world's zone) is
  already applied; another zone would be per process, which the C library
  cannot give one interpreter, so it is refused loudly.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from ..._engine._scheduler import Process, current_process
from ..._errors import simulated_oserror
from .._registry import escape, in_world, patch


def _encoded(value: Any) -> bytes:
    """``value`` as ``os.putenv`` converts it (``PyUnicode_FSConverter``)."""
    if not isinstance(value, str | bytes | os.PathLike):
        raise TypeError(f"expected str, bytes or os.PathLike object, not "
                        f"{type(value).__name__}")
    encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError("embedded null byte")
    return encoded


def _putenv(process: Process, name: Any, value: Any) -> None:
    key, encoded = _encoded(name), _encoded(value)
    if not key:
        raise simulated_oserror(errno.EINVAL)  # setenv(3): an empty name
    if b"=" in key:
        raise ValueError("illegal environment variable name")
    process.group.native[key] = encoded


def _unsetenv(process: Process, name: Any) -> None:
    key = _encoded(name)
    if not key or b"=" in key:
        raise simulated_oserror(errno.EINVAL)  # unsetenv(3)
    process.group.native.pop(key, None)


def _tzset(process: Process) -> None:
    zone = process.syscalls.tz
    tz = process.group.native.get(b"TZ")
    if tz is None or os.fsdecode(tz) == zone:
        return  # the world's zone is the one in effect
    raise escape(process, f"time.tzset() with TZ={os.fsdecode(tz)!r}: a process's own time "
                          f"zone is not simulated (the world's is {zone!r}); choose it with "
                          "World(tz=...)")


def install() -> None:
    environ_type = type(os.environ)
    if isinstance(environ_type.__dict__.get("_data"), property):
        return
    routed: list[object] = [os.environ]
    if hasattr(os, "environb"):
        routed.append(os.environb)

    def data(self: Any) -> Any:
        process = current_process()
        if process is None or not any(self is mapping for mapping in routed):
            return self.__dict__["_data"]
        return process.group.environ

    def set_data(self: Any, value: Any) -> None:
        self.__dict__["_data"] = value

    environ_type._data = property(data, set_data)  # type: ignore[attr-defined]
    patch(os, "putenv", in_world(os.putenv, _putenv))
    patch(os, "unsetenv", in_world(os.unsetenv, _unsetenv))
    patch(time, "tzset", in_world(time.tzset, _tzset))
