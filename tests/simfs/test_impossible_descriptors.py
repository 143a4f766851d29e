"""A descriptor number no process can hold fails with EBADF, as on Linux.

Linux never hands out a descriptor at or above ``fs.nr_open`` (default
1 << 20, fs/file.c) or below 0, so the kernel's answer there is ``EBADF``
on any machine; filelock's suite checks that locking such a number raises
instead of silently succeeding.  A number that could be one of the test
process's real descriptors stays a loud escape.  The path calls that take a
descriptor (os.supports_fd) answer the same; the others, and every call given
something that is no path at all, raise the real call's own TypeError.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable

import pytest

from simfs import SimulationEscape, World

CALLS: list[Callable[[], object]] = [
    lambda: os.fstat(1 << 20), lambda: os.close(-1), lambda: os.read(1 << 21, 1),
    lambda: fcntl.flock(1 << 20, fcntl.LOCK_EX | fcntl.LOCK_NB),
    lambda: fcntl.lockf(1 << 20, fcntl.LOCK_EX),
    # The path calls that also take a descriptor.
    lambda: os.stat(1 << 20), lambda: os.listdir(1 << 20), lambda: os.scandir(1 << 21),
    lambda: os.chdir(1 << 20), lambda: os.chmod(1 << 20, 0o644), lambda: os.utime(1 << 20),
    lambda: os.truncate(1 << 20, 0), lambda: os.chown(1 << 20, 0, 0),
    lambda: os.statvfs(1 << 20),
]


def _error_of(call: Callable[[], object]) -> str:
    try:
        call()
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


@pytest.mark.parametrize("call", CALLS)
def test_a_descriptor_beyond_nr_open_or_negative_is_ebadf_reading_as_the_real_one(call):
    world = World(seed=0)
    process = world.spawn(world.host("a"), _error_of, call)
    world.run()
    assert process.result() == _error_of(call)
    assert process.result().startswith("OSError: [Errno 9] Bad file descriptor")


def test_a_number_that_could_be_a_real_descriptor_is_still_an_escape():
    world = World(seed=0)
    world.spawn(world.host("a"), os.fstat, 1000)
    with pytest.raises(SimulationEscape, match=r"os.fstat\(1000\) on a real file descriptor"):
        world.run()


@pytest.mark.parametrize("call", [
    lambda: os.access(5, os.F_OK), lambda: os.readlink(5), lambda: os.mkdir(1 << 20),
    lambda: os.rename(5, "/shared/x"), lambda: os.stat(2.5), lambda: os.listdir(object()),
    lambda: os.open(None, os.O_RDONLY), lambda: os.symlink(3, "/shared/x"),
    lambda: os.scandir(2.5),
])
def test_a_first_argument_that_is_no_path_is_refused_as_the_real_call_refuses_it(call):
    def type_error_of(call: Callable[[], object]) -> str:
        try:
            call()
        except TypeError as error:
            return str(error)
        return "no error"

    world = World(seed=0)
    process = world.spawn(world.host("a"), type_error_of, call)
    world.run()
    assert process.result() == type_error_of(call) != "no error"


class _Text(str):
    """A str subclass, as numpy.str_ is: a path, not a thing with __fspath__."""


def test_a_str_subclass_is_a_path_and_none_is_the_working_directory_for_listdir():
    def program() -> list[object]:
        os.makedirs("/shared/d")
        os.chdir("/shared/d")
        with open("f", "w"):
            pass
        return [os.stat(_Text("/shared/d/f")).st_size, os.path.exists(_Text("/shared/d/f")),
                os.listdir(None), [entry.name for entry in os.scandir(None)]]

    world = World(seed=0)
    process = world.spawn(world.host("a"), program)
    world.run()
    assert process.result() == [0, True, ["f"], ["f"]]
