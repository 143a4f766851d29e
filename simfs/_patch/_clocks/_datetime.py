"""Routes for ``datetime``: ``now()`` and ``utcnow()`` read the world's clock.

``datetime.datetime`` is a C type: its ``now`` cannot be replaced (``setattr``
on a built-in type fails) and reads the system clock in C, past every
Python-level route.  ``today()`` (both ``date`` and ``datetime``) and
``fromtimestamp(time.time())`` need nothing: CPython's ``today`` calls
``time.time`` by name, which is routed already.  So:

- ``datetime.datetime`` read from the module inside a simulated process is
  ``datetime`` below, a subclass whose ``now``/``utcnow`` use virtual time.
  The module's class is swapped for one with a property, so outside the world
  ``datetime.datetime`` is still the real type: pickling, ``type(x) is
  datetime``, adapters registered by type all keep working in the test
  process.
- Names bound before the routes existed (``from datetime import datetime``)
  are rebound to the subclass like every other route (see ``_registry``).
  The subclass is a factory, never instantiated itself: constructing it, and
  every classmethod (``fromisoformat``, ``strptime``, ``combine``), returns
  real ``datetime`` objects, and ``isinstance``/``issubclass`` against it
  answer as against the real type.  What differs is only ``type(x) is
  datetime`` in a module whose name was rebound.
- Pickling a real ``datetime`` inside the world names the class as
  ``datetime.datetime``, which there is the subclass; a ``copyreg`` reducer
  names the subclass, and unpickling it builds the real type anywhere.
"""

from __future__ import annotations

import copyreg
import datetime as datetime_module
import sys
from types import ModuleType
from typing import Any

from ..._engine._clock import NS_PER_S
from ..._engine._scheduler import current_process
from .._registry import REPLACEMENTS

_RealDatetime = datetime_module.datetime
_UTC = datetime_module.UTC


def _virtual_now_ns() -> int | None:
    """Nanoseconds since the Unix epoch on the world's clock, or None outside it."""
    process = current_process()
    if process is None:
        return None
    return process.syscalls.wall_ns


def _at(now_ns: int, tz: datetime_module.tzinfo | None) -> datetime_module.datetime:
    """``fromtimestamp`` of an exact ns time (a float would round the microseconds)."""
    seconds, rest = divmod(now_ns, NS_PER_S)
    return _RealDatetime.fromtimestamp(seconds, tz).replace(microsecond=rest // 1000)


class _RoutedType(type):
    """Makes the routed ``datetime`` answer ``isinstance`` as the real type does."""

    def __instancecheck__(cls, instance: object) -> bool:
        if cls.__dict__.get("_simfs_routed"):
            return isinstance(instance, _RealDatetime)
        return type.__instancecheck__(cls, instance)

    def __subclasscheck__(cls, subclass: type) -> bool:
        if cls.__dict__.get("_simfs_routed"):
            return issubclass(subclass, _RealDatetime)
        return type.__subclasscheck__(cls, subclass)


class datetime(_RealDatetime, metaclass=_RoutedType):
    """``datetime.datetime`` whose ``now``/``utcnow`` read virtual time in the world."""

    __slots__ = ()
    _simfs_routed = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is datetime:
            return _RealDatetime(*args, **kwargs)
        return _RealDatetime.__new__(cls, *args, **kwargs)

    @classmethod
    def now(cls, tz: datetime_module.tzinfo | None = None) -> Any:
        now_ns = _virtual_now_ns()
        if now_ns is None:
            return _real_classmethod("now", cls)(tz)
        value = _at(now_ns, tz)
        return value if cls is datetime else cls.fromtimestamp(value.timestamp(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        now_ns = _virtual_now_ns()
        if now_ns is None:
            return _real_classmethod("utcnow", cls)()
        value = _at(now_ns, _UTC).replace(tzinfo=None)
        return value if cls is datetime else cls.combine(value.date(), value.time())


datetime.__module__ = "datetime"
datetime.__qualname__ = "datetime"


def _real_classmethod(name: str, cls: type) -> Any:
    """The C classmethod ``name`` bound to ``cls`` (the real type for the router)."""
    return _RealDatetime.__dict__[name].__get__(None, _RealDatetime if cls is datetime else cls)


class _DatetimeModule(ModuleType):
    """The ``datetime`` module, whose ``datetime`` attribute depends on the caller."""

    @property
    def datetime(self) -> Any:
        value = self.__dict__["datetime"]
        if value is _RealDatetime:
            if current_process() is None or _from_import_machinery():
                return _RealDatetime
            return datetime
        return value

    @datetime.setter
    def datetime(self, value: Any) -> None:
        # Someone else (freezegun) replaces the class: theirs wins, as it would.
        self.__dict__["datetime"] = value


def _from_import_machinery() -> bool:
    """Whether the attribute is read by an extension module's initialisation.

    A C extension's init runs under the import system's frames
    (``<frozen importlib._bootstrap...>``: ``create_module``/``exec_module``
    call it through ``_call_with_frames_removed``), and reads
    ``datetime.datetime`` from C with no frame of its own.  A Cython module
    built on ``cpython.datetime`` takes that type as the base of its own
    (pandas' ``_NaT(datetime)``): handed the routed subclass, pandas' first
    import inside a process failed creating ``NaT`` with ``TypeError:
    __new__() takes exactly 1 positional argument (4 given)`` (issue 30).
    The type is the real one there; the program's own ``datetime.now()``
    (a Python frame) stays on the world's clock.
    """
    caller = sys._getframe(2)  # 0: here, 1: the property, 2: who read it
    return caller.f_code.co_filename.startswith("<frozen importlib")


def _reduce(value: datetime_module.datetime) -> Any:
    reduced = value.__reduce_ex__(4)
    if current_process() is None:
        return reduced
    return (datetime, *reduced[1:])


def install() -> None:
    if not isinstance(datetime_module, _DatetimeModule):
        datetime_module.__class__ = _DatetimeModule
    # Rebinds "from datetime import datetime" in loaded modules (never the
    # module's own attribute: the property above answers for that).
    REPLACEMENTS[id(_RealDatetime)] = (_RealDatetime, datetime)
    copyreg.pickle(_RealDatetime, _reduce)
