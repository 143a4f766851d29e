"""A safety net under the routes: real filesystem calls made inside the world.

Routes catch calls made through ``os``, ``open`` and friends; an original
captured some other way (a dict of functions, a closure, a class attribute
we missed) would still reach the real machine.  CPython raises audit events
from its C implementations of open, scandir, mkdir, rename and the rest, so
an audit hook sees those calls whatever name they were made through, and
turns one made inside a simulated process into a loud ``SimulationEscape``.

Reads of code (imports, and tracebacks via ``linecache``, which runs with
routing off) are allowed: loading a module is not the program's I/O.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .._engine._scheduler import current_process
from ._registry import escape

_READS = frozenset({"os.listdir", "os.scandir"})
_WRITES = frozenset({"os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.link", "os.symlink",
                     "os.chmod", "os.chown", "os.truncate", "os.utime", "os.chdir"})
_CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".pyi", ".json", ".txt", ".typed")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _code_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots.update(entry for entry in sys.path if entry and entry.startswith("/"))
    return tuple(sorted(roots))


def _import_read(path: str) -> bool:
    return path.endswith(_CODE_SUFFIXES) or path.startswith(_code_roots())


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" and event not in _READS and event not in _WRITES:
        return
    process = current_process()
    if process is None:
        return
    path = args[0] if args else None
    if event == "open":
        if isinstance(path, int):
            return  # an fdopen of a descriptor the routes already vetted
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        reading = not flags & _WRITE_FLAGS and not set(mode) & set("wax+")
        if reading and isinstance(path, str) and _import_read(path):
            return
    elif event in _READS and isinstance(path, str) and _import_read(path):
        return
    raise escape(process, f"a real {event}({path!r}) ran inside the simulation (an original "
                          "function captured where simfs could not reroute it)")


_installed = False


def install() -> None:
    global _installed
    if not _installed:
        _installed = True
        sys.addaudithook(_hook)
