"""asyncio inside the world: the event loop waits on the world's scheduler.

An asyncio loop keeps time with ``time.monotonic()``, which is routed, so
``loop.time()``, ``asyncio.sleep``, ``wait_for`` and ``asyncio.timeout`` are
already on virtual time.  What is not is the wait itself: when nothing is
ready the loop blocks in the real ``epoll`` for as long as its next timer
says, or forever while a ``run_in_executor`` worker (a simulated thread that
can only run once this process yields) computes its result; measured on
filelock's suite, 38 asyncio tests sat there until ``BlockedOutsideSimulation``.

So a loop created inside a simulated process gets a selector that first
asks the real selector what is ready without waiting (the loop's self-pipe,
written by ``call_soon_threadsafe``), and otherwise blocks in the world's
scheduler until the loop's next timer or until another simulated thread
calls ``call_soon_threadsafe``, as trio's clock does (see ``_trio``).  Every
turn of the loop is a yield point, so a loop that only ever has ready
callbacks (``while True: await asyncio.sleep(0)``) lets others run and
counts against ``max_events``.  asyncio's own ready queue is FIFO, so the
schedule inside one loop is a function of the world's schedule alone.
Whichever simulated thread runs the loop waits so, not only its creator: a
library's loop thread (zarr runs its loop in a thread of its own, fed by
``run_coroutine_threadsafe``) waited in the real ``epoll`` until the step
timeout (issue 30).  A thread outside the world still waits in the real one.

Task names come from the world too: a task created without a name is
``Task-N`` from a counter that real asyncio keeps once per interpreter (in
C, ``_asyncio``'s ``task_name_counter``, which no Python route reaches), so
every earlier ``asyncio.run`` of the test process moved it: the same seed
named its tasks differently in the 1st and the 1,000th world.  Inside the
world ``loop.create_task`` (which ``asyncio.create_task``, ``ensure_future``,
``TaskGroup`` and ``asyncio.run`` all use) names the task from a counter of
the simulated process, starting at 1 as in a fresh interpreter.  A task
built by calling ``asyncio.Task(...)`` directly still takes the C counter.

When the world stops the process (teardown, a runaway), the loop is left
where it is, as a killed process leaves it: the kill unwinds out of
``asyncio.run``, and its pending tasks are dropped without asyncio's "Task
was destroyed but it is pending" complaint at garbage collection.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events as base_events
import asyncio.selector_events as selector_events
import selectors
import threading
from typing import Any

from ..._engine._clock import seconds_to_ns
from ..._engine._scheduler import Process, current_process
from ..._errors import ProcessKilled
from .._registry import escape, patch

_WAITING_ON = "asyncio: the next timer or a thread's result"


class SimSelector:
    """The loop's selector: real readiness without waiting, waits on virtual time."""

    def __init__(self, real: selectors.BaseSelector, process: Process,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._real = real
        self._process = process  # the loop's creator
        self._loop = loop
        # The simulated thread waiting in select() now, if any: the loop may be
        # run by another thread than its creator's (a library's loop thread,
        # zarr's), and that one waits on the world's clock too (issue 30).
        self._waiting: Process | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        process = current_process()
        if process is None:
            return self._real.select(timeout)  # the loop was handed to a thread outside
        if process.kill is not None:
            self._killed(process)
        syscalls = process.syscalls
        ready = self._real.select(0)
        try:
            if ready or (timeout is not None and timeout <= 0):
                syscalls.yield_now()
                return ready
            deadline = None
            if timeout is not None:
                deadline = syscalls.now_ns + max(seconds_to_ns(timeout, "timeout"), 1)
            self._waiting = process
            try:
                syscalls.block(_WAITING_ON, deadline)
            finally:
                self._waiting = None
        except ProcessKilled:
            self._killed(process)
        return self._real.select(0)

    def _killed(self, process: Process) -> None:
        """Unwind out of the loop, dropping its tasks quietly (see the module doc)."""
        for task in asyncio.all_tasks(self._loop):
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        kill = process.kill
        assert kill is not None
        raise kill

    def wake(self) -> None:
        """``call_soon_threadsafe`` wrote to the loop's self-pipe: stop waiting."""
        waiting = self._waiting
        if waiting is not None and current_process() is not None:
            waiting.syscalls.wake(waiting)

    def __getattr__(self, name: str) -> Any:
        # register, unregister, modify, get_key, get_map, close: the real ones.
        return getattr(self._real, name)


def _made_outside(loop: Any) -> bool:
    """Whether ``loop`` was made outside every world (its selector is the real one)."""
    selector = getattr(loop, "_selector", None)
    return selector is not None and not isinstance(selector, SimSelector)


def _running_in(loop: Any) -> str:
    thread_id = getattr(loop, "_thread_id", None)
    if thread_id is None:
        return ""
    # threading._active holds the test process's real threads (enumerate()
    # inside a process lists the process's own).
    thread = threading._active.get(thread_id)  # type: ignore[attr-defined]
    return "" if thread is None else f", run by thread {thread.name!r}"


def install() -> None:
    loop_class: Any = selector_events.BaseSelectorEventLoop
    real_init = loop_class.__init__
    real_write_to_self = loop_class._write_to_self

    def __init__(self: Any, selector: selectors.BaseSelector | None = None) -> None:
        real_init(self, selector)
        process = current_process()
        if process is not None:
            self._selector = SimSelector(self._selector, process, self)

    def _write_to_self(self: Any) -> None:
        real_write_to_self(self)
        selector = self._selector
        if isinstance(selector, SimSelector):
            selector.wake()

    base_class: Any = base_events.BaseEventLoop
    real_create_task = base_class.create_task

    def create_task(self: Any, coro: Any, *, name: str | None = None, **kwargs: Any) -> Any:
        process = current_process()
        if name is None and process is not None:
            name = f"Task-{process.group.next_number('asyncio.Task', 1)}"
        return real_create_task(self, coro, name=name, **kwargs)

    real_call_soon_threadsafe = base_class.call_soon_threadsafe
    real_run_forever = base_class.run_forever

    def call_soon_threadsafe(self: Any, callback: Any, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is not None and _made_outside(self):
            name = getattr(callback, "__qualname__", None) or repr(callback)[:60]
            raise escape(process, (
                f"loop.call_soon_threadsafe({name}) (asyncio.run_coroutine_threadsafe uses it) "
                f"on an event loop made outside the world{_running_in(self)}: its thread is a "
                "real thread of the test process, started outside the world, so the work "
                "would run outside the simulation and the process would wait for it on a "
                "real lock; make the loop (and the thread that runs it) inside the simulated "
                "process, as a library that makes its loop on first use does there"))
        return real_call_soon_threadsafe(self, callback, *args, **kwargs)

    def run_forever(self: Any) -> Any:
        process = current_process()
        if process is not None and _made_outside(self):
            raise escape(process, (
                "an event loop made outside the world was run inside a simulated process: "
                "it would wait in the real select, not on the world's clock; make the loop "
                "inside the process (asyncio.run, asyncio.new_event_loop there)"))
        return real_run_forever(self)

    patch(base_class, "call_soon_threadsafe", call_soon_threadsafe)
    patch(base_class, "run_forever", run_forever)
    patch(base_class, "create_task", create_task)
    patch(loop_class, "__init__", __init__)
    patch(loop_class, "_write_to_self", _write_to_self)
