"""Per-process bookkeeping that coordination libraries keep in module globals.

Simulated processes share one interpreter, so a module global that a real
machine keeps once per OS process is shared by every simulated process on
every host.  filelock (3.x and 4.x) records the pid that built its fork
bookkeeping and, when ``os.getpid()`` differs, concludes that it runs in a
fork child and resets that state: measured, with two hosts each taking a
``FileLock``, host B's first call wiped host A's in-flight transitions
(4.3: ``KeyError`` in ``fork_transition``; 3.32: A's descriptors torn down).

Package metadata is the other shared piece: ``importlib.metadata`` (which
portalocker calls at import) stats and lists ``sys.path``; that is loading
code, as an import is, so it runs with routing off.

A simulated process never forks (``os.fork`` and every spawn route refuse
it), so inside the world a changed pid means "another simulated process",
never "a fork child": the check is routed to do nothing there.  Outside the
world, and in real forks, the library's own check runs unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .._engine._scheduler import current_process
from ._registry import patch, real_outside

# (module, function) pairs that reset per-process state when the pid changes.
_FORK_CHECKS = (
    ("filelock._core._fork", "ensure_current_process"),  # filelock 4.x
    ("filelock._api", "_ensure_current_process"),  # filelock 3.x
    ("filelock._api", "_reset_child_after_fork"),  # filelock 3.x
)
_done: set[tuple[str, str]] = set()


def _outside_world_only(real: Callable[..., Any]) -> Callable[..., Any]:
    def route(*args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return real(*args, **kwargs)
        return None

    return route


class _RouteAfterImport(importlib.abc.MetaPathFinder):
    """Routes a watched module as soon as it is imported, even inside a run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Routing(spec.loader)
                return spec
        return None


class _Routing(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _route_loaded()


_WATCHED = frozenset(module for module, _ in _FORK_CHECKS)
_finder = _RouteAfterImport()


_METADATA = ("distribution", "distributions", "metadata", "version", "entry_points", "files",
             "requires", "packages_distributions")


def install() -> None:
    """Route the fork checks of libraries loaded now, and of those imported later."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
        import importlib.metadata

        for name in _METADATA:
            if hasattr(importlib.metadata, name):
                patch(importlib.metadata, name, real_outside(getattr(importlib.metadata, name)))
    _route_loaded()


def _route_loaded() -> None:
    for module_name, function in _FORK_CHECKS:
        module = sys.modules.get(module_name)
        if module is None or (module_name, function) in _done:
            continue
        real = getattr(module, function, None)
        if real is None:
            continue
        _done.add((module_name, function))
        patch(module, function, _outside_world_only(real))
