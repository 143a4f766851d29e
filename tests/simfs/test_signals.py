"""Signals inside the world probe simulated processes and never reach a real one.

``os.kill(pid, 0)`` is how lock files (fasteners, pid files) check that
their holder lives: it succeeds for a live simulated process on the same
host and is ESRCH otherwise, as the kernel answers (kill_pid_info in
kernel/signal.c: no task, ESRCH; then valid_signal: 0 to _NSIG = 64, else
EINVAL).  Delivering a real signal is not simulated: a loud escape naming
the call (simfs/_patch/_identity/_session.py).
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import pytest

from simfs import SimulationEscape, World


def _errno(pid: int, sig: int = 0) -> str:
    try:
        os.kill(pid, sig)
    except OSError as error:
        return errno.errorcode[error.errno or 0]
    return "ok"


def test_kill_zero_finds_live_processes_of_the_same_host_only():
    pids: dict[str, int] = {}

    def holder(name: str) -> None:
        pids[name] = os.getpid()
        time.sleep(5)

    def prober() -> list[str]:
        time.sleep(1)  # both holders run; the finished one has exited
        return [_errno(pids["neighbour"]), _errno(-pids["neighbour"]), _errno(0), _errno(-1),
                _errno(pids["remote"]), _errno(pids["gone"]), _errno(1),
                _errno(real_pid), _errno(pids["neighbour"], 65)]

    # A real process's pid that no simulated process holds: the world numbers
    # its four processes 1000-1003, which a fresh container's pytest may be.
    real_pid = next(pid for pid in (os.getpid(), os.getppid()) if not 1000 <= pid <= 1003)
    world = World(seed=1)
    a, b = world.host("a"), world.host("b")
    world.spawn(a, holder, "neighbour")
    world.spawn(b, holder, "remote")
    world.spawn(a, lambda: pids.setdefault("gone", os.getpid()))
    probe = world.spawn(a, prober)
    world.run()
    # Another host is another machine; init (1) and the test process are not simulated.
    assert probe.result() == ["ok", "ok", "ok", "ok", "ESRCH", "ESRCH", "ESRCH", "ESRCH",
                              "EINVAL"]


def test_delivering_a_real_signal_to_a_simulated_process_fails_loudly_naming_it():
    def program() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    world = World(seed=1)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape, match=r"os\.kill\(1000, SIGTERM\) would deliver"):
        world.run()


def test_raise_signal_never_signals_the_test_process():
    received: list[int] = []
    previous = signal.signal(signal.SIGWINCH, lambda number, frame: received.append(number))
    try:
        world = World(seed=1)
        world.spawn(world.host("a"), signal.raise_signal, signal.SIGWINCH)
        with pytest.raises(SimulationEscape, match=r"raise_signal\(SIGWINCH\)"):
            world.run()
    finally:
        signal.signal(signal.SIGWINCH, previous)
    assert received == []


def test_pthread_kill_probes_simulated_threads_and_refuses_a_real_signal():
    def program() -> list[object]:
        done, started = threading.Event(), threading.Event()
        idents: list[int] = []

        def work() -> None:
            idents.append(threading.get_ident())
            started.set()
            done.wait()

        worker = threading.Thread(target=work)
        worker.start()
        started.wait()
        ident = idents[0]
        answers: list[object] = [signal.pthread_kill(ident, 0)]
        try:
            signal.pthread_kill(ident + 1_000_000, 0)
        except OSError as error:
            answers.append(errno.errorcode[error.errno or 0])
        done.set()
        worker.join()
        return answers

    world = World(seed=1)
    process = world.spawn(world.host("a"), program)
    world.run()
    assert process.result() == [None, "ESRCH"]

    world = World(seed=1)
    world.spawn(world.host("a"), lambda: signal.pthread_kill(threading.get_ident(),
                                                           signal.SIGUSR1))
    with pytest.raises(SimulationEscape, match=r"pthread_kill\(\d+, SIGUSR1\) would deliver"):
        world.run()
