"""A simulated process's session, terminal, user database and limits come from the world.

Each is answered from the real test process otherwise: its process group
(a shell job, a pytest-xdist worker), its terminal, the machine's
/etc/passwd, its ulimits (a CI runner's container or a systemd unit).  The
simulated process runs as a batch job started by init in a fresh session,
as its /proc/<pid>/stat says (simfs/_patch/_identity/_session.py, _users.py, _limits.py).
"""

from __future__ import annotations

import errno
import getpass
import grp
import os
import pty
import pwd
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from simfs import SimulationEscape, World

ROOT = pwd.struct_passwd(("root", "x", 0, 0, "root", "/root", "/bin/bash"))


def _result(program: Callable[[], object], **spawn: object) -> object:
    world = World(seed=1)
    process = world.spawn(world.host("a"), program, **spawn)  # type: ignore[arg-type]
    world.run()
    return process.result()


def _errno(call: Callable[[], object]) -> object:
    try:
        return call()
    except OSError as error:
        return errno.errorcode[error.errno or 0]


def test_process_group_and_session_are_the_process_own_pid_as_its_proc_stat_says():
    def leader() -> list[object]:
        with open("/proc/self/stat") as stat:
            fields = stat.read().split()
        return [os.getpid(), os.getpgrp(), os.getpgid(0), os.getsid(0), int(fields[4]),
                int(fields[5])]

    def neighbour(pids: dict[str, int]) -> list[object]:
        time.sleep(1)
        return [_errno(lambda: os.getpgid(pids["same"])), _errno(lambda: os.getsid(pids["other"])),
                _errno(lambda: os.getpgid(os.getpid() + 999))]

    world = World(seed=1)
    a, b = world.host("a"), world.host("b")
    pids: dict[str, int] = {}
    first = world.spawn(a, lambda: [pids.setdefault("same", os.getpid()), time.sleep(2)])
    other = world.spawn(b, lambda: [pids.setdefault("other", os.getpid()), time.sleep(2)])
    asker = world.spawn(a, neighbour, pids)
    solo = world.spawn(a, leader)
    world.run()
    pid = solo.result()[0]  # type: ignore[index]
    assert solo.result() == [pid] * 6
    # Another host is another machine: its pid is unknown here (ESRCH).
    assert asker.result() == [pids["same"], "ESRCH", "ESRCH"]
    assert first.done and other.done


def test_a_session_leader_cannot_change_its_session_and_the_real_one_is_untouched():
    real_session = os.getsid(0)

    def program() -> list[object]:
        return [_errno(os.setsid), _errno(lambda: os.setpgid(0, 0)), _errno(os.setpgrp),
                _errno(lambda: os.setpgid(os.getpid() + 1, 0))]

    assert _result(program) == ["EPERM", "EPERM", "EPERM", "ESRCH"]
    assert os.getsid(0) == real_session


def test_the_user_database_holds_root_alone_and_other_names_are_key_errors():
    def program() -> list[object]:
        found: list[object] = [pwd.getpwuid(0), pwd.getpwnam("root"), pwd.getpwall(),
                               grp.getgrgid(0), grp.getgrnam("root"), len(grp.getgrall()),
                               os.getgrouplist("root", 0)]
        for call in (lambda: pwd.getpwuid(1), lambda: pwd.getpwnam("daemon"),
                     lambda: grp.getgrgid(1), lambda: grp.getgrnam("daemon")):
            try:
                call()
            except KeyError as error:
                found.append(str(error))
        os.environ.pop("LOGNAME")
        os.environ.pop("USER")
        found.append(getpass.getuser())  # falls back to pwd.getpwuid(os.getuid())
        return found

    assert _result(program) == [
        ROOT, ROOT, [ROOT], grp.struct_group(("root", "x", 0, [])),
        grp.struct_group(("root", "x", 0, [])), 1, [0],
        "'getpwuid(): uid not found: 1'", "\"getpwnam(): name not found: 'daemon'\"",
        "'getgrgid(): gid not found: 1'", "\"getgrnam(): name not found: 'daemon'\"", "root"]


def test_resource_limits_are_the_linux_container_defaults_whatever_the_machine():
    infinity = resource.RLIM_INFINITY

    def program() -> list[tuple[int, int]]:
        return [resource.getrlimit(resource.RLIMIT_NOFILE),
                resource.getrlimit(resource.RLIMIT_NPROC),
                resource.getrlimit(resource.RLIMIT_STACK),
                resource.getrlimit(resource.RLIMIT_CORE),
                resource.getrlimit(resource.RLIMIT_MEMLOCK),
                resource.prlimit(0, resource.RLIMIT_AS)]

    # INIT_RLIMITS (include/asm-generic/resource.h), fork_init's max_threads/2
    # for 16 GiB, fs.nr_open (fs/file.c) as the hard open-file limit.
    assert _result(program) == [(1024, 1 << 20), (65536, 65536), (8 << 20, infinity),
                                (0, infinity), (8 << 20, 8 << 20), (infinity, infinity)]


def test_prlimit_finds_a_pid_as_getsid_does():
    def error_of(call: Callable[[], object]) -> str:
        try:
            call()
        except (OSError, TypeError) as error:
            return repr(error)
        return "no error"

    nofile = resource.RLIMIT_NOFILE
    calls: list[Callable[[], object]] = [lambda: resource.prlimit("1", nofile),
                                         lambda: resource.prlimit(1.5, nofile)]

    def program() -> list[object]:
        return [resource.prlimit(os.getpid(), nofile) == resource.getrlimit(nofile),
                _errno(lambda: resource.prlimit(os.getpid() + 999, nofile)),
                *(error_of(call) for call in calls)]

    # A pid that is no integer: the real call's own TypeError, not ESRCH.
    assert _result(program) == [True, "ESRCH", *(error_of(call) for call in calls)]


def test_setrlimit_is_per_process_and_lowering_a_soft_limit_fails_loudly():
    real = resource.getrlimit(resource.RLIMIT_NOFILE)

    def raises() -> list[object]:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
        errors = []
        for limits in ((10, 5), (1 << 21, 1 << 21)):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            except ValueError as error:
                errors.append(str(error))
        return [resource.getrlimit(resource.RLIMIT_NOFILE), *errors]

    def later() -> tuple[int, int]:
        time.sleep(1)
        return resource.getrlimit(resource.RLIMIT_NOFILE)

    world = World(seed=1)
    host = world.host("a")
    first, second = world.spawn(host, raises), world.spawn(host, later)
    world.run()
    assert first.result() == [(1 << 20, 1 << 20), "current limit exceeds maximum limit",
                              "not allowed to raise maximum limit"]
    assert second.result() == (1024, 1 << 20)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == real

    world = World(seed=1)
    world.spawn(world.host("a"), resource.setrlimit, resource.RLIMIT_NOFILE, (64, 64))
    with pytest.raises(SimulationEscape, match=r"setrlimit\(RLIMIT_NOFILE, \(64, 64\)\) lowers"):
        world.run()


_TERMINAL_IN_A_WORLD = """
import os, shutil, sys
from simfs import World

def program():
    answers = [os.isatty(0), os.isatty(1), os.isatty(2), tuple(shutil.get_terminal_size())]
    for call in (lambda: os.ttyname(1), lambda: os.get_terminal_size(), os.getlogin,
                 lambda: os.tcgetpgrp(0)):
        try:
            answers.append(call())
        except OSError as error:
            answers.append(error.errno)
    return answers

world = World(seed=0)
process = world.spawn(world.host("a"), program)
world.run()
print("real tty:", os.isatty(1), file=sys.stderr)
print(process.result(), file=sys.stderr)
"""


def test_no_simulated_process_has_a_terminal_even_when_the_test_runs_in_one():
    parent, child = pty.openpty()  # the test process's stdin and stdout: a terminal
    try:
        done = subprocess.run([sys.executable, "-c", _TERMINAL_IN_A_WORLD], stdin=child,
                              stdout=child, stderr=subprocess.PIPE, text=True, timeout=300,
                              check=False, env={**os.environ, "COLUMNS": "211"})
    finally:
        os.close(child)
        os.close(parent)
    assert done.returncode == 0, done.stderr
    real, simulated = done.stderr.strip().splitlines()[-2:]
    assert real == "real tty: True"
    assert simulated == str([False, False, False, (80, 24), errno.ENOTTY, errno.ENOTTY,
                             errno.ENXIO, errno.ENOTTY])


def test_terminal_size_falls_back_to_columns_and_lines_of_the_simulated_environment():
    size = _result(lambda: tuple(shutil.get_terminal_size()), env={"COLUMNS": "120"})
    assert size == (120, 24)


def test_sysconf_describes_the_simulated_host_and_the_process_limits():
    def program() -> list[int]:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 1 << 20))
        return [os.sysconf("SC_NPROCESSORS_ONLN"), os.sysconf("SC_OPEN_MAX"),
                os.sysconf(os.sysconf_names["SC_CHILD_MAX"]), os.sysconf("SC_ARG_MAX"),
                os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                os.sysconf("SC_CLK_TCK")]

    # 4 CPUs as os.cpu_count(); glibc's __sysconf reads getrlimit (ARG_MAX: stack / 4);
    # a 16 GiB host; clock ticks are the platform's USER_HZ.
    assert _result(program) == [4, 4096, 65536, 2 << 20, 16 << 30, os.sysconf("SC_CLK_TCK")]
