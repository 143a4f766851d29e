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
