"""Bookkeeping shared by the patch modules: originals, replacements, aliases.

Every route decides per call: inside a simulated process it goes to that
process's syscall layer or clock; anywhere else (the test body, pytest,
Hypothesis, the scheduler itself) it calls the original.  So the patches can
stay installed for the life of the interpreter (docs/design.md, "Unmodified
code: the routes").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import BuiltinFunctionType, FunctionType
from typing import Any

from .._engine._scheduler import Process, current_process, routing
from .._errors import SimulationEscape

# id(original) -> replacement, for rebinding names bound by "from os import stat".
REPLACEMENTS: dict[int, tuple[object, object]] = {}
_patched: set[tuple[int, str]] = set()
# ids of the Python-function routes standing in for a builtin.  A builtin
# stored in a class does not bind to instances; the route would
# (``logging.Formatter.converter = time.localtime``, then
# ``self.converter(t)``), so a class holding one gets it as a staticmethod
# (``simfs/_patch/__init__.py``, ``unbind_routes``).
ROUTES_FOR_BUILTINS: set[int] = set()


def patch(owner: Any, name: str, replacement: object) -> object:
    """Replace ``owner.name`` (a module or class attribute); return the original."""
    key = (id(owner), name)
    original = getattr(owner, name)
    if key in _patched:
        return original
    _patched.add(key)
    setattr(owner, name, replacement)
    REPLACEMENTS[id(original)] = (original, replacement)
    if type(replacement) is FunctionType and type(original) is BuiltinFunctionType:
        # Not a C type's method (a method descriptor, socket.socket.bind,
        # blake3.update_mmap): that binds, and so must its route.
        ROUTES_FOR_BUILTINS.add(id(replacement))
    if callable(replacement) and not isinstance(replacement, type):
        with contextlib.suppress(AttributeError, TypeError):
            replacement.__wrapped__ = original  # type: ignore[attr-defined]
            replacement.__name__ = getattr(original, "__name__", name)  # type: ignore[attr-defined]
            replacement.__qualname__ = getattr(original, "__qualname__", name)  # type: ignore[attr-defined]
            replacement.__doc__ = getattr(original, "__doc__", None)
    return original


def simulated(function: Callable[..., Any]) -> Callable[..., Any]:
    """The route standing in for ``function`` if it is a patched original, else itself."""
    found = REPLACEMENTS.get(id(function))
    if found is not None and found[0] is function and callable(found[1]):
        return found[1]
    return function


def escape(process: Process, what: str) -> SimulationEscape:
    """Record a loud escape on the process's world and return the error to raise."""
    return process.syscalls.escape(what)


def in_world(real: Callable[..., Any],
             simulated: Callable[..., Any]) -> Callable[..., Any]:
    """A route: ``simulated(process, *args)`` inside the world, ``real(*args)`` outside."""

    def route(*args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(*args, **kwargs)
        return simulated(process, *args, **kwargs)

    return route


@contextlib.contextmanager
def outside_world() -> Iterator[None]:
    """Run a block with routing off: it reaches the real machine.

    Used for the interpreter's own reads of source files (linecache, for
    tracebacks), which are not the simulated program's I/O.
    """
    process = current_process()
    routing.process = None
    try:
        yield
    finally:
        routing.process = process


def real_outside(function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``function`` so that it always runs with routing off."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return function(*args, **kwargs)
        with outside_world():
            return function(*args, **kwargs)

    return wrapper
