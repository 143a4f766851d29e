"""Which paths a host answers itself: the quick check agrees with normalising first.

``_proc.outside_export`` decides on every stat whether the host answers it
(``/``, the export's parents, ``/proc``) or the NFS mount does.  It skips
``posixpath.normpath`` for paths under the export with no ``..`` (issue 16:
a poll of a hidden directory normalised every time); these tests hold that
shortcut to the plain rule, normalise and then compare, over many shapes.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import posixpath

import pytest

from simfs._os import _proc

EXPORT = "/shared"
PARTS = ("shared", ".", "..", "", ".hidden", "..x", "proc", "dir")


class _Syscalls:
    export = EXPORT
    export_prefix = EXPORT + "/"


class _Process:
    syscalls = _Syscalls()


def _plain_rule(path: str) -> str | None:
    if not path.startswith("/"):
        return None
    normal = posixpath.normpath(path)
    inside = normal == EXPORT or normal.startswith(EXPORT + "/")
    return None if inside else normal


def _shapes() -> list[str]:
    shapes = []
    for length in range(1, 4):
        for parts in itertools.product(PARTS, repeat=length):
            shapes.append("/" + "/".join(parts))
            shapes.append("/".join(parts))
    return shapes


@pytest.mark.parametrize("kind", [str, pathlib.PurePosixPath, os.fsencode])
def test_the_quick_check_agrees_with_normalising_first_for_every_path_shape(kind):
    for shape in _shapes():
        if kind is pathlib.PurePosixPath and not shape:
            continue
        quick = _proc.outside_export(_Process(), kind(shape))
        plain = _plain_rule(shape)
        # Same decision; an outside path is answered for the same place.
        assert (quick is None) == (plain is None), shape
        assert quick is None or posixpath.normpath(quick) == plain, shape


def test_descriptors_and_non_paths_are_never_the_hosts_to_answer():
    assert _proc.outside_export(_Process(), 3) is None
    assert _proc.outside_export(_Process(), object()) is None
