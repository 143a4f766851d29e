"""Descriptor numbers no process can hold: ``EBADF``, as the kernel answers.

A descriptor number that the simulated process does not hold is either one
of the test process's real descriptors (an escape, refused loudly) or a
number nothing can hold.  Linux never hands out a descriptor at or above
``fs.nr_open`` (default 1024 * 1024, ``sysctl_nr_open`` in fs/file.c), nor
a negative one, so for those the kernel's answer is ``EBADF`` on every
machine: filelock's suite passes ``1 << 20`` to check that a lock on a bad
descriptor raises ``OSError`` and is not silently taken.

What a descriptor argument may be is CPython's rule, kept here once for
every descriptor route (``descriptor``): an int, or anything with
``__index__``; only the calls whose argument CPython converts as ``fildes``
also take an object with ``fileno()`` (``os.fsync(file)``), and refuse a
negative number with ``ValueError``.  ``os.read(file, 2)`` and
``os.fstat(file)`` are a ``TypeError`` in CPython, so they are here.
"""

from __future__ import annotations

import errno
import operator
from collections.abc import Callable
from typing import Any, NoReturn

from ..._engine._scheduler import Process
from ..._errors import simulated_oserror
from .._registry import escape

# fs.nr_open's default (fs/file.c): no descriptor number reaches it.
NR_OPEN = 1 << 20
# The os calls whose descriptor argument CPython converts as ``fildes``
# (PyObject_AsFileDescriptor: an int, or an object whose fileno() returns one,
# never negative); every other one converts as an ``int`` (__index__), where a
# file object is a TypeError.  Measured on CPython 3.11, 3.12 and 3.13
# (tests/simfs/test_descriptor_arguments.py compares each call with CPython).
FILDES_CALLS = frozenset({"fsync", "fdatasync", "fchdir", "fpathconf"})


def descriptor(value: Any, call: str) -> int | None:
    """The descriptor number ``os.<call>`` takes ``value`` for, as CPython converts it.

    None where CPython's conversion refuses ``value``: the caller then lets
    the real call raise its own error (``refused_by_conversion``), which it
    does while converting its arguments, before any system call.
    """
    if call in FILDES_CALLS:
        if isinstance(value, int):
            number = int(value)
        else:
            fileno = getattr(value, "fileno", None)
            if fileno is None:
                return None
            number = fileno()
            if not isinstance(number, int):
                return None
        return int(number) if number >= 0 else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def refused_by_conversion(real: Callable[..., Any], *args: Any, **kwargs: Any) -> NoReturn:
    """Raise what ``real`` raises converting a descriptor ``descriptor`` refused."""
    real(*args, **kwargs)  # raises: no descriptor converts from what it was given
    raise TypeError(f"{real.__name__}: {args[0]!r} is not a file descriptor")


def refuse_impossible(fd: int) -> None:
    """Raise ``EBADF`` for a descriptor number no Linux process can hold.

    Raises:
        OSError: ``EBADF``, reading as the real one (``[Errno 9] Bad file descriptor``).
    """
    if fd < 0 or fd >= NR_OPEN:
        raise simulated_oserror(errno.EBADF)


def refuse_foreign(process: Process, fd: int, call: str) -> NoReturn:
    """A call inside the world on a descriptor ``process`` does not hold.

    ``EBADF`` for a number no process can hold, else the test process's own
    real descriptor: an escape naming ``call`` (e.g. ``"os.read(7)"``).
    """
    refuse_impossible(fd)
    raise escape(process, f"{call} on a real file descriptor")
