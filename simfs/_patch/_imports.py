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
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .._engine._scheduler import current_process
from ._registry import outside_world

# Kept after a module's first load: a module may be loaded again, as a fresh
# object.  pytester's in-process runs drop from sys.modules what they first
# imported (multiprocessing.pool, say), and the next import made an unrouted
# Pool that reached the real os.pipe: which test failed depended on the order
# tests ran in.  A process's own copy of a pure-Python module is a fresh
# load too.
_routes: dict[str, list[Callable[[ModuleType], None]]] = {}


def when_imported(name: str, route: Callable[[ModuleType], None]) -> None:
    """Call ``route(module)`` now if ``name`` is loaded, and right after every later load."""
    _routes.setdefault(name, []).append(route)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    module = sys.modules.get(name)
    if module is not None:
        with outside_world():
            route(module)


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
                route(module)
            return
        with outside_world():
            for route in routes:
                route(module)


_finder = _RouteAfterImport()
