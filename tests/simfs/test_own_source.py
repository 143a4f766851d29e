"""A program may look at its own source inside the world (issue 10, item 7).

Its code was loaded from the real machine, as every import is, so looking
it up again is not the program's file I/O: measured on filelock's suite,
``inspect.stack()`` stat'ed each frame's file and was refused as an escape.
"""

from __future__ import annotations

import inspect

from simfs import World


def _where_am_i() -> tuple[str, int, str | None, str]:
    frame = inspect.stack()[0]
    source = inspect.getsource(_where_am_i)
    module = inspect.getmodule(_where_am_i)
    return frame.filename, frame.lineno, module.__name__ if module else None, source


def test_inspect_stack_and_getsource_answer_inside_the_world():
    world = World(seed=0)
    process = world.spawn(world.host("a"), _where_am_i)
    world.run()
    filename, line, module, source = process.result()
    assert (filename, module) == (__file__, __name__)
    assert line == _where_am_i.__code__.co_firstlineno + 1
    assert source.startswith("def _where_am_i()")
