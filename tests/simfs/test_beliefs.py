"""A host's belief is the client's own answer: it predicts the next syscall.

``Host.belief`` asks ``NfsClient.verdict`` (the code ``lookup`` acts on) at
each step of the walk a ``stat`` makes (docs/design.md, "Trace and beliefs";
STYLE "one source of truth per rule").  "present" and "absent" are what
``exists()`` returns next; "unknown" means the server decides.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfs import World, current_process, posix


def _believe_then_look(path: str) -> tuple[str, bool]:
    process = current_process()
    assert process is not None
    belief = process.host.belief(path)
    return belief.believes, os.path.exists(path)


@pytest.mark.parametrize("mount", ["vers=3", "vers=3,lookupcache=none"])
def test_the_belief_after_another_hosts_removal_agrees_with_exists(mount):
    # Issue 11: at t=4 s after host A removed /shared/f, B's old belief said
    # "present until 30 s" while B's exists() returned False.
    def look_at(times: list[float]) -> list[tuple[str, bool]]:
        seen = []
        for at in times:
            posix.sleep(at - posix.monotonic())
            seen.append(_believe_then_look("/shared/f"))
        return seen

    def remove_at(at: float) -> None:
        posix.sleep(at)
        os.unlink("/shared/f")

    world = World()
    world.server.write_bytes("/shared/f", b"x")
    a, b = world.host("a"), world.host("b", mount=mount)
    world.spawn(a, remove_at, 1.0)
    process = world.spawn(b, look_at, [0.0, 0.5, 4.0])
    world.run()
    for believes, exists in process.result():
        assert believes == "unknown" or (believes == "present") == exists
    assert process.result()[-1][1] is False


def test_a_trusted_negative_entry_is_believed_absent_until_acdirmin():
    def look_twice() -> list[str]:
        os.path.exists("/shared/t/m")
        os.path.exists("/shared/t/m")  # verifies t's dentry (the first reply saw a change)
        posix.sleep(1.0)
        return [_believe_then_look("/shared/t/m")[0]]

    world = World()
    world.server.mkdir("/shared/t")
    host = world.host("b")
    process = world.spawn(host, look_twice)
    world.run()
    assert process.result() == ["absent"]
    belief = host.belief("/shared/t/m")
    assert belief.until == pytest.approx(30.0)
    assert "negative dentry for 'm' in /shared/t" in belief.because and "acdirmin=30" in (
        belief.because)


def test_expired_file_attributes_make_the_belief_unknown():
    # The stat would send a GETATTR: the server, not the cache, answers.
    world = World()
    world.server.write_bytes("/shared/f", b"x")
    host = world.host("b", mount="vers=3,acregmin=3,acregmax=3")
    def look_then_wait() -> str:
        os.path.exists("/shared/f")
        os.path.exists("/shared/f")
        fresh = host.belief("/shared/f").believes
        posix.sleep(10)
        return fresh

    process = world.spawn(host, look_then_wait)
    world.run()
    belief = host.belief("/shared/f")
    assert process.result() == "present"
    assert belief.believes == "unknown" and "acregmin=3" in belief.because


MOUNTS = ["vers=3", "vers=3,acdirmin=3,acdirmax=3", "vers=3,lookupcache=positive",
          "vers=3,lookupcache=none", "vers=3,actimeo=1", "vers=3,noac"]
PATHS = ["/shared/d", "/shared/d/f", "/shared/g", "/shared/d/e/h"]

operation = st.tuples(st.floats(0, 12, allow_nan=False).map(lambda t: round(t, 2)),
                      st.sampled_from(["create", "remove", "mkdir", "rmdir", "replace"]),
                      st.sampled_from(PATHS))


def _act(op: str, path: str) -> None:
    try:
        if op == "create":
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        elif op == "remove":
            os.unlink(path)
        elif op == "mkdir":
            os.mkdir(path)
        elif op == "rmdir":
            os.rmdir(path)
        else:
            with open(path + ".tmp", "w") as handle:
                handle.write("x")
            os.replace(path + ".tmp", path)
    except OSError:
        pass  # the world's state made the operation fail: that is fine here


def _script(steps: list[tuple[float, str, str]]) -> None:
    for at, op, path in sorted(steps):
        posix.sleep(max(0.0, at - posix.monotonic()))
        _act(op, path)


def _checks(looks: list[tuple[float, str]], acts: list[tuple[float, str, str]]
            ) -> list[tuple[float, str, str, bool]]:
    seen = []
    events = sorted([(at, "look", path, "") for at, path in looks]
                    + [(at, "act", path, op) for at, op, path in acts])
    for at, kind, path, op in events:
        posix.sleep(max(0.0, at - posix.monotonic()))
        if kind == "act":
            _act(op, path)
            continue
        believes, exists = _believe_then_look(path)
        seen.append((posix.monotonic(), path, believes, exists))
    return seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mount=st.sampled_from(MOUNTS), seed=st.integers(0, 3),
       other=st.lists(operation, max_size=8), own=st.lists(operation, max_size=3),
       looks=st.lists(st.tuples(st.floats(0, 45, allow_nan=False).map(lambda t: round(t, 2)),
                                st.sampled_from(PATHS)), min_size=1, max_size=16))
def test_the_belief_predicts_the_next_exists_in_random_small_worlds(mount, seed, other, own,
                                                                    looks):
    world = World(seed=seed)
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/f", b"x")
    a, b = world.host("a"), world.host("b", mount=mount)
    world.spawn(a, _script, other)
    process = world.spawn(b, _checks, looks, own)
    world.run()
    for at, path, believes, exists in process.result():
        if believes != "unknown":
            assert (believes == "present") == exists, (at, path, believes, world.trace.format())



def _look_at_the_edge(path: str, reopen_at: float | None
                      ) -> tuple[float, list[tuple[str, bool, int]]]:
    """The belief's ``until``, then (belief, exists(), RPCs the exists() sent)
    a millisecond before that instant and at it.  ``reopen_at``: open
    /shared/d then, which refreshes its attributes alone (close-to-open),
    so that /shared's, read at 0 s, expire first."""
    process = current_process()
    assert process is not None
    host = process.host
    os.path.exists(path)
    os.path.exists(path)  # the second look verifies what the first reply changed
    if reopen_at is not None:
        posix.sleep(reopen_at)
        os.close(os.open("/shared/d", os.O_RDONLY))
    until = host.belief(path).until
    assert until is not None
    seen = []
    for at in (until - 0.001, until):
        posix.sleep(at - posix.monotonic())
        believes = host.belief(path).believes
        sent = sum(host.rpc_counts().values())
        exists = os.path.exists(path)
        seen.append((believes, exists, sum(host.rpc_counts().values()) - sent))
    return until, seen


@pytest.mark.parametrize(("mount", "path", "reopen_at", "lifetime", "believed"), [
    # a file: its own attributes (acregmin) expire before its directories' (acdirmin)
    ("vers=3,acregmin=3,acregmax=3,acdirmin=30,acdirmax=30", "/shared/d/f", None, 3.0,
     "present"),
    # the same file when its directories' attributes expire first
    ("vers=3,acregmin=30,acregmax=30,acdirmin=5,acdirmax=5", "/shared/d/f", None, 5.0,
     "present"),
    # ... and when /shared's expire before those of /shared/d, read again at 2 s
    ("vers=3,acregmin=30,acregmax=30,acdirmin=5,acdirmax=5", "/shared/d/f", 2.0, 5.0,
     "present"),
    # a negative dentry, trusted while its directory's attributes are (acdirmin)
    ("vers=3,acdirmin=4,acdirmax=4", "/shared/missing", None, 4.0, "absent"),
    # ... and no longer than those of the directories above it
    ("vers=3,acdirmin=5,acdirmax=5", "/shared/d/missing", 2.0, 5.0, "absent"),
])
def test_a_belief_holds_until_the_instant_the_next_stat_asks_the_server(
        mount, path, reopen_at, lifetime, believed):
    # The belief predicts the next syscall (nfs(5): attributes are trusted
    # for acregmin/acdirmin seconds after they were read): until its "until"
    # the stat is answered from the caches, at that very instant the belief
    # is "unknown" and the stat sends an RPC.
    world = World()
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/f", b"x")
    process = world.spawn(world.host("b", mount=mount), _look_at_the_edge, path, reopen_at)
    world.run()
    until, (just_before, at_expiry) = process.result()
    assert until == pytest.approx(lifetime, abs=1e-9)
    assert just_before == (believed, believed == "present", 0)
    assert at_expiry[0] == "unknown" and at_expiry[2] > 0
