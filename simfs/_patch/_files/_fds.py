"""Descriptor numbers no process can hold: ``EBADF``, as the kernel answers.

A descriptor number that the simulated process does not hold is either one
of the test process's real descriptors (an escape, refused loudly) or a
number nothing can hold.  Linux never hands out a descriptor at or above
``fs.nr_open`` (default 1024 * 1024, ``sysctl_nr_open`` in fs/file.c), nor
a negative one, so for those the kernel's answer is ``EBADF`` on every
machine: filelock's suite passes ``1 << 20`` to check that a lock on a bad
descriptor raises ``OSError`` and is not silently taken.
"""

from __future__ import annotations

import errno
from typing import NoReturn

from ..._engine._scheduler import Process
from ..._errors import simulated_oserror
from .._registry import escape

# fs.nr_open's default (fs/file.c): no descriptor number reaches it.
NR_OPEN = 1 << 20


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
