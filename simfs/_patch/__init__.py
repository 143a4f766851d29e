"""Routing of plain Python I/O, time and threads into the world (docs/design.md, 'Unmodified code').

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

The route modules are grouped by concern: ``_files``, ``_clocks``,
``_concurrency``, ``_identity``, ``_libraries`` and ``_guards`` (each
package's docstring says what it holds); ``_registry`` (originals,
replacements, ``in_world``) and ``_imports`` (routes put in when a module is
imported) serve them all.  ``_INSTALL_ORDER`` below is the one list of what
``install()`` puts in, and in which order.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from types import FunctionType, MethodType, ModuleType

from .._engine._modules import (
    AFTER_OWN_COPY,
    class_module,
    class_namespace,
    module_namespace,
    scanning,
)
from ._clocks import _cpu, _time
from ._concurrency import _threads
from ._files import _descriptors, _fcntl, _io, _mmap, _os, _probes
from ._guards import _audit, _escapes
from ._guards._boundary import real_cwd_sentinel
from ._identity import _environ, _ids, _interpreter, _limits, _misc, _session, _users
from ._imports import when_imported
from ._libraries import _compat, _logging, _native
from ._registry import REPLACEMENTS, ROUTES_FOR_BUILTINS

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


# Every route module's install(), in the order install() calls them.  Where
# two modules patch one name, the later one's route is the one bound.  A
# name (not a module) is imported only as install() runs.  Installed from
# elsewhere: _clocks/_datetime.py by _clocks/_time.py (datetime's "now" is
# time's clock), _concurrency/_trio.py when the program imports trio (below),
# _guards/_native_guard.py on request (SIMFS_NATIVE_GUARD, simfs.native_guard).
_INSTALL_ORDER: tuple[ModuleType | str, ...] = (
    _os,                          # files: os path and descriptor calls
    _io,                          # files: open, io.open
    _time,                        # clocks: time (and datetime)
    _cpu,                         # clocks: CPU-time clocks, getrusage
    _threads,                     # concurrency: threading, queue
    _ids,                         # identity: pids, uname, uuid1, getnode
    _fcntl,                       # files: flock, lockf, fcntl
    _misc,                        # identity: random, tempfile names, hostname, umask
    _escapes,                     # guards: subprocesses, pools, pipes, sockets
    _mmap,                        # files: mmap
    _native,                      # libraries: safetensors, blake3, numpy native I/O
    _compat,                      # libraries: filelock's fork check, importlib.metadata
    _logging,                     # libraries: logging record times
    _environ,                     # identity: os.environ, putenv, tzset
    _session,                     # identity: sessions, terminals, signals
    _users,                       # identity: pwd, grp, ids
    _limits,                      # identity: resource limits, sysconf
    _audit,                       # guards: the audit hook
    _probes,                      # files: os.path.exists/isfile/isdir/islink/lexists
    _descriptors,                 # files: the other descriptor calls
    _interpreter,                 # identity: a process's signal handlers, atexit, fork hooks
    "_concurrency._asyncio",      # concurrency: asyncio's event loop
)


def install() -> None:
    """Install every route (idempotent) and rebind aliases in loaded modules."""
    global _installed
    if not _installed:
        _installed = True
        for entry in _INSTALL_ORDER:
            module = (importlib.import_module(f"{__name__}.{entry}") if isinstance(entry, str)
                      else entry)
            module.install()
        # trio is routed when the program imports it: importing it here was a
        # fifth of ``python -m scenarios run handshake``'s start-up (issue 16),
        # for a program that never uses it.  As before, a program must import
        # trio before the routes go in (its first spawn or run): trio binds
        # threading.RLock when imported, and its run loop needs a real one
        # (trio/_core/_entry_queue.py).
        when_imported("trio", _route_trio)
        AFTER_OWN_COPY.append(unbind_routes)
    _rebind_aliases()


def preload() -> None:
    """Import every module ``install()`` and ``World.run()`` may import later; install nothing.

    pytester's in-process runs drop from ``sys.modules`` every module first
    imported during them, while the routes those modules installed stay in
    ``os``, ``time``, ``mmap``...  Imported again, a route module took its own
    earlier routes for the originals (mmap's ``SimulatedMap`` subclassed
    itself: "metaclass conflict").  Imported before the first such run, the
    modules are in pytester's snapshot and outlive it.  The pytest plugin
    calls this when pytester is active.
    """
    import pkgutil

    for package_name in ("simfs._engine", "simfs._nfs", "simfs._os", "simfs._patch"):
        package = importlib.import_module(package_name)
        for found in pkgutil.walk_packages(package.__path__, package_name + "."):
            if found.name.endswith("._guard_helper"):
                continue  # the guard's supervisor: a script, run as its own process
            if found.name.endswith("._trio") and "trio" not in sys.modules:
                continue  # imports trio, which install() leaves to the program
            importlib.import_module(found.name)


def _route_trio(module: ModuleType) -> None:
    from ._concurrency import _trio

    _trio.install()


def _rebind_aliases() -> None:
    """Rebind, in every module loaded since the last scan, names bound to an original.

    The scan runs none of the modules' code: it reads their ``__dict__`` and
    their classes' through the C descriptors and tests ``type(value)``, never
    ``isinstance`` (which reads ``__class__``, and torch's deprecated
    ``reduce_op`` warns on every attribute read), and warnings are off
    while it runs (``-W error`` must not fail a spawn on a library's
    warning: issue 30).
    """
    global _modules_seen
    if len(sys.modules) == _modules_seen:
        return  # nothing imported since the last scan (every World.run() calls this)
    _modules_seen = len(sys.modules)
    with scanning():
        # dict.copy, not list(items()): making the item tuples can run the
        # collector, whose finalizers may import (measured: "dictionary
        # changed size during iteration" once in a full fast-tier run).
        for name, module in sys.modules.copy().items():
            if name in _scanned:
                continue
            namespace = module_namespace(module)
            if namespace is None:
                continue
            _scanned.add(name)
            if name in _KEEP_REAL or name == "simfs" or name.startswith("simfs."):
                continue
            _rebind_namespace(name, namespace)


def _rebind_namespace(name: str, namespace: dict[str, object]) -> None:
    for attribute, value in list(namespace.items()):
        found = REPLACEMENTS.get(id(value))
        if found is not None and found[0] is value:
            namespace[attribute] = found[1]
        elif type(value) is FunctionType:
            _rebind_defaults(value)
        elif issubclass(type(value), type) and class_module(value) == name:
            _rebind_class(value)  # type: ignore[arg-type]


# Class members whose function _rebind_class looks into (read as the C
# member ``__func__``; any other member is looked at as it is).
_WRAPPERS = (staticmethod, classmethod, MethodType)


def _rebind_class(cls: type) -> None:
    """Class attributes holding originals (3.13's glob: ``scandir = staticmethod(os.scandir)``)."""
    for attribute, member in list(class_namespace(cls).items()):
        inner = member.__func__ if type(member) in _WRAPPERS else member
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
        elif type(member) is FunctionType and id(member) in ROUTES_FOR_BUILTINS:
            # A class made after the routes went in holds the route itself.
            # Its metaclass may refuse the assignment: an import must not
            # fail over it (the class then binds, as before).
            with contextlib.suppress(AttributeError, TypeError):
                setattr(cls, attribute, staticmethod(member))
        elif type(inner) is FunctionType:
            _rebind_defaults(inner)


def unbind_routes(module: ModuleType) -> None:
    """The alias scan (``_rebind_namespace``) for a module loaded after the
    routes went in: a route standing in for a builtin, held by one of its
    classes, becomes a staticmethod, so that instances do not bind it, as
    they did not bind the builtin.

    For a process's own copy of a module, whose body ran with the routes in
    place: its ``class Formatter: converter = time.localtime`` holds the
    route, and ``self.converter(t)`` passed ``self`` as the time (every
    ``%(asctime)s`` log line inside a process failed with "localtime()
    takes at most 1 argument (2 given)", and logging swallowed it).
    """
    namespace = module_namespace(module)
    if namespace is None:
        return
    with scanning():
        _rebind_namespace(namespace.get("__name__", ""), namespace)


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
