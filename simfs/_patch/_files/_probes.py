"""Routes for the poll's idiom: ``os.path.exists``, ``isfile``, ``isdir`` and
``Path.exists``, ``is_file``, ``is_dir``.

Each is a stat whose "no such file" is caught and turned into False.  Run
as written, a poll answered "absent" from the client's caches builds an
``OSError``, raises it through the stat route and catches it: a quarter of
the poll's cost (issue 16).  Here the syscall layer is asked first whether
the stat is "absent" from the caches alone (``cached_absent``, which then
makes that stat's call and trace event); only otherwise does the standard
library's own body run, its ``os.stat`` the stat route.  The calls, events
and answers are the same either way (tests/simfs/test_cached_walk.py).
"""

from __future__ import annotations

import genericpath
import os
import pathlib
import posixpath
from collections.abc import Callable
from typing import Any

from ..._engine._scheduler import Process, routing
from .._registry import patch

_OS_PATH = ("exists", "isfile", "isdir")
_PATH_METHODS = ("exists", "is_file", "is_dir")


def _absent(process: Process, text: Any) -> bool:
    """Whether ``text`` is a path under the export that the caches say is absent."""
    syscalls = process.syscalls
    return (text.__class__ is str and text.startswith(syscalls.export_prefix)
            and "/.." not in text and syscalls.cached_absent(text))


def _os_path_route(real: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def route(path: Any) -> bool:
        process: Process | None = getattr(routing, "process", None)  # current_process(), inlined
        if process is not None:
            if path.__class__ is not str and hasattr(type(path), "__fspath__"):
                path = os.fspath(path)  # a Path: its text read once, as the real call does
            if _absent(process, path):
                return False
        return real(path)

    # One argument named as the original names it (isdir's is ``s``), so a
    # call by keyword works, without *args/**kwargs on every poll.
    name = real.__code__.co_varnames[0]
    route.__code__ = route.__code__.replace(
        co_varnames=(name, *route.__code__.co_varnames[1:]))
    return route


def _path_method_route(real: Callable[..., bool]) -> Callable[..., bool]:
    def route(self: Any, *args: Any, **kwargs: Any) -> bool:
        process: Process | None = getattr(routing, "process", None)  # current_process(), inlined
        # follow_symlinks=False (3.12+) is an lstat: the body's own way.
        if (process is not None and not args and kwargs.get("follow_symlinks", True)
                and isinstance(self, pathlib.PurePath) and _absent(process, str(self))):
            return False
        return real(self, *args, **kwargs)

    return route


def _defining_class(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO that defines ``name`` (3.13: pathlib._abc.PathBase)."""
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def install() -> None:
    for name in _OS_PATH:
        # posixpath's (os.path's) are genericpath's: one route for both names.
        route = _os_path_route(getattr(genericpath, name))
        patch(genericpath, name, route)
        patch(posixpath, name, route)
    for name in _PATH_METHODS:
        owner = _defining_class(pathlib.Path, name)
        patch(owner, name, _path_method_route(vars(owner)[name]))
