"""Wrong answers other projects' test suites found inside the world (issue 24, item 5).

Each program runs twice: on a real file under ``tmp_path``, outside the
world, and on the simulated export inside it; the world must answer what
Linux and CPython answered.  Measured on Linux 6.18 (x86_64, ext4) with
CPython 3.11: ``os.open(path, O_WRONLY | O_APPEND)`` then ``F_GETFL`` is
0o102001 (the kernel adds its O_LARGEFILE, 0o100000, which glibc's
``os.O_LARGEFILE`` calls 0); clearing O_APPEND with ``F_SETFL`` makes the
next write land at the offset; ``fileno()`` of a closed file raises
``ValueError("I/O operation on closed file")``; ``Thread.start()`` returns
with ``ident`` and ``native_id`` set; ``fcntl.flock`` stored as a class
attribute is not bound to instances.
"""

from __future__ import annotations

import errno
import fcntl
import inspect
import os
import termios
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simfs import SimulationEscape, World

# The real fcntl functions, as a conftest that kept them before simfs's
# routes were installed holds them (each route wraps its original, so
# unwrapping finds it whether the routes are in yet or not).
REAL = {name: inspect.unwrap(getattr(fcntl, name)) for name in ("flock", "lockf", "fcntl", "ioctl")}


def _in_world(program: Callable[[str], object]) -> object:
    world = World(seed=0)
    process = world.spawn(world.host("a"), program, world.export)
    world.run()
    return process.result()


def _both(program: Callable[[str], object], tmp_path: Path) -> tuple[object, object]:
    """(what Linux answered on a real file, what the world answered)."""
    return program(str(tmp_path)), _in_world(program)


FLAGS = {
    "O_RDONLY": os.O_RDONLY,
    "O_WRONLY": os.O_WRONLY,
    "O_RDWR|O_CREAT|O_TRUNC": os.O_RDWR | os.O_CREAT | os.O_TRUNC,
    "O_WRONLY|O_APPEND": os.O_WRONLY | os.O_APPEND,
    "O_WRONLY|O_NONBLOCK": os.O_WRONLY | os.O_NONBLOCK,
    "O_RDONLY|O_SYNC": os.O_RDONLY | os.O_SYNC,
    "O_RDWR|O_DSYNC": os.O_RDWR | os.O_DSYNC,
    "O_RDONLY|O_NOFOLLOW|O_NOCTTY|O_CLOEXEC": os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY
    | os.O_CLOEXEC,
}


@pytest.mark.parametrize("name", list(FLAGS))
def test_f_getfl_answers_the_flags_linux_keeps_for_the_open_file(name: str,
                                                                  tmp_path: Path) -> None:
    flags = FLAGS[name]

    def program(directory: str) -> int:
        path = os.path.join(directory, "f")
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        fd = os.open(path, flags)
        try:
            return fcntl.fcntl(fd, fcntl.F_GETFL)
        finally:
            os.close(fd)

    real, simulated = _both(program, tmp_path)
    assert simulated == real, f"{name}: Linux {real:#o}, simfs {simulated:#o}"


@pytest.mark.parametrize("mode", ["rb", "w", "ab", "r+b", "x"])
def test_f_getfl_of_a_file_open_made_answers_as_linux(mode: str, tmp_path: Path) -> None:
    def program(directory: str) -> int:
        path = os.path.join(directory, "f")
        if mode != "x":
            open(path, "w").close()
        with open(path, mode) as file:
            return fcntl.fcntl(file.fileno(), fcntl.F_GETFL)

    real, simulated = _both(program, tmp_path)
    assert simulated == real


def test_f_getfl_of_a_directory_answers_as_linux(tmp_path: Path) -> None:
    def program(directory: str) -> int:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return fcntl.fcntl(fd, fcntl.F_GETFL)
        finally:
            os.close(fd)

    real, simulated = _both(program, tmp_path)
    assert simulated == real


def test_clearing_o_append_with_f_setfl_makes_the_next_write_land_at_the_offset(
        tmp_path: Path) -> None:
    def program(directory: str) -> bytes:
        path = os.path.join(directory, "log")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"x")
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
        os.write(fd, b"y")
        os.close(fd)
        with open(path, "rb") as file:
            return file.read()

    real, simulated = _both(program, tmp_path)
    assert real == b"y"  # the measurement this test stands on: the offset, not the end
    assert simulated == real


def test_setting_o_append_with_f_setfl_makes_writes_append(tmp_path: Path) -> None:
    def program(directory: str) -> bytes:
        path = os.path.join(directory, "log")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"abc")
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND)
        os.write(fd, b"d")
        os.close(fd)
        with open(path, "rb") as file:
            return file.read()

    real, simulated = _both(program, tmp_path)
    assert simulated == real


def test_f_setfl_changes_only_the_flags_linux_lets_change_and_dup_shares_them(
        tmp_path: Path) -> None:
    asked = (os.O_RDWR | os.O_NONBLOCK | os.O_TRUNC | os.O_CREAT | os.O_EXCL | os.O_SYNC
             | os.O_APPEND | os.O_ASYNC)

    def program(directory: str) -> tuple[int, ...]:
        path = os.path.join(directory, "f")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        copy = os.dup(fd)
        answers = [fcntl.fcntl(fd, fcntl.F_SETFL, 0), fcntl.fcntl(copy, fcntl.F_GETFL),
                   fcntl.fcntl(copy, fcntl.F_SETFL, asked), fcntl.fcntl(fd, fcntl.F_GETFL)]
        os.close(copy)
        os.close(fd)
        return tuple(answers)

    real, simulated = _both(program, tmp_path)
    assert simulated == real


@pytest.mark.parametrize("mode,buffering", [("wb", -1), ("w", -1), ("r+b", -1), ("ab", -1),
                                            ("rb", 0)])
def test_fileno_of_a_closed_file_raises_value_error_as_cpython(
        mode: str, buffering: int, tmp_path: Path) -> None:
    def program(directory: str) -> str:
        path = os.path.join(directory, "f")
        open(path, "w").close()
        file = open(path, mode, buffering=buffering)
        file.close()
        try:
            number = file.fileno()
        except ValueError as error:
            return f"ValueError: {error}"
        return f"returned {number}"

    real, simulated = _both(program, tmp_path)
    assert real == "ValueError: I/O operation on closed file"
    assert simulated == real


def test_thread_start_returns_with_ident_and_native_id_set() -> None:
    def program(directory: str) -> tuple[object, ...]:
        seen: list[tuple[int, int]] = []
        thread = threading.Thread(
            target=lambda: seen.append((threading.get_ident(), threading.get_native_id())))
        thread.start()
        at_start = (thread.ident, thread.native_id)
        thread.join()
        return at_start, seen[0]

    at_start, seen_by_thread = _in_world(program)
    assert at_start == seen_by_thread


def test_fcntl_functions_stored_on_a_class_are_not_bound_to_its_instances() -> None:
    def program(directory: str) -> tuple[object, ...]:
        class Locker:  # defined in the process: after the routes are in
            _flock = fcntl.flock
            _lockf = fcntl.lockf
            _fcntl = fcntl.fcntl
            _ioctl = fcntl.ioctl

        locker = Locker()
        path = os.path.join(directory, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        other = os.open(path, os.O_RDWR)
        locker._flock(fd, fcntl.LOCK_EX)
        try:
            locker._flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            flocked = "taken twice"
        except BlockingIOError:
            flocked = "held"
        locker._flock(fd, fcntl.LOCK_UN)  # NFS emulates flock with POSIX locks
        locker._lockf(fd, fcntl.LOCK_EX)
        flags = locker._fcntl(fd, fcntl.F_GETFL)
        try:
            locker._ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
            ioctl = "answered"
        except OSError as error:
            ioctl = errno.errorcode[error.errno or 0]
        return flocked, flags & os.O_ACCMODE, ioctl

    assert _in_world(program) == ("held", os.O_RDWR, "ENOTTY")


def test_an_fcntl_function_read_through_a_class_is_the_module_s_own_object() -> None:
    # portalocker 4.1's own suite (test_posix_locker_dispatch) asserts
    # ``FlockLocker().locker is fcntl.flock``: a builtin stored on a class is
    # the same object read through the class, an instance or the module.
    def program(directory: str) -> tuple[object, ...]:
        class Locker:
            _flock = fcntl.flock
            _lockf = fcntl.lockf

        locker = Locker()
        return (locker._flock is fcntl.flock, Locker._lockf is fcntl.lockf,
                callable(fcntl.flock), inspect.unwrap(fcntl.flock) is REAL["flock"])

    assert _in_world(program) == (True, True, True, True)


@pytest.mark.parametrize("name", list(REAL))
def test_a_real_fcntl_function_captured_before_the_routes_is_refused_on_a_simulated_file(
        name: str) -> None:
    real = REAL[name]
    assert isinstance(real, types.BuiltinFunctionType)
    arguments: dict[str, tuple[Any, ...]] = {
        "flock": (fcntl.LOCK_EX,), "lockf": (fcntl.LOCK_EX,), "fcntl": (fcntl.F_GETFL,),
        "ioctl": (termios.FIONREAD, b"\0" * 4)}

    def program(directory: str) -> object:
        fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        return real(fd, *arguments[name])

    world = World(seed=0)
    world.spawn(world.host("a"), program, world.export, name="pod")
    with pytest.raises(SimulationEscape) as raised:
        world.run()
    assert (raised.value.process, raised.value.host) == ("pod", "a")
    assert f"real fcntl.{name}(" in raised.value.what
    assert "captured before simfs's routes were installed" in raised.value.what
