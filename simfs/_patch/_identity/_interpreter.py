"""A simulated process's own signal handlers, ``atexit`` and fork hooks.

A real program installs these once for its whole OS process.  Inside the
world every simulated process shares this interpreter: ``signal.signal``
from a process's greenlet raised CPython's "signal only works in main
thread" (the engine thread is no main thread), or, on the thread that runs
the world, replaced pytest's own handler; ``atexit.register`` queued the
program's clean-up to run when pytest exits, outside the world, against
files that only existed in it; ``os.register_at_fork`` kept every process's
copy of ``logging`` alive for good.

So, inside a process (with per-process modules, ``World``'s default):

- ``signal.signal``/``signal.getsignal`` (and ``set_wakeup_fd``) read and
  write the process's own table.  It starts as a new CPython process's does (SIGINT runs
  ``default_int_handler``; SIGPIPE and SIGXFSZ are ignored, Python's start-up
  sets them so; every other signal ``SIG_DFL``).  Only the process's main
  thread may set one, as CPython requires.  No signal is ever delivered
  (``_session``: ``os.kill`` of a real signal is refused loudly).
- ``atexit.register``/``unregister`` keep the process's own list, run last
  registered first when the process's main thread ends (returns, raises or
  calls ``sys.exit``) and its other non-daemon threads have ended, as
  CPython's ``threading._shutdown`` joins them before ``Py_FinalizeEx``
  runs the handlers; inside the process, so their I/O is simulated; not
  when the world stops the process (a crash or teardown is a kill).
- ``os.register_at_fork`` keeps the hooks with the process: a simulated
  process never forks (``os.fork`` is refused), so they never run.
- ``gc.enable``/``disable``/``set_threshold``, ``socket.setdefaulttimeout``,
  ``locale.setlocale`` and ``threading.settrace``/``setprofile`` run as
  they are, and tell the module views (``_engine/_modules.py``) to swap
  those settings with the process from then on: a ``gc.disable()`` or a
  ``setlocale`` in one process is not another's, nor the test's after the
  run.  (``sys.setrecursionlimit`` is not swapped: setting
  a limit below the depth of the process handing the baton on would raise
  there; it stays interpreter-wide.)
"""

from __future__ import annotations

import atexit
import gc
import locale
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..._engine._modules import MAIN, ModuleView, settings_changed
from ..._engine._scheduler import Process, current_process
from ..._errors import simulated_oserror
from .._registry import patch

# What a fresh CPython process starts with (Python/pylifecycle.c,
# signal_install_handlers: SIGPIPE, SIGXFZ and SIGXFSZ ignored; SIGINT to
# the default_int_handler installed by the signal module).
_FRESH: dict[int, Any] = {signal.SIGINT: signal.default_int_handler,
                          signal.SIGPIPE: signal.SIG_IGN, signal.SIGXFSZ: signal.SIG_IGN}
_UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP)
# Where a process's signal.set_wakeup_fd number is kept in its handler table.
_WAKEUP_FD = -1


def _own(process: Process) -> ModuleView | None:
    view = process.group.modules
    return None if view is MAIN else view


def _signal_number(signalnum: Any) -> int:
    number = signalnum.__index__() if hasattr(signalnum, "__index__") else None
    if not isinstance(number, int):
        raise TypeError(f"'{type(signalnum).__name__}' object cannot be interpreted as an "
                        "integer")
    if not 1 <= number < signal.NSIG:
        raise ValueError("signal number out of range")
    return number


def _main_thread(process: Process) -> bool:
    return process.parent is None


def install() -> None:
    real_signal, real_getsignal = signal.signal, signal.getsignal

    def signal_route(signalnum: Any, handler: Any) -> Any:
        process = current_process()
        view = None if process is None else _own(process)
        if process is None or view is None:
            return real_signal(signalnum, handler)
        number = _signal_number(signalnum)
        if handler not in (signal.SIG_IGN, signal.SIG_DFL) and not callable(handler):
            raise TypeError("signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a "
                            "callable object")
        if not _main_thread(process):
            raise ValueError("signal only works in main thread of the main interpreter")
        if number in _UNCATCHABLE:
            raise simulated_oserror(22)  # EINVAL: sigaction(2) refuses SIGKILL and SIGSTOP
        previous = view.signal_handlers.get(number, _FRESH.get(number, signal.SIG_DFL))
        view.signal_handlers[number] = handler
        return previous

    def getsignal_route(signalnum: Any) -> Any:
        process = current_process()
        view = None if process is None else _own(process)
        if view is None:
            return real_getsignal(signalnum)
        number = _signal_number(signalnum)
        return view.signal_handlers.get(number, _FRESH.get(number, signal.SIG_DFL))

    patch(signal, "signal", signal_route)
    patch(signal, "getsignal", getsignal_route)

    real_set_wakeup_fd = signal.set_wakeup_fd

    def set_wakeup_fd(fd: Any, /, *, warn_on_full_buffer: bool = True) -> int:
        # trio's run loop sets one when it believes it runs on the main
        # thread (its test: signal.signal succeeds).  No signal is delivered
        # in the world, so the process only keeps the number.
        process = current_process()
        view = None if process is None else _own(process)
        if process is None or view is None:
            return int(real_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer))
        number = fd.__index__() if hasattr(fd, "__index__") else None
        if not isinstance(number, int):
            raise TypeError(f"'{type(fd).__name__}' object cannot be interpreted as an integer")
        if not _main_thread(process):
            raise ValueError("set_wakeup_fd only works in main thread of the main interpreter")
        previous = view.signal_handlers.get(_WAKEUP_FD, -1)
        view.signal_handlers[_WAKEUP_FD] = number
        return int(previous)

    patch(signal, "set_wakeup_fd", set_wakeup_fd)

    real_register, real_unregister = atexit.register, atexit.unregister

    def register(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        view = None if process is None else _own(process)
        if view is None:
            return real_register(func, *args, **kwargs)
        if not callable(func):
            raise TypeError("the first argument must be callable")
        view.at_exit.append((func, args, kwargs))
        return func

    def unregister(func: Callable[..., Any], /) -> None:
        process = current_process()
        view = None if process is None else _own(process)
        if view is None:
            real_unregister(func)
            return
        view.at_exit[:] = [entry for entry in view.at_exit if entry[0] != func]

    patch(atexit, "register", register)
    patch(atexit, "unregister", unregister)

    real_at_fork = os.register_at_fork

    def register_at_fork(**hooks: Any) -> None:
        process = current_process()
        view = None if process is None else _own(process)
        if view is None:
            real_at_fork(**hooks)
            return
        for when, hook in hooks.items():
            if when not in ("before", "after_in_child", "after_in_parent"):
                raise TypeError(f"'{when}' is an invalid keyword argument for "
                                "register_at_fork()")
            if not callable(hook):
                raise TypeError(f"'{when}' must be callable, not {type(hook).__name__}")
        if not hooks:
            raise TypeError("At least one argument is required.")
        view.at_fork.extend(hooks.items())

    patch(os, "register_at_fork", register_at_fork)

    for owner, name in ((gc, "enable"), (gc, "disable"), (gc, "set_threshold"),
                        (socket, "setdefaulttimeout"), (locale, "setlocale"),
                        (threading, "settrace"), (threading, "setprofile"),
                        (threading, "settrace_all_threads"),
                        (threading, "setprofile_all_threads")):
        if hasattr(owner, name):  # the *_all_threads ones: 3.12+
            patch(owner, name, _process_wide_setting(getattr(owner, name)))


def _process_wide_setting(real: Callable[..., Any]) -> Callable[..., Any]:
    """A setter of process-wide state the module views swap once a process used one."""

    def route(*args: Any, **kwargs: Any) -> Any:
        if current_process() is not None:
            settings_changed()
        return real(*args, **kwargs)

    return route


def run_exit_handlers(process: Process) -> None:
    """The process's ``atexit`` handlers, last registered first (its main thread ended).

    As CPython's ``atexit._run_exitfuncs``: an exception in a handler is
    printed to the process's stderr and the next handler runs.
    """
    view = _own(process)
    if view is None or process.kill is not None:
        return  # stopped by the world: a kill runs no exit handlers
    if view.at_exit:
        _join_other_threads(process)
    while view.at_exit:
        func, args, kwargs = view.at_exit.pop()
        try:
            func(*args, **kwargs)
        except SystemExit:
            pass
        except BaseException as error:  # printed and ignored, as atexit does
            if process.kill is not None:
                raise
            print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
            traceback.print_exception(error, file=sys.stderr)


def _join_other_threads(process: Process) -> None:
    """Wait, as ``threading._shutdown`` does, for the process's other
    non-daemon threads to end: a handler that reads what a worker thread
    wrote sees it written (it did not before: the handlers ran as soon as
    the main function returned).

    Pool workers (``concurrent.futures.thread._worker``) are not waited
    for: an idle one waits for work for good, and CPython ends them first
    with ``_python_exit``, which the shared ``concurrent.futures`` module
    registers for the real interpreter, not for this process.
    """
    from concurrent.futures import thread as futures_thread

    while True:
        waiting = [thread for thread in process.group.live_threads
                   if thread is not process and thread.active and not thread.daemon
                   and getattr(thread.thread, "_target", None) is not futures_thread._worker]
        if not waiting:
            return
        process.syscalls.join(waiting[0], None)
