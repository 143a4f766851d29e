"""Routes that keep a run deterministic and its tracebacks readable.

- ``random``'s module functions and ``os.urandom`` (hence ``uuid.uuid4``)
  draw from a generator seeded per simulated process from the world's seed.
- ``tempfile`` names come from that seeded stream too.
- ``socket.gethostname`` is the simulated host's name, so host-unique names
  built from it are as unique as on real machines.
- ``os.umask`` sets the simulated process's mask (its threads share it),
  applied to the files and directories it creates; it never changes the
  real process's umask.
- ``linecache`` reads real source files with routing off: a traceback
  printed inside the world is not the program's I/O.  So do ``inspect``'s
  source lookups (``inspect.stack()`` stats each frame's file; filelock's
  suite calls it): a program's own code is loaded from the real machine, as
  an import is.
"""

from __future__ import annotations

import inspect
import linecache
import os
import random
import socket
import tempfile
from typing import Any

from ..._engine._scheduler import Process, current_process
from .._registry import in_world, patch, real_outside

_RANDOM_FUNCTIONS = (
    "random", "uniform", "triangular", "randint", "choice", "randrange", "sample", "shuffle",
    "choices", "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate",
    "gammavariate", "gauss", "betavariate", "paretovariate", "weibullvariate", "getrandbits",
    "randbytes", "binomialvariate", "seed", "getstate", "setstate",
)


def _random_route(name: str) -> Any:
    real = getattr(random, name)

    def seeded(process: Process, *args: Any, **kwargs: Any) -> Any:
        return getattr(process.group_random(), name)(*args, **kwargs)

    return in_world(real, seeded)


class _SeededNames(tempfile._RandomNameSequence):  # type: ignore[name-defined,misc]
    """tempfile's name sequence, drawing from the calling process's seeded generator."""

    @property
    def rng(self) -> random.Random:
        process = current_process()
        assert process is not None
        return process.group_random()


def install() -> None:
    for name in _RANDOM_FUNCTIONS:
        if hasattr(random, name):
            patch(random, name, _random_route(name))

    real_candidates = tempfile._get_candidate_names  # type: ignore[attr-defined]
    seeded = _SeededNames()

    patch(tempfile, "_get_candidate_names", in_world(real_candidates, lambda process: seeded))

    real_umask = os.umask

    def umask(process: Process, mask: int) -> int:
        if isinstance(mask, bool) or not isinstance(mask, int):
            raise TypeError(f"'{type(mask).__name__}' object cannot be interpreted as an "
                            "integer")
        group = process.group
        previous, group.umask = group.umask, mask & 0o777
        return previous

    patch(os, "umask", in_world(real_umask, umask))
    patch(socket, "gethostname", in_world(socket.gethostname, lambda process: process.host.name))

    for name in ("getlines", "updatecache", "checkcache", "lazycache"):
        if hasattr(linecache, name):
            patch(linecache, name, real_outside(getattr(linecache, name)))
    for name in ("getsourcefile", "getabsfile", "getmodule", "findsource"):
        patch(inspect, name, real_outside(getattr(inspect, name)))
