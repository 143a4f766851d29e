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


def _line_of(path: str, number: int, rewrite: str | None = None) -> str:
    import linecache

    if rewrite is not None:
        with open(path, "w") as corpus:
            corpus.write(rewrite)
    return linecache.getline(path, number)


def _traceback_text() -> str:
    import traceback

    try:
        raise ValueError("shown")
    except ValueError:
        return traceback.format_exc()


def test_a_file_on_the_export_is_read_by_linecache_through_the_process_s_own_view():
    # linecache.getline(path, n) is a common way to read one line of a corpus.
    # It read with routing off: the guard refused it, and without the guard
    # it answered '' (the real disk has no /shared).  And linecache's cache
    # is each real process's own: a shared one gave host b the lines host a
    # had read, after b's own rewrite.
    world = World(seed=0)
    a, b = world.host("a"), world.host("b")
    first = world.spawn(a, _line_of, "/shared/corpus.txt", 2, "one\ntwo\n")
    world.run()
    rewritten = world.spawn(b, _line_of, "/shared/corpus.txt", 2, "uno\ndos\n")
    world.run()
    assert (first.result(), rewritten.result()) == ("two\n", "dos\n")


def test_a_traceback_formatted_inside_a_process_shows_its_source_lines():
    # Source lines are still read from the real machine.  And on Python 3.13
    # traceback parses each line it underlines: "raise ..." alone is a
    # SyntaxError, whose reporting makes the parser open '<unknown>' (an
    # audit event inside the process): that was refused as an escape, so
    # traceback.format_exc() and logging.exception() failed in every process.
    world = World(seed=0)
    traced = world.spawn(world.host("a"), _traceback_text)
    world.run()
    assert 'raise ValueError("shown")' in traced.result()
