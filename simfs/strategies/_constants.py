"""Keep a search's generation independent of which modules the process has imported.

Hypothesis (6.1xx) draws about one value in twenty from "local constants":
literals it reads out of every non-stdlib, non-site-packages module in
``sys.modules`` at the moment a test case starts
(``hypothesis.internal.conjecture.providers._get_local_constants``).  So the
same derandomized search drew other worlds in a fresh process, in a
pytest-xdist worker, after an unrelated ``import``, with one test selected
or the whole file, between an editable install and a wheel.  While a
search of ``simfs.explore`` (or of a scenario) runs, the local constants
are those of the module that holds the code under test: its literals, as
Hypothesis intends, but a fixed set.

This reaches into Hypothesis's internals.  Where they are missing (a
Hypothesis without local constants) there is nothing to pin;
``tests/plugin/test_explore_constants.py`` and
``tests/scenarios/test_explore_determinism.py`` fail if a newer Hypothesis
moves them and searches start depending on imports again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


@contextmanager
def local_constants_from(modules: tuple[ModuleType, ...]) -> Iterator[None]:
    """Within the block, Hypothesis's local constants are exactly those of ``modules``."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants, constants_from_module
    except ImportError:  # a Hypothesis before local constants: generation ignores imports
        yield
        return
    collect = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if collect is None or cache is None:
        yield
        return
    pinned = Constants()
    for module in modules:
        pinned |= constants_from_module(module)
    # Values already filtered from another set of constants are cached per
    # choice type: drop them on the way in and on the way out.
    cache.cache.clear()
    providers._get_local_constants = lambda: pinned
    try:
        yield
    finally:
        providers._get_local_constants = collect
        cache.cache.clear()
