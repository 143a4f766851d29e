"""Route a module when it is imported, whenever that happens.

Routes for libraries (numpy, safetensors, filelock, ``multiprocessing.pool``
...) are installed only if the program uses them, and again each time the
module is loaded afresh: importing numpy just to
route it cost about a second of the first ``run()`` on a loaded 2-core
machine (measured with ``-X importtime``), and ``importlib.metadata`` as much
again.  A module already imported is routed at once; one imported later,
even for the first time inside a simulated process, is routed right after
its own code has run and before the importer gets it back, so no call can
slip past the route.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .._engine._scheduler import current_process
from .._errors import SimfsError
from ._registry import outside_world

# Kept after a module's first load: a module may be loaded again, as a fresh
# object.  pytester's in-process runs drop from sys.modules what they first
# imported (multiprocessing.pool, say), and the next import made an unrouted
# Pool that reached the real os.pipe: which test failed depended on the order
# tests ran in.  A process's own copy of a pure-Python module is a fresh
# load too.
_routes: dict[str, list[Callable[[ModuleType], None]]] = {}

# Routes that could not be installed, by module name: what to tell the user.
# A library whose internals moved in a version simfs has not met would do its
# native file I/O on the real machine inside a world, so worlds refuse to run
# while it is loaded (``refuse_unrouted``) rather than let that happen quietly.
_broken: dict[str, str] = {}


def _route(route: Callable[[ModuleType], None], module: ModuleType) -> None:
    """Run one route on a freshly loaded module; a route that fails is reported, loudly."""
    try:
        route(module)
    except Exception as error:
        top = module.__name__.partition(".")[0]
        version = getattr(sys.modules.get(top), "__version__", None)
        message = (
            f"simfs could not route {module.__name__}"
            f"{f' ({top} {version})' if isinstance(version, str) else ''}: its route "
            f"{route.__qualname__} failed with {type(error).__name__}: {error}. This "
            "version's entry points are not the ones simfs was written against, so inside "
            "a world its native file I/O would reach the real machine; simulated worlds "
            "refuse to run while it is loaded (docs/libraries.md lists the versions "
            "tested)")
        _broken[module.__name__] = message
        if current_process() is not None:
            raise SimfsError(message) from error
        warnings.warn(message, RuntimeWarning, stacklevel=2)


def refuse_unrouted() -> None:
    """Raise if a loaded library's route failed to install (``World.run`` asks)."""
    loaded = [message for name, message in sorted(_broken.items()) if name in sys.modules]
    if loaded:
        raise SimfsError("\n".join(loaded))


def when_imported(name: str, route: Callable[[ModuleType], None]) -> None:
    """Call ``route(module)`` now if ``name`` is loaded, and right after every later load."""
    _routes.setdefault(name, []).append(route)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    module = sys.modules.get(name)
    if module is not None:
        with outside_world():
            _route(route, module)


class _RouteAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _routes:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RoutingLoader(spec.loader)
                return spec
        return None


class _RoutingLoader(importlib.abc.Loader):
    """The module's own loader, then its routes."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        routes = _routes.get(module.__name__, ())
        if current_process() is not None:
            # Imported inside a process: the routes run routed, as the body
            # did.  With routing off, a route's own import of the package
            # being imported (torch.serialization's route imports torch,
            # whose import is still running) took Python's module lock under
            # the real thread id while the import held it under the
            # process's: a real deadlock (measured: torch first imported
            # inside a process hung; issue 30).  A route makes no I/O.
            for route in routes:
                _route(route, module)
            return
        with outside_world():
            for route in routes:
                _route(route, module)


_finder = _RouteAfterImport()
