"""The rest of ``os`` inside the world: simulated, or refused naming the call.

Simulated descriptors start at 2**20, so an unrouted call on one failed with
EBADF: a wrong answer for a descriptor the program holds, silently.  And the
process-wide calls (ids, priority, CPUs, ``abort``, ``wait``) acted on the
test process itself.  simfs/_patch/_descriptors.py and _escapes.py list what
each does now; these tests hold them to it.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

import pytest

from simfs import SimulationEscape, World

FILE = "/shared/data"


def _run(program: Callable[[], object], seed: int = 1) -> tuple[object, World]:
    world = World(seed=seed)
    process = world.spawn(world.host("a"), program)
    world.run()
    return process.result(), world


def _errno_of(call: Callable[[], object]) -> object:
    try:
        return call()
    except OSError as error:
        return errno.errorcode[error.errno or 0]


def test_vectored_writes_and_reads_are_one_write_and_one_read_each():
    def writer() -> None:
        fd = os.open(FILE, os.O_WRONLY | os.O_CREAT)
        assert os.writev(fd, [b"ab", bytearray(b"cd"), memoryview(b"ef")]) == 6
        assert os.pwritev(fd, [b"X", b"Y"], 2) == 2
        os.close(fd)

    def reader() -> list[object]:
        time.sleep(1)
        fd = os.open(FILE, os.O_RDONLY)  # close-to-open: the writer's bytes
        first, rest = bytearray(3), bytearray(10)
        got = [os.readv(fd, [first, rest]), bytes(first), bytes(rest[:3])]
        small = bytearray(2)
        got += [os.preadv(fd, [small], 2), bytes(small)]
        os.close(fd)
        return got

    world = World(seed=1)
    world.spawn(world.host("a"), writer)
    reading = world.spawn(world.host("b"), reader)
    world.run()
    assert reading.result() == [6, b"abX", b"Yef", 2, b"XY"]
    # The trace names pwrite and pwritev "write", as it does os.pwrite.
    assert [event.outcome for event in world.trace.select(host="a", op="write")] == ["6", "2"]


def test_os_lockf_is_a_posix_write_lock_from_the_offset_that_f_test_sees():
    # glibc's lockf: F_LOCK/F_TLOCK set a write lock with F_SETLKW/F_SETLK
    # from the current offset, F_TEST asks F_GETLK with a read lock and
    # fails with EACCES when another process holds one; a conflicting
    # F_SETLK is EAGAIN on Linux (fs/locks.c).
    def holder() -> None:
        fd = os.open(FILE, os.O_RDWR | os.O_CREAT)
        os.lockf(fd, os.F_TLOCK, 0)
        assert os.lockf(fd, os.F_TEST, 0) is None  # its own lock
        time.sleep(2)
        os.lockf(fd, os.F_ULOCK, 0)
        time.sleep(2)
        os.close(fd)

    def other() -> list[object]:
        time.sleep(1)
        fd = os.open(FILE, os.O_RDWR)
        answers = [_errno_of(lambda: os.lockf(fd, os.F_TEST, 0)),
                   _errno_of(lambda: os.lockf(fd, os.F_TLOCK, 0))]
        os.lseek(fd, 10, os.SEEK_SET)
        answers.append(_errno_of(lambda: os.lockf(fd, os.F_TEST, 5)))  # 10..15: locked too
        time.sleep(2)
        answers += [_errno_of(lambda: os.lockf(fd, os.F_TEST, 0)),
                    _errno_of(lambda: os.lockf(fd, os.F_TLOCK, 0))]
        os.close(fd)
        return answers

    world = World(seed=1)
    world.host("a")
    world.spawn("a", holder)
    asking = world.spawn(world.host("b"), other)
    world.run()
    assert asking.result() == ["EACCES", "EAGAIN", "EACCES", None, None]


def test_fchdir_and_chdir_of_a_descriptor_enter_the_open_directory():
    def program() -> list[object]:
        os.makedirs("/shared/d/e")
        with open("/shared/d/e/f", "w") as file:
            file.write("x")
        directory = os.open("/shared/d/e", os.O_RDONLY)
        os.fchdir(directory)
        answers: list[object] = [os.getcwd(), os.getcwdb(), open("f").read()]
        os.chdir("/shared")
        os.chdir(directory)
        answers.append(os.getcwd())
        plain = os.open("/shared/d/e/f", os.O_RDONLY)
        answers.append(_errno_of(lambda: os.fchdir(plain)))
        return answers

    assert _run(program)[0] == ["/shared/d/e", b"/shared/d/e", "x", "/shared/d/e", "ENOTDIR"]


def test_closerange_closes_the_simulated_descriptors_and_no_real_one():
    real_before = sorted(os.listdir("/proc/self/fd"))

    def program() -> list[object]:
        fds = [os.open(f"/shared/f{i}", os.O_WRONLY | os.O_CREAT) for i in range(3)]
        os.closerange(0, 1 << 30)
        return [_errno_of(lambda fd=fd: os.fstat(fd)) for fd in fds]

    assert _run(program)[0] == ["EBADF"] * 3
    assert sorted(os.listdir("/proc/self/fd")) == real_before


def test_posix_fadvise_hints_are_events_and_dontneed_is_refused():
    def program() -> None:
        fd = os.open(FILE, os.O_RDWR | os.O_CREAT)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    world = World(seed=1)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match="only the access-pattern hints"):
        world.run()
    assert [event.path for event in world.trace.select(op="posix_fadvise")] == [FILE]


REFUSED: list[tuple[str, Callable[[int], object]]] = [
    ("posix_fallocate", lambda fd: os.posix_fallocate(fd, 0, 10)),
    ("copy_file_range", lambda fd: os.copy_file_range(fd, fd, 1, 0, 5)),
    ("splice", lambda fd: os.splice(fd, fd, 1)),
    ("dup2", lambda fd: os.dup2(fd, fd + 1)),
    ("fpathconf", lambda fd: os.fpathconf(fd, "PC_NAME_MAX")),
    ("get_blocking", lambda fd: os.get_blocking(fd)),
    ("set_blocking", lambda fd: os.set_blocking(fd, False)),
    ("get_inheritable", lambda fd: os.get_inheritable(fd)),
    ("set_inheritable", lambda fd: os.set_inheritable(fd, True)),
]


@pytest.mark.parametrize(("name", "call"), REFUSED, ids=[name for name, _ in REFUSED])
def test_a_call_not_simulated_on_a_simulated_descriptor_is_refused_naming_it(name, call):
    def program() -> object:
        return call(os.open(FILE, os.O_RDWR | os.O_CREAT))

    world = World(seed=1)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match=rf"os\.{name}\("):
        world.run()


def test_a_standard_stream_s_flags_may_be_read_not_changed():
    blocking = os.get_blocking(2)

    def reads() -> tuple[bool, bool]:
        return os.get_blocking(2), os.get_inheritable(2)

    assert _run(reads)[0] == (blocking, os.get_inheritable(2))
    world = World(seed=1)
    world.spawn(world.host("a"), lambda: os.set_blocking(2, not blocking))
    with pytest.raises(SimulationEscape, match=r"os\.set_blocking\(2\)"):
        world.run()
    assert os.get_blocking(2) == blocking


PROCESS_WIDE: list[tuple[str, Callable[[], object]]] = [
    ("setuid", lambda: os.setuid(1000)), ("setgroups", lambda: os.setgroups([1])),
    ("nice", lambda: os.nice(5)), ("sched_setaffinity", lambda: os.sched_setaffinity(0, {0})),
    ("abort", lambda: os.abort()), ("pathconf", lambda: os.pathconf("/shared", "PC_NAME_MAX")),
]


@pytest.mark.parametrize(("name", "call"), PROCESS_WIDE, ids=[n for n, _ in PROCESS_WIDE])
def test_a_call_that_would_change_or_end_the_test_process_is_refused(name, call):
    ids, niceness = os.getresuid(), os.getpriority(os.PRIO_PROCESS, 0)
    world = World(seed=1)
    world.spawn(world.host("a"), call)
    with pytest.raises(SimulationEscape, match=rf"os\.{name}\("):
        world.run()
    assert (os.getresuid(), os.getpriority(os.PRIO_PROCESS, 0)) == (ids, niceness)


def test_a_simulated_process_has_no_children_to_wait_for():
    # It cannot fork, so wait* find none (ECHILD), and never reap the test
    # process's own children.
    def program() -> list[object]:
        return [_errno_of(lambda: os.waitpid(-1, os.WNOHANG)), _errno_of(os.wait),
                _errno_of(lambda: os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG))]

    assert _run(program)[0] == ["ECHILD"] * 3


def test_getrandom_is_seeded_like_urandom():
    def draw() -> bytes:
        return os.getrandom(16)

    first, again, other = _run(draw)[0], _run(draw)[0], _run(draw, seed=2)[0]
    assert first == again != other and len(first) == 16  # type: ignore[arg-type]
