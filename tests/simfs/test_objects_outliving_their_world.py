"""An object from an earlier world, finalized during a later one, never acts on the later world.

Every world numbers its simulated descriptors from the same base (one seed,
one trace), so the number a file of world 1 holds names another file in
world 2.  A lock holder kept in a reference cycle is finalized when Python's
collector next runs, which may be inside world 2's process; its
``flock(fh, LOCK_UN)`` went to world 2's descriptor of the same number
(found by portalocker's own suite, docs/design.md, "Objects that outlive
their world").  The file's ``fileno()`` now refuses outside its own process,
so the finalizer fails loudly (an ignored exception in ``__del__``) and
world 2's lock stays held.
"""

from __future__ import annotations

import fcntl
import gc
import sys
from collections.abc import Iterator

import pytest

from simfs import World


class _Holder:
    def __init__(self, path: str) -> None:
        self.file = open(path, "a+")  # closed by __del__: the point here
        fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.myself = self  # a cycle: freed by the collector, not by a last reference

    def __del__(self) -> None:
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def _hold(path: str) -> None:
    _Holder(path)


def _lock_then_collect(path: str) -> str:
    # Both files closed here, in their process: left to the collector, they
    # would be finalized outside the world, during some later test.
    with open(path, "a+") as mine, open(path, "a+") as other:
        fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
        gc.collect()  # world 1's holder is finalized here, in this process
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held"
        return "taken"


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Only the test's own gc.collect() finalizes the cycle, inside world 2."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def test_a_lock_from_an_earlier_world_finalized_in_a_later_one_leaves_its_lock_alone(
        collector_off: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ignored: list[str] = []  # what CPython prints as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda unraisable: ignored.append(str(unraisable.exc_value)))
    first = World(seed=0)
    first.spawn(first.host("a"), _hold, first.export + "/lock")
    first.run()
    second = World(seed=0)
    process = second.spawn(second.host("a"), _lock_then_collect, second.export + "/lock")
    second.run()
    assert process.result() == "held"
    assert any("opened in process '_hold' was used in process '_lock_then_collect'" in text
               for text in ignored), ignored
