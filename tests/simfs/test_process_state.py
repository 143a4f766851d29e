"""Errors read as the real ones; process state stays in the simulated process (issue 10, 7).

Code matches on error text (filelock's suite does), so a simulated error
must read exactly as the real one; it is told apart by the trace and the
``simfs_simulated`` attribute.  Each program below runs on a real directory
and inside the world, and both must report the same thing.
"""

from __future__ import annotations

import os

import pytest

from simfs import World


def _outcomes(root: str) -> list[tuple[str, str]]:
    """What each call did, with the root directory written as ROOT."""
    seen = []

    def attempt(name, call):
        try:
            call()
            seen.append((name, "ok"))
        except (OSError, ValueError) as error:
            seen.append((name, f"{type(error).__name__}: {error}".replace(root, "ROOT")))

    os.mkdir(f"{root}/d")
    open(f"{root}/d/f", "w").close()
    attempt("stat of ''", lambda: os.stat(""))
    attempt("open of ''", lambda: open(""))
    attempt("mkdir of ''", lambda: os.mkdir(""))
    attempt("stat of a missing file", lambda: os.stat(f"{root}/missing"))
    attempt("stat, unnormalized path", lambda: os.stat(f"{root}/d/../missing"))
    attempt("stat, bytes path", lambda: os.stat(f"{root}/missing".encode()))
    attempt("mkdir of an existing dir", lambda: os.mkdir(f"{root}/d"))
    attempt("rmdir of a non-empty dir", lambda: os.rmdir(f"{root}/d"))
    attempt("rmdir of a file", lambda: os.rmdir(f"{root}/d/f"))
    attempt("unlink of a dir", lambda: os.unlink(f"{root}/d"))
    attempt("rename of a missing file", lambda: os.rename(f"{root}/missing", f"{root}/x"))
    attempt("listdir of a file", lambda: os.listdir(f"{root}/d/f"))
    attempt("open of a dir for writing", lambda: open(f"{root}/d", "w"))
    attempt("O_EXCL on an existing file",
            lambda: os.open(f"{root}/d/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    attempt("stat, embedded null", lambda: os.stat(f"{root}/a\x00b"))
    attempt("open, embedded null", lambda: open(f"{root}/a\x00b", "w"))
    attempt("mkdir, embedded null", lambda: os.mkdir(f"{root}/a\x00b"))
    return seen


def _in_world(program, *args):
    world = World(seed=1)
    process = world.spawn(world.host("a"), program, *args)
    world.run()
    return world, process.result()


def test_simulated_errors_read_exactly_as_the_real_ones(tmp_path):
    real = _outcomes(str(tmp_path))
    _, simulated = _in_world(_outcomes, "/shared")
    assert simulated == real


def test_a_path_with_an_embedded_null_byte_creates_nothing():
    def create():
        with pytest.raises(ValueError, match="embedded null byte"):
            open("/shared/a\x00", "w")
        return os.listdir("/shared")

    assert _in_world(create)[1] == []


def test_umask_belongs_to_the_simulated_process_and_applies_to_its_creates():
    real_before = os.umask(0o022)
    os.umask(real_before)

    def create(mask):
        previous = os.umask(mask)
        os.mkdir(f"/shared/dir-{mask:o}")
        os.close(os.open(f"/shared/file-{mask:o}", os.O_CREAT | os.O_WRONLY, 0o666))
        return (previous, os.umask(mask), os.stat(f"/shared/dir-{mask:o}").st_mode & 0o777,
                os.stat(f"/shared/file-{mask:o}").st_mode & 0o777)

    world = World(seed=1)
    tight = world.spawn(world.host("a"), create, 0o077)
    loose = world.spawn(world.host("b"), create, 0o002)
    world.run()
    # Each process starts from the usual 022 and sees only its own mask.
    assert tight.result() == (0o022, 0o077, 0o700, 0o600)
    assert loose.result() == (0o022, 0o002, 0o775, 0o664)
    real_after = os.umask(real_before)
    assert real_after == real_before
