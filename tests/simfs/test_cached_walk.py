"""The cache-only walk a poll's stat takes agrees with the general walk.

``NfsClient.cached_walk`` answers a stat or access from the caches alone
where nothing in them has expired (issue 16: a poll's stat, without the
general walk's exceptions).  It is a second reading of the rules of
``_lookup.py``, so these tests hold it to the first: over many cache states
(names made, removed and relinked by another host, time passing the
attribute timeouts, symbolic links, every lookupcache mode), wherever it
answers, the general walk gives the same answer and sends no RPC; and a
run traces the same with the cache-only walk as without it.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from simfs import World
from simfs._engine._scheduler import current_process
from simfs._nfs import _client as nfs
from simfs._nfs._client import NfsClient
from simfs._os._syscalls import Syscalls

NAMES = ("a", "b", "c")
DIRS = ("/shared/d", "/shared/d/e")
MOUNTS = ("vers=3", "vers=3,lookupcache=positive", "vers=3,lookupcache=none",
          "vers=3,acdirmin=1,acdirmax=1,acregmin=1,acregmax=1", "vers=3,noac")


def _paths() -> list[str]:
    return [f"{directory}/{name}" for directory in ("/shared", *DIRS) for name in NAMES]


def _change(rng: random.Random, path: str) -> None:
    """Another host's change to ``path``: a create, removal, link or mode change."""
    try:
        action = rng.randrange(5)
        if action == 0:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        elif action == 1:
            os.unlink(path)
        elif action == 2:
            os.symlink(rng.choice(("/shared/d", "d", "e", "/shared/d/e/a", "nowhere")), path)
        elif action == 3:
            os.mkdir(path)
        else:
            os.chmod(path, rng.choice((0o755, 0o700, 0o644)))
    except OSError:
        pass  # the name was already there, or not there: nothing changed


def _changer(seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        time_step = rng.choice((0.05, 0.3, 1.0, 3.0))
        time.sleep(time_step)
        _change(rng, rng.choice(_paths()))


def _checker(seed: int, rounds: int) -> dict[str, int]:
    """Stat paths (filling the caches); compare both walks wherever the fast one answers."""
    rng = random.Random(seed + 1)
    process = current_process()
    assert process is not None
    syscalls: Any = process.syscalls._export  # the export's own syscalls
    client: NfsClient = syscalls._client
    answered = {"negative": 0, "positive": 0, "none": 0}
    for _ in range(rounds):
        time.sleep(rng.choice((0.0, 0.1, 0.7, 2.0)))
        path = rng.choice(_paths())
        follow = rng.random() < 0.7
        try:
            os.stat(path, follow_symlinks=follow)
        except OSError:
            pass
        shown, start, components = syscalls._path(path)
        fast = client.cached_walk(start, components, follow=follow)
        if fast is None:
            answered["none"] += 1
            continue
        with client.recording() as rpcs:
            try:
                general: object = syscalls._resolve(start, components, follow=follow)
            except FileNotFoundError:
                general = nfs.NEGATIVE
        assert rpcs == [], (path, follow, rpcs)
        assert general == fast, (path, follow, general, fast)
        answered["negative" if fast is nfs.NEGATIVE else "positive"] += 1
    return answered


def _world(mount: str, seed: int) -> tuple[World, Any, Any]:
    world = World(seed=seed)
    for directory in DIRS:
        world.server.mkdir(directory)
    return world, world.host("writer"), world.host("poller", mount=mount)


@pytest.mark.parametrize("mount", MOUNTS)
@pytest.mark.parametrize("seed", range(4))
def test_the_cache_only_walk_answers_as_the_general_walk_wherever_it_answers(mount, seed):
    world, writer, poller = _world(mount, seed)
    world.spawn(writer, _changer, seed, 60)
    checker = world.spawn(poller, _checker, seed, 150)
    world.run()
    answered = checker.result()
    # The comparison ran: the fast walk answered often enough to be tested.
    assert answered["negative"] + answered["positive"] > 20 or mount.endswith(
        ("lookupcache=none", "noac")), answered


def test_the_cache_only_walk_answers_both_ways_under_the_default_mount():
    totals = {"negative": 0, "positive": 0}
    for seed in range(4):
        world, writer, poller = _world("vers=3", seed)
        world.spawn(writer, _changer, seed, 60)
        checker = world.spawn(poller, _checker, seed, 150)
        world.run()
        for key in totals:
            totals[key] += checker.result()[key]
    assert totals["negative"] > 20 and totals["positive"] > 20, totals


def _poller(seed: int, rounds: int) -> None:
    """A program that polls as programs do: exists, stat, lstat, access."""
    rng = random.Random(seed + 2)
    for _ in range(rounds):
        time.sleep(rng.choice((0.0, 0.1, 0.7, 2.0)))
        path = rng.choice(_paths())
        check = rng.choice((os.path.exists, os.path.isdir, os.path.islink, os.lstat,
                            lambda path: os.access(path, os.R_OK)))
        try:
            check(path)
        except OSError:
            pass


def _traced_run(mount: str, seed: int) -> str:
    world, writer, poller = _world(mount, seed)
    world.spawn(writer, _changer, seed, 60)
    world.spawn(poller, _poller, seed, 200)
    world.run()
    return world.trace.canonical()


@pytest.mark.parametrize("mount", MOUNTS[:2])
@pytest.mark.parametrize("seed", range(3))
def test_a_run_traces_the_same_with_or_without_the_cache_only_walk(mount, seed, monkeypatch):
    fast = _traced_run(mount, seed)
    monkeypatch.setattr(NfsClient, "cached_walk", lambda *args, **kwargs: None)
    general = _traced_run(mount, seed)
    assert fast == general


def _prober(seed: int, rounds: int) -> list[bool]:
    """os.path.exists, isfile and isdir, and Path's, as a poll calls them; their answers."""
    rng = random.Random(seed + 3)
    answers = []
    for _ in range(rounds):
        time.sleep(rng.choice((0.0, 0.1, 0.7, 2.0)))
        path = rng.choice(_paths())
        name = rng.choice(("exists", "isfile", "isdir", "is_file", "is_dir"))
        if name.startswith("is_"):
            answers.append(getattr(Path(path), name)())
        else:
            answers.append(getattr(os.path, name)(path))
        answers.append(Path(path).exists())
    return answers


def _probed_run(mount: str, seed: int) -> tuple[str, list[bool]]:
    world, writer, poller = _world(mount, seed)
    world.spawn(writer, _changer, seed, 60)
    prober = world.spawn(poller, _prober, seed, 200)
    world.run()
    return world.trace.canonical(), prober.result()


@pytest.mark.parametrize("mount", MOUNTS[:3])
@pytest.mark.parametrize("seed", range(3))
def test_exists_isfile_and_isdir_answer_and_trace_as_their_stdlib_bodies(mount, seed,
                                                                       monkeypatch):
    # The routes answer "absent" from the caches without building an
    # exception (simfs/_patch/_probes.py); the standard library's own bodies
    # call the os.stat route and catch its OSError.  Same calls, same answers.
    absent = []
    original = Syscalls.cached_absent

    def counted(self: Syscalls, path: str) -> bool:
        absent.append(original(self, path))
        return absent[-1]

    monkeypatch.setattr(Syscalls, "cached_absent", counted)
    routed = _probed_run(mount, seed)
    assert True in routed[1] and False in routed[1]
    # The routes' own answer was taken, or this compares nothing; only where
    # negative entries are cached at all (not lookupcache=none or positive).
    assert (True in absent) == ("lookupcache" not in mount)
    monkeypatch.setattr(Syscalls, "cached_absent", original)
    owners = {os.path, *(klass for name in ("exists", "is_file", "is_dir")
                         for klass in Path.__mro__ if name in vars(klass))}
    for owner in owners:
        for name in ("exists", "isfile", "isdir", "is_file", "is_dir"):
            if name in vars(owner):
                route = vars(owner)[name]
                assert route.__module__ == "simfs._patch._probes", (owner, name)
                monkeypatch.setattr(owner, name, route.__wrapped__)
    assert _probed_run(mount, seed) == routed


# -- the remembered walk ------------------------------------------------------------
#
# ``cached_walk`` remembers its answer per path until the first attributes it
# read expire or ``cache_epoch`` moves.  That is only sound if every change to
# what the walk reads (attributes and their timeouts, directory verifiers,
# dentries, the access cache) moves the epoch before the next walk.  Walks
# start syscalls, so the property is "within the syscall"; the test holds the
# client to more, "before its next RPC or event", so that one change site
# without its bump fails here even where another site bumps in the same call.


def _cache_state(client: NfsClient) -> tuple[object, ...]:
    """What a cache-only walk reads, by value."""
    attrs = {fileid: (cached.attrs, cached.read_ns, cached.timeo_ns, cached.verifier)
             for fileid, cached in client.attrs.items()}
    dentries = {fileid: dict(entries) for fileid, entries in client.dentries.items()}
    return attrs, dentries, dict(client.access)


@pytest.mark.parametrize("mount", MOUNTS[:4])
@pytest.mark.parametrize("seed", range(3))
def test_every_syscall_that_changes_what_a_walk_reads_moves_the_cache_epoch(
        mount, seed, monkeypatch):
    world, writer, poller = _world(mount, seed)
    third = world.host("third", mount=mount)
    clients = [host.client for host in (writer, poller, third)]
    seen = {id(client): (client.cache_epoch, _cache_state(client)) for client in clients}
    checked = {"changes": 0}
    record = type(world.trace).record

    def check(where: object) -> None:
        for client in clients:
            epoch, state = seen[id(client)]
            now = (client.cache_epoch, _cache_state(client))
            if now[1] != state:
                checked["changes"] += 1
                assert now[0] != epoch, f"caches changed under epoch {epoch}: {where}"
            seen[id(client)] = now

    def record_and_check(trace: Any, *args: Any, **kwargs: Any) -> None:
        record(trace, *args, **kwargs)
        check(args)

    rpc = NfsClient._rpc

    def check_and_rpc(client: NfsClient, name: str) -> None:
        check(f"before {name}")
        rpc(client, name)

    monkeypatch.setattr(type(world.trace), "record", record_and_check)
    monkeypatch.setattr(NfsClient, "_rpc", check_and_rpc)
    world.spawn(writer, _changer, seed, 60)
    world.spawn(third, _changer, seed + 7, 60)
    world.spawn(poller, _poller, seed, 200)
    world.run()
    assert checked["changes"] > 100, checked  # the check saw the caches change
