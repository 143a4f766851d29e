"""The rest of ``os`` inside the world: simulated, or refused naming the call.

Simulated descriptors start at 2**20, so an unrouted call on one failed with
EBADF: a wrong answer for a descriptor the program holds, silently.  And the
process-wide calls (ids, priority, CPUs, ``abort``, ``wait``) acted on the
test process itself.  simfs/_patch/_files/_descriptors.py and _guards/_escapes.py list what
each does now; these tests hold them to it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable

import pytest

from simfs import SimulationEscape, World

from .helpers import run_apart

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
    ("splice", lambda fd: os.splice(fd, fd, 1)),
    ("dup2", lambda fd: os.dup2(fd, fd + 1)),
    ("fpathconf", lambda fd: os.fpathconf(fd, "PC_NAME_MAX")),
    ("set_inheritable", lambda fd: os.set_inheritable(fd, True)),
    ("fcntl.fcntl", lambda fd: fcntl.fcntl(fd, fcntl.F_SETFD, 0)),
]


@pytest.mark.parametrize(("name", "call"), REFUSED, ids=[name for name, _ in REFUSED])
def test_a_call_not_simulated_on_a_simulated_descriptor_is_refused_naming_it(name, call):
    def program() -> object:
        return call(os.open(FILE, os.O_RDWR | os.O_CREAT))

    world = World(seed=1)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match=rf"{'' if '.' in name else 'os.'}{name}\("):
        world.run()


def _descriptor_flags(directory: str) -> list[object]:
    fd = os.open(os.path.join(directory, "flags"), os.O_RDWR | os.O_CREAT, 0o644)
    seen: list[object] = [os.get_blocking(fd), os.get_inheritable(fd),
                          fcntl.fcntl(fd, fcntl.F_GETFD), fcntl.fcntl(fd, fcntl.F_GETFL)]
    os.set_blocking(fd, False)
    seen += [os.get_blocking(fd), fcntl.fcntl(fd, fcntl.F_GETFL)]
    os.set_inheritable(fd, False)
    fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    os.set_blocking(fd, True)
    seen += [os.get_blocking(fd), os.get_inheritable(fd), fcntl.fcntl(fd, fcntl.F_GETFD)]
    os.close(fd)
    return seen


def test_blocking_and_close_on_exec_of_a_simulated_descriptor_answer_as_a_real_file(tmp_path):
    # CPython's os.open makes every descriptor close-on-exec (PEP 446);
    # get/set_blocking are F_GETFL/F_SETFL with O_NONBLOCK (_Py_set_blocking).
    real = _descriptor_flags(str(tmp_path))
    world = World(seed=1)
    process = world.spawn(world.host("a"), _descriptor_flags, world.export)
    world.run()
    assert process.result() == real


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
    *([("unshare", lambda: os.unshare(0))] if hasattr(os, "unshare") else []),
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


def test_vectored_calls_check_their_buffers_as_the_real_ones_before_reading(tmp_path):
    # CPython takes a sequence of buffers, and for readv all writable, before
    # the read: the offset does not move.
    real = tmp_path / "real"
    real.write_bytes(b"abcdef")

    def errors(fd: int) -> list[str]:
        answers = []
        for call in (lambda: os.readv(fd, [b"xxxx"]), lambda: os.readv(fd, iter([bytearray(2)])),
                     lambda: os.writev(fd, (b for b in [b"x"]))):
            try:
                call()
            except (TypeError, BufferError) as error:
                answers.append(repr(error))
        return [*answers, str(os.lseek(fd, 0, os.SEEK_CUR))]

    fd = os.open(real, os.O_RDWR)
    expected = errors(fd)
    os.close(fd)

    def program() -> list[str]:
        with open(FILE, "wb") as file:
            file.write(b"abcdef")
        return errors(os.open(FILE, os.O_RDWR))

    assert _run(program)[0] == expected
    assert len(expected) == 4 and expected[-1] == "0"


def test_copy_file_range_copies_between_simulated_files_as_a_read_and_a_write():
    def program() -> list[object]:
        with open(FILE, "wb") as file:
            file.write(b"0123456789")
        src = os.open(FILE, os.O_RDONLY)
        dst = os.open("/shared/copy", os.O_RDWR | os.O_CREAT)
        copied = [os.copy_file_range(src, dst, 4), os.copy_file_range(src, dst, 3, 7, 8)]
        positions = [os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR)]
        appending = os.open("/shared/copy", os.O_WRONLY | os.O_APPEND)
        both = os.open(FILE, os.O_RDWR)
        failures = [_errno_of(lambda: os.copy_file_range(src, appending, 1)),
                    _errno_of(lambda: os.copy_file_range(both, both, 4, 0, 2))]
        return [copied, positions, os.pread(dst, 20, 0), failures]

    # copy_file_range(2): offsets given are used and left; O_APPEND output is
    # EBADF; overlapping ranges of one file are EINVAL.
    assert _run(program)[0] == [[4, 3], [4, 4], b"0123" + bytes(4) + b"789", ["EBADF", "EINVAL"]]


def test_closerange_goes_on_past_a_close_that_fails():
    from simfs import FaultPlan, FaultRule

    def program() -> list[object]:
        fds = [os.open(f"/shared/f{i}", os.O_WRONLY | os.O_CREAT) for i in range(3)]
        os.closerange(0, 1 << 30)
        return [_errno_of(lambda fd=fd: os.fstat(fd)) for fd in fds]

    world = World(seed=1, faults=FaultPlan([FaultRule(op="close", path="/shared/f0",
                                                      errno=errno.EIO)]))
    process = world.spawn(world.host("a"), program)
    world.run()
    assert process.result() == ["EBADF"] * 3


def test_a_file_object_works_where_cpython_takes_one_and_is_refused_where_not():
    def program() -> list[object]:
        os.mkdir("/shared/d")
        with open("/shared/d/f", "w") as file:
            os.fchdir(os.open("/shared/d", os.O_RDONLY))
            answers: list[object] = [os.getcwd()]
            try:
                os.lockf(file, os.F_TLOCK, 0)
            except TypeError as error:
                answers.append(str(error))
        return answers

    assert _run(program)[0] == [
        "/shared/d", "'_io.TextIOWrapper' object cannot be interpreted as an integer"]


def test_getrandom_refuses_what_the_kernel_refuses():
    def errors() -> list[object]:
        return [_errno_of(lambda: os.getrandom(-1)), _errno_of(lambda: os.getrandom(1, 8))]

    assert _run(errors)[0] == errors() == ["EINVAL", "EINVAL"]


@pytest.mark.parametrize("call", [lambda: os.close(1), lambda: os.ftruncate(1, 0),
                                  lambda: os.lseek(1, 0, os.SEEK_SET), lambda: os.dup(2),
                                  lambda: os.fchmod(2, 0o600)])
def test_a_standard_stream_is_never_closed_or_changed_from_inside(call):
    world = World(seed=1)
    world.spawn(world.host("a"), call)
    with pytest.raises(SimulationEscape, match="test process's own standard stream"):
        world.run()


_EXIT = """
import os
from simfs import World, SimulationEscape
w = World()
w.spawn(w.host("a"), lambda: os._exit(0))
try:
    w.run()
except SimulationEscape as error:
    print(error)
"""


def test_os_exit_in_a_simulated_process_does_not_end_the_test_process():
    # Run apart: were it not refused, it would end this pytest with status 0.
    done = run_apart(_EXIT)
    assert "os._exit(0) reaches the real machine" in done.stdout, (done.stdout, done.stderr)
