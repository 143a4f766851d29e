"""The real working directory during a run: an empty sentinel, checked afterwards.

Native code that opens a relative path itself (a C or Rust extension that
simfs does not route) raises no audit event and passes no route: measured,
``safetensors.numpy.save_file("model.safetensors")`` and
``sqlite3.connect("x.db")`` each left a real file in the directory pytest ran
from.  While the scheduler runs, the real process's working directory is
therefore an empty directory of its own (mode 0500: for a non-root user any
write there fails at once), and after the run anything found in it fails the
run with ``SimulationEscape`` and is removed, so nothing reaches the user's
real directory.  Simulated processes never see this directory: their
working directory is simulated (``os.getcwd`` is routed).

An empty ``sys.path`` entry (``python -c``, the REPL) means "the working
directory" to the import system; it stands for the original directory during
the run so that imports inside a simulated process still find the program's
modules.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from ..._engine._scheduler import Process
from ..._errors import SimfsError, SimulationEscape
from .._clocks._tz import world_timezone


class World(Protocol):
    """What a run's boundary needs of the world that runs (``World.run`` passes itself)."""

    @property
    def tz(self) -> str: ...

    @property
    def processes(self) -> Sequence[Process]: ...

    @property
    def hosts(self) -> Mapping[str, object]: ...

    @property
    def _escapes(self) -> list[SimfsError]: ...

_sentinel: str | None = None


def _sentinel_directory() -> str:
    global _sentinel
    if _sentinel is None or not os.path.isdir(_sentinel):
        _sentinel = tempfile.mkdtemp(prefix="simfs-cwd-")
        os.chmod(_sentinel, 0o500)
        atexit.register(shutil.rmtree, _sentinel, True)
    return _sentinel


@contextlib.contextmanager
def real_cwd_sentinel(world: World) -> Iterator[None]:
    """Run a block with the real cwd in the sentinel; a file left there is an escape.

    The block also runs in the world's time zone (``_tz``): both are the
    process-wide state a run must not read from the real machine.
    """
    with world_timezone(world.tz), _sentinel_cwd(world):
        yield


@contextlib.contextmanager
def _sentinel_cwd(world: World) -> Iterator[None]:
    try:
        real = os.getcwd()
    except FileNotFoundError:
        # The real cwd was removed: the kernel creates nothing relative to it.
        yield
        return
    sentinel = _sentinel_directory()
    replaced = [index for index, entry in enumerate(sys.path) if entry == ""]
    for index in replaced:
        sys.path[index] = real
    os.chdir(sentinel)
    try:
        yield
    finally:
        os.chdir(real)
        for index in replaced:
            if index < len(sys.path) and sys.path[index] == real:
                sys.path[index] = ""
        left = sorted(os.listdir(sentinel))
        if left:
            _clear(sentinel)
            world._escapes.append(_escape(world, left))


def _clear(sentinel: str) -> None:
    os.chmod(sentinel, 0o700)
    for name in os.listdir(sentinel):
        path = os.path.join(sentinel, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    os.chmod(sentinel, 0o500)


def _escape(world: World, left: list[str]) -> SimulationEscape:
    # Native code leaves no trace of who called it: name everyone who could have.
    processes = ", ".join(process.name for process in world.processes)
    hosts = ", ".join(world.hosts)
    return SimulationEscape(
        processes, hosts,
        f"native code created {left!r} in the real working directory (a C or Rust "
        "extension opened a relative path itself, below every route); pass it a "
        "simulated file object, or a path it reads through open()")
