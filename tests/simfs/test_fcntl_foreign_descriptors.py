"""fcntl.fcntl and fcntl.ioctl inside the world never reach a real descriptor.

As for the os calls (simfs/_patch/_files/_fds.py): a number no Linux process can
hold (negative, or at least fs.nr_open's default 1 << 20, fs/file.c) is
EBADF; a number the simulated process does not hold may be one of the test
process's own descriptors and is a loud escape; the standard streams answer
as a batch job's pipes, and no descriptor is a terminal (tty_ioctl(4):
terminal requests on anything else are ENOTTY).
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
import termios
from collections.abc import Callable, Iterator

import pytest

from simfs import SimulationEscape, World


@pytest.fixture
def real_fd() -> Iterator[int]:
    """A descriptor of the test process itself (close-on-exec, as Python opens them)."""
    with tempfile.TemporaryFile() as real:
        yield real.fileno()


def _run(call: Callable[[], object]) -> object:
    world = World(seed=0)
    process = world.spawn(world.host("a"), call)
    world.run()
    return process.result()


@pytest.mark.parametrize("call", ["fcntl", "ioctl"])
def test_fcntl_on_a_descriptor_of_the_test_process_is_an_escape_not_the_real_call(
        real_fd: int, call: str) -> None:
    flags_before = fcntl.fcntl(real_fd, fcntl.F_GETFL)

    def program() -> object:
        if call == "fcntl":
            return fcntl.fcntl(real_fd, fcntl.F_SETFL, flags_before | os.O_NONBLOCK)
        return fcntl.ioctl(real_fd, termios.FIONREAD, b"\0" * 4)

    world = World(seed=0)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match=rf"fcntl\.{call}\({real_fd}, \d+\) on a real"):
        world.run()
    assert fcntl.fcntl(real_fd, fcntl.F_GETFL) == flags_before


CALLS: list[Callable[[], object]] = [
    lambda: fcntl.fcntl(1 << 20, fcntl.F_GETFD),
    lambda: fcntl.ioctl(1 << 21, termios.FIONREAD, b"\0" * 4),
    lambda: fcntl.fcntl(-1, fcntl.F_GETFD), lambda: fcntl.flock(-2, fcntl.LOCK_EX),
]


def _error_of(call: Callable[[], object]) -> str:
    try:
        call()
    except (OSError, ValueError) as error:
        return repr(error)
    return "no error"


@pytest.mark.parametrize("call", CALLS)
def test_fcntl_on_an_impossible_descriptor_fails_as_the_real_call_does(call):
    # Beyond nr_open: EBADF from the kernel; negative: ValueError before any call.
    assert _run(lambda: _error_of(call)) == _error_of(call) != "no error"


def test_standard_streams_are_a_batch_job_pipes_and_no_descriptor_is_a_terminal():
    def program() -> list[object]:
        answers: list[object] = [fcntl.fcntl(0, fcntl.F_GETFL), fcntl.fcntl(1, fcntl.F_GETFL),
                                 fcntl.fcntl(2, fcntl.F_GETFD)]
        with open("/shared/f", "wb") as file:
            for fd in (1, file.fileno()):
                try:
                    fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
                except OSError as error:
                    answers.append(error.errno)
        return answers

    assert _run(program) == [os.O_RDONLY, os.O_WRONLY, 0, errno.ENOTTY, errno.ENOTTY]


def test_changing_the_flags_of_a_standard_stream_is_an_escape():
    world = World(seed=0)
    world.spawn(world.host("a"), fcntl.fcntl, 1, fcntl.F_SETFL, os.O_NONBLOCK)
    with pytest.raises(SimulationEscape, match=r"fcntl\.fcntl\(1, \d+\) would change"):
        world.run()
