"""A scenario search's local constants are its own module's (``simfs.strategies._constants``).

Found through pytest-xdist: ``explore(handshake, "marker_exists",
examples=1000)`` found 0 failures in a fresh process and 9 after ``import
compose/vm.py`` (its exit code 128 became a candidate world seed).  The
pinning itself lives in simfs, where ``simfs.explore`` pins a test's search
the same way.
"""

from __future__ import annotations

from simfs.strategies._constants import local_constants_from

__all__ = ["local_constants_from"]
