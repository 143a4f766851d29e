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
  an import is.  A file under a simulated mount is the program's data
  (``linecache.getline(path, n)`` is a common way to read one line of a
  corpus): it is read routed, through the process's view, and cached in
  the process's own cache (a real process has its own ``linecache``; one
  shared here served a host lines another host had read).  Read with
  routing off, it reached the real disk: the guard refused it, and without
  the guard ``getline`` answered ``''``.
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

    for name in ("getlines", "updatecache", "checkcache"):
        patch(linecache, name, _linecache_route(getattr(linecache, name)))
    if hasattr(linecache, "lazycache"):  # a module's source, found by its loader
        patch(linecache, "lazycache", real_outside(linecache.lazycache))
    for name in ("getsourcefile", "getabsfile", "getmodule", "findsource"):
        patch(inspect, name, real_outside(getattr(inspect, name)))


def _linecache_route(original: Any) -> Any:
    """``linecache.getlines``/``updatecache``/``checkcache``: source files
    read for real, the simulated mounts' files read routed and cached per
    process (the module docstring)."""
    outside = real_outside(original)

    def route(filename: Any = None, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return original(filename, *args, **kwargs)
        if filename is not None and not _simulated(process, filename):
            return outside(filename, *args, **kwargs)  # source, for a traceback
        own: dict[str, Any] = process.group.own_state.setdefault("linecache", {})
        if filename is None:  # checkcache(): every entry of both caches
            outside(None, *args, **kwargs)
        return _with_cache(own, original, filename, *args, **kwargs)

    return route


def _simulated(process: Process, filename: Any) -> bool:
    """Whether ``filename`` names a file under one of the process's simulated mounts."""
    if not isinstance(filename, str) or not filename or filename.startswith("<"):
        return False  # "<string>", "<stdin>": linecache's own names for no file
    if not filename.startswith("/"):
        filename = os.path.join(process.group.cwd, filename)
    return not process.syscalls.machine_readable(filename)


def _with_cache(own: dict[str, Any], original: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``original`` routed with ``linecache.cache`` the process's own.

    Only one simulated process runs at a time (the baton), and the test's
    own thread waits meanwhile, so the module global can be swapped (a real
    thread the test started itself would see the process's cache for the
    length of this call).
    """
    shared = linecache.cache
    linecache.cache = own
    try:
        return original(*args, **kwargs)
    finally:
        linecache.cache = shared
