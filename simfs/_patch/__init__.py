"""Routing of plain Python I/O, time and threads into the world (DESIGN §3.3).

``install()`` patches, once per interpreter, the attributes user code calls:
``os``, ``io.open``/``open``, ``time``, ``threading``, ``queue.SimpleQueue``,
``fcntl``, ``random``, ``tempfile`` names, ``socket`` and ``subprocess``
(refused), asyncio, and trio once the program imports it.  Each route
sends a call made inside a simulated process to that process's syscall
layer or clock, and any other call to the original, so the patches are safe
to leave in place.

Names bound before installation (``from os import stat``, ``from time import
sleep``, ``from threading import Lock``), and originals frozen into default
arguments (``tempfile``'s ``def close(self, unlink=_os.unlink)``), are found
by identity in every loaded module and rebound, as pyfakefs does; modules
imported later bind the routes directly.  The interpreter's own machinery (``posix``, ``_io``,
import machinery) keeps the originals: importing a module inside a simulated
process reads real files, as it must.
"""

from __future__ import annotations

import sys
from types import FunctionType, ModuleType

from . import (
    _audit,
    _compat,
    _cpu,
    _descriptors,
    _environ,
    _escapes,
    _fcntl,
    _ids,
    _interpreter,
    _io,
    _limits,
    _logging,
    _misc,
    _mmap,
    _native,
    _os,
    _probes,
    _session,
    _threads,
    _time,
    _users,
)
from ._boundary import real_cwd_sentinel
from ._imports import when_imported
from ._registry import REPLACEMENTS

__all__ = ["install", "real_cwd_sentinel"]

_installed = False
_scanned: set[str] = set()
_modules_seen = 0

# Modules whose bindings must stay the originals.
_KEEP_REAL = frozenset({
    "posix", "nt", "_io", "builtins", "_thread", "_socket", "_random", "sys", "marshal",
    "zipimport", "_frozen_importlib", "_frozen_importlib_external", "importlib._bootstrap",
    "importlib._bootstrap_external", "faulthandler", "datetime", "_datetime", "_pydatetime",
})


def install() -> None:
    """Install every route (idempotent) and rebind aliases in loaded modules."""
    global _installed
    if not _installed:
        _installed = True
        for module in (_os, _io, _time, _cpu, _threads, _ids, _fcntl, _misc, _escapes, _mmap,
                       _native, _compat, _logging, _environ, _session, _users, _limits,
                       _audit, _probes, _descriptors, _interpreter):
            module.install()
        from . import _asyncio

        _asyncio.install()
        # trio is routed when the program imports it: importing it here was a
        # fifth of ``python -m scenarios run handshake``'s start-up (issue 16),
        # for a program that never uses it.  As before, a program must import
        # trio before the routes go in (its first spawn or run): trio binds
        # threading.RLock when imported, and its run loop needs a real one
        # (trio/_core/_entry_queue.py).
        when_imported("trio", _route_trio)
    _rebind_aliases()


def _route_trio(module: ModuleType) -> None:
    from . import _trio

    _trio.install()


def _rebind_aliases() -> None:
    global _modules_seen
    if len(sys.modules) == _modules_seen:
        return  # nothing imported since the last scan (every World.run() calls this)
    _modules_seen = len(sys.modules)
    for name, module in list(sys.modules.items()):
        if name in _scanned or not isinstance(module, ModuleType):
            continue
        _scanned.add(name)
        if name in _KEEP_REAL or name == "simfs" or name.startswith("simfs."):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attribute, value in list(namespace.items()):
            found = REPLACEMENTS.get(id(value))
            if found is not None and found[0] is value:
                namespace[attribute] = found[1]
            elif isinstance(value, FunctionType):
                _rebind_defaults(value)
            elif isinstance(value, type) and getattr(value, "__module__", None) == name:
                _rebind_class(value)


def _rebind_class(cls: type) -> None:
    """Class attributes holding originals (3.13's glob: ``scandir = staticmethod(os.scandir)``)."""
    for attribute, member in list(vars(cls).items()):
        inner = getattr(member, "__func__", member)
        replacement = _replacement(inner)
        if replacement is not inner:
            wrapped: object = replacement
            if isinstance(member, staticmethod):
                wrapped = staticmethod(replacement)  # type: ignore[arg-type]
            elif isinstance(member, classmethod):
                wrapped = classmethod(replacement)  # type: ignore[arg-type]
            elif isinstance(replacement, FunctionType) and not isinstance(inner, FunctionType):
                # A builtin in a class does not bind to instances, a Python
                # route would (logging.Formatter.converter = time.localtime:
                # self.converter(t) must still pass only t).
                wrapped = staticmethod(replacement)
            setattr(cls, attribute, wrapped)
        elif isinstance(inner, FunctionType):
            _rebind_defaults(inner)


def _replacement(value: object) -> object:
    found = REPLACEMENTS.get(id(value))
    return found[1] if found is not None and found[0] is value else value


def _rebind_defaults(function: FunctionType) -> None:
    defaults = function.__defaults__
    if defaults and any(id(value) in REPLACEMENTS for value in defaults):
        function.__defaults__ = tuple(_replacement(value) for value in defaults)
    keyword_defaults = function.__kwdefaults__
    if keyword_defaults and any(id(v) in REPLACEMENTS for v in keyword_defaults.values()):
        function.__kwdefaults__ = {k: _replacement(v) for k, v in keyword_defaults.items()}
