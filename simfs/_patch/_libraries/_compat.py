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

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._engine._scheduler import current_process
from .._imports import when_imported
from .._registry import patch, real_outside

# (module, function) pairs that reset per-process state when the pid changes.
_FORK_CHECKS = (
    ("filelock._core._fork", "ensure_current_process"),  # filelock 4.x
    ("filelock._api", "_ensure_current_process"),  # filelock 3.x
    ("filelock._api", "_reset_child_after_fork"),  # filelock 3.x
)


def _outside_world_only(real: Callable[..., Any]) -> Callable[..., Any]:
    def route(*args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return real(*args, **kwargs)
        return None

    return route


_METADATA = ("distribution", "distributions", "metadata", "version", "entry_points", "files",
             "requires", "packages_distributions")


def _route_metadata(metadata: ModuleType) -> None:
    for name in _METADATA:
        if hasattr(metadata, name):
            patch(metadata, name, real_outside(getattr(metadata, name)))


def _route_fork_check(function: str) -> Callable[[ModuleType], None]:
    def route(module: ModuleType) -> None:
        real = getattr(module, function, None)
        if real is not None:
            patch(module, function, _outside_world_only(real))

    return route


_installed = False


def install() -> None:
    """Route the fork checks and metadata reads, now or when their modules load."""
    global _installed
    if _installed:
        return
    _installed = True
    when_imported("importlib.metadata", _route_metadata)
    for module_name, function in _FORK_CHECKS:
        when_imported(module_name, _route_fork_check(function))
