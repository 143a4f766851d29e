"""A scenario search's local constants are its own module's (``simfs.strategies._constants``).

Found through pytest-xdist: ``explore(handshake, "marker_exists",
examples=1000)`` found 0 failures in a fresh process and 9 after ``import
compose/vm.py`` (its exit code 128 became a candidate world seed).  The
pinning itself lives in simfs, where ``simfs.explore`` pins a test's search
the same way; it is imported when a search starts, since ``simfs.strategies``
imports Hypothesis, which ``python -m scenarios run`` never loads.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import ModuleType


def local_constants_from(modules: tuple[ModuleType, ...]) -> AbstractContextManager[None]:
    """Within the block, Hypothesis's local constants are exactly those of ``modules``."""
    from simfs.strategies._constants import local_constants_from as pinned

    return pinned(modules)
