"""A lock wait whose timeout falls at the instant of a release (found by filelock's suite).

filelock's heartbeat thread waits on a ``threading.Condition`` with a
timeout; when the ``notify`` comes at exactly that virtual instant, the
simulated lock has already been handed to the waiter by ``release()`` while
the scheduler reports the wait as timed out, and ``SimLock.acquire`` then
failed removing the waiter (``ValueError: ... is not in deque``) on about
half the seeds.  A timed-out waiter that ``release()`` already made the
holder has the lock (``simfs/_engine/_sync.py``, ``SimLock.acquire``).
"""

from __future__ import annotations

import threading
import time

import pytest

from simfs import World


def _wait_meets_notify() -> bool:
    condition = threading.Condition()

    def notifier() -> None:
        time.sleep(1.0)
        with condition:
            condition.notify()

    thread = threading.Thread(target=notifier)
    thread.start()
    with condition:
        notified = condition.wait(1.0)
    thread.join()
    return notified


@pytest.mark.parametrize("seed", range(8))
def test_a_condition_wait_timing_out_as_it_is_notified_returns_normally(seed):
    world = World(seed=seed)
    process = world.spawn(world.host("a"), _wait_meets_notify)
    world.run(check=False)
    assert isinstance(process.result(), bool)


def _timed_acquire_meets_release() -> tuple[bool, bool, float]:
    lock = threading.Lock()
    lock.acquire()

    def releaser() -> None:
        time.sleep(1.0)
        lock.release()

    thread = threading.Thread(target=releaser)
    thread.start()
    got = lock.acquire(timeout=1.0)
    thread.join()  # the release has happened, whichever ran first at 1.0 s
    free = lock.acquire(blocking=False)
    return got, free, time.monotonic()


def test_a_timed_acquire_meeting_a_release_holds_the_lock_exactly_when_it_says_so():
    # At the instant the timeout and the release coincide, either order is a
    # possible run; in both, acquire's answer must be the truth: True and the
    # lock is this thread's (a second acquire fails), or False and the
    # release left it free.  Returning False while release() had made the
    # waiter the holder would keep the lock held by a thread that believes
    # it failed: every later acquire would wait forever.  Across these seeds
    # both orders occur, so the handover at the timeout's instant is exercised.
    outcomes = set()
    for seed in range(8):
        world = World(seed=seed)
        process = world.spawn(world.host("a"), _timed_acquire_meets_release)
        world.run()
        got, free, now = process.result()
        assert free is not got, (seed, got)
        assert now == 1.0  # virtual time: nothing waited on a real lock
        outcomes.add(got)
    assert outcomes == {True, False}
