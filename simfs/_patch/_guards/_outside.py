"""Real threads of the test process on a simulated mount's path while a world runs.

A thread started outside every world (a ``ThreadPoolExecutor`` worker or an
event-loop thread made before the world, zarr's ``zarr_io`` loop thread once
zarr ran in the test process) is not a simulated process: its calls have no
current process, so every route sends them to the real machine.  Measured
before this guard (issue 30): zarr's loop thread, handed a write by a
simulated process, created a real ``/shared/x/acts.zarr/zarr.json`` on the
machine, and the run ended in a misleading ``Deadlock``.

So while a world runs, its export's path is *watched*: a call from such a
thread on a path under it is refused with ``RealThreadEscape`` (naming the
thread, the call and the path, and saying the thread was started outside
the world), recorded on every running world whose export it names, which
``run()`` raises.  It is checked twice, before anything happens:

- by the routes (``_os``, ``_io``), for the calls that raise no audit event
  (``os.stat``, ``os.access``, ``os.readlink``, ``os.statvfs``, ``os.lstat``);
- by the audit hook (``_audit``), for every call CPython audits (``open``,
  ``mkdir``, ``rename``, ``listdir`` ...) whatever name it was made through,
  so nothing under the export is ever created on the real disk by Python
  code of such a thread.

Threads of the worlds themselves (``_routing.world_threads``: engine threads,
process threads) are never refused here: routing off there is deliberate
(``outside_world``).  A host's local disks are not watched: their real
counterparts (``/tmp``) are the test process's own, which pytest and the
harness use during a run.  Native code of such a thread (a C or Rust
library's own I/O) raises no audit event and is not seen.

Cost: the routes test one module global (the tuple of watched prefixes,
empty when no world runs) on their outside-the-world branch only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from ..._engine._routing import real_get_ident, world_threads
from ..._errors import SimulationEscape

# "/shared/" for each running world's export (a tuple for str.startswith).
PREFIXES: tuple[str, ...] = ()
# export prefix -> the escapes lists of the running worlds that export it.
_watching: dict[str, list[list[Any]]] = {}
_real_current_thread = threading.current_thread


class RealThreadEscape(SimulationEscape):
    """A thread of the test process, started outside the world, reached a simulated mount.

    Raised in that thread before its call acts, and by ``World.run()``.
    """

    def __init__(self, thread: str, call: str, path: str) -> None:
        self.thread = thread
        self.call = call
        self.path = path
        self.process = thread
        self.host = ""
        self.what = (f"{call}({path!r}) from thread {thread!r}, a real thread of the test "
                     "process started outside the world")
        Exception.__init__(
            self,
            f"thread {thread!r} of the test process, started outside the world (or by "
            "native code, whose threads are no simulated process's), called "
            f"{call}({path!r}) under the simulated export while a world ran: a real "
            "thread's file calls reach the real disk, never the simulated files, so it was "
            "refused before it acted.  A pool or event loop made before the world (a "
            "module-level ThreadPoolExecutor, a library's loop thread such as zarr's) runs "
            "real threads; make it inside a simulated process (its threads are then "
            "simulated), or use it only outside World.run()")


@contextlib.contextmanager
def watching(export: str, escapes: list[Any]) -> Iterator[None]:
    """Watch ``export``'s path for real threads while a world runs (``World.run``)."""
    global PREFIXES
    prefix = export.rstrip("/") + "/"
    _watching.setdefault(prefix, []).append(escapes)
    PREFIXES = tuple(_watching)
    try:
        yield
    finally:
        lists = _watching[prefix]
        lists.remove(escapes)
        if not lists:
            del _watching[prefix]
        PREFIXES = tuple(_watching)


def _text(path: object) -> str | None:
    if isinstance(path, str):
        return path
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if hasattr(type(path), "__fspath__"):
        with contextlib.suppress(Exception):
            return _text(os.fspath(path))  # type: ignore[call-overload]
    return None


def check(call: str, path: object) -> None:
    """Refuse ``call`` on ``path`` from a real thread outside the worlds, if watched.

    Called only where the calling thread has no current process and
    ``PREFIXES`` is not empty.
    """
    text = _text(path)
    if text is None:
        return
    prefixes = PREFIXES
    matched = [prefix for prefix in prefixes if text.startswith(prefix) or text == prefix[:-1]]
    if not matched or real_get_ident() in world_threads:
        return
    error = RealThreadEscape(_real_current_thread().name, call, text)
    for prefix in matched:
        for escapes in _watching.get(prefix, ()):
            escapes.append(error)
    raise error
