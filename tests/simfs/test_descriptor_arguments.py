"""What a descriptor argument may be, inside the world as in CPython, call by call.

CPython converts most descriptor arguments as an ``int`` (``__index__``): a
file object there is a ``TypeError`` (``os.read(file, 2)``, ``os.fstat(file)``).
Only ``fsync``, ``fdatasync``, ``fchdir`` and ``fpathconf`` convert theirs
as ``fildes`` (``PyObject_AsFileDescriptor``): an int or an object with
``fileno()``, never an ``__index__`` object, never a negative number
(``ValueError``).  Measured on CPython 3.11, 3.12 and 3.13; each test below
asks the real call, outside the world, for the answer the route must give
(simfs/_patch/_files/_fds.py ``descriptor``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import pytest

from simfs import World

FILE = "/shared/data"
DIRECTORY = "/shared/dir"

# Each descriptor call of os with the rest of a call that works on a fresh descriptor.
CALLS: dict[str, tuple[object, ...]] = {
    "read": (2,), "write": (b"x",), "pread": (1, 0), "pwrite": (b"x", 0), "close": (),
    "fsync": (), "fdatasync": (), "fstat": (), "lseek": (0, 0), "ftruncate": (0,), "dup": (),
    "fchmod": (0o644,), "fchown": (-1, -1), "fstatvfs": (), "fchdir": (),
    "fpathconf": ("PC_NAME_MAX",),
}


class _Index:
    """An integer-like object that is no file: ``__index__`` and nothing else."""

    def __init__(self, number: int) -> None:
        self.number = number

    def __index__(self) -> int:
        return self.number


class _HasFileno:
    """A file-like object that is no integer: ``fileno()`` and nothing else."""

    def __init__(self, number: int) -> None:
        self.number = number

    def fileno(self) -> int:
        return self.number


# How each kind of argument is made from an open descriptor.
KINDS: dict[str, Callable[[int], object]] = {
    "int": lambda fd: fd,
    "__index__ object": _Index,
    "object with fileno()": _HasFileno,
    "float": float,
    "negative int": lambda fd: -1,
}


def _outcome(function: Callable[..., object], *args: object) -> str:
    """"accepted" when the call converted its descriptor, else the error's type."""
    try:
        function(*args)
    except (TypeError, ValueError) as error:
        return type(error).__name__
    except OSError:
        return "accepted"  # converted, then refused by the system call (EBADF for -1)
    return "accepted"


def _real_outcomes(name: str) -> dict[str, str]:
    """What real CPython does with each kind of argument, on a real descriptor."""
    outcomes = {}
    with tempfile.TemporaryDirectory() as directory:
        for kind, make in KINDS.items():
            path = directory if name == "fchdir" else os.path.join(directory, "file")
            fd = os.open(path, os.O_RDONLY if name == "fchdir" else os.O_RDWR | os.O_CREAT)
            cwd = os.getcwd()
            try:
                outcomes[kind] = _outcome(getattr(os, name), make(fd), *CALLS[name])
            finally:
                os.chdir(cwd)
                try:
                    os.close(fd)
                except OSError:
                    pass
    return outcomes


def _simulated_outcomes(name: str) -> dict[str, str]:
    """The same calls inside the world, on simulated descriptors."""

    def program() -> dict[str, str]:
        outcomes = {}
        for kind, make in KINDS.items():
            if name == "fchdir":
                fd = os.open(DIRECTORY, os.O_RDONLY)
            else:
                fd = os.open(FILE, os.O_RDWR | os.O_CREAT)
            outcomes[kind] = _outcome(getattr(os, name), make(fd), *CALLS[name])
            try:
                os.close(fd)
            except OSError:
                pass
        return outcomes

    world = World(seed=1)
    world.server.mkdir(DIRECTORY)
    process = world.spawn(world.host("a"), program)
    world.run()
    result = process.result()
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize("name", [name for name in CALLS if name != "fpathconf"])
def test_each_descriptor_call_takes_the_arguments_cpython_takes_and_refuses_the_others(name):
    assert _simulated_outcomes(name) == _real_outcomes(name)


def test_fpathconf_refuses_what_cpython_refuses_before_the_world_refuses_the_call():
    # fpathconf on a simulated descriptor is refused loudly (it would read
    # the real machine's limits); what CPython's conversion refuses is
    # refused first, with CPython's own error.
    real = _real_outcomes("fpathconf")
    refused = {kind for kind, outcome in real.items() if outcome != "accepted"}
    assert refused == {"__index__ object", "float", "negative int"}

    def program() -> dict[str, str]:
        fd = os.open(FILE, os.O_RDWR | os.O_CREAT)
        return {kind: _outcome(os.fpathconf, KINDS[kind](fd), "PC_NAME_MAX")
                for kind in sorted(refused)}

    world = World(seed=1)
    process = world.spawn(world.host("a"), program)
    world.run()
    assert process.result() == {kind: real[kind] for kind in refused}
