"""reference.fs under simulated NFS: each primitive against the failure it exists for.

Facts: docs/nfs-facts.md (negative-lookup stall, close-to-open revalidation,
the grandparent open when the parent does not exist yet, silly rename).
"""

import errno
import os
import time
from pathlib import Path

import pytest
import trio

from reference import fs
from simfs import FaultPlan, FaultRule, World


def _world(**kwargs):
    world = World(**kwargs)
    return world, world.host("a"), world.host("b")


def _create_at(path, at, make_parent=False):
    time.sleep(at)
    if make_parent:
        os.mkdir(os.path.dirname(path))
    Path(path).touch()
    return time.monotonic()


def _poll(check, path):
    while not check(path):
        time.sleep(0.1)
    return time.monotonic()


@pytest.mark.parametrize("parent_exists", [True, False])
def test_marker_exists_sees_another_hosts_file_within_one_poll(parent_exists):
    world, a, b = _world()
    world.server.mkdir("/shared/bcast")
    if parent_exists:
        world.server.mkdir("/shared/bcast/step")
    world.spawn(a, _create_at, "/shared/bcast/step/m", 1.05, not parent_exists)
    seen = world.spawn(b, _poll, fs.marker_exists, "/shared/bcast/step/m")
    world.run()
    assert 1.05 <= seen.result() <= 1.15


@pytest.mark.parametrize("parent_exists", [True, False])
def test_a_bare_exists_stalls_where_marker_exists_does_not(parent_exists):
    world, a, b = _world()
    world.server.mkdir("/shared/bcast")
    if parent_exists:
        world.server.mkdir("/shared/bcast/step")
    world.spawn(a, _create_at, "/shared/bcast/step/m", 1.05, not parent_exists)
    seen = world.spawn(b, _poll, os.path.exists, "/shared/bcast/step/m")
    world.run()
    # acdirmin after the lookup at 0 that cached "absent", with or without
    # step: b's first walk sends ACCESS for each directory before looking in
    # it, whose post-op attributes show what the server made (nfs3_proc_access
    # -> nfs_refresh_inode), so every dentry it makes verifies.
    assert seen.result() == pytest.approx(30.0)


def test_revalidate_opens_the_grandparent_only_when_the_parent_is_missing():
    def revalidate_twice():
        fs.revalidate("/shared/bcast/step/m")   # step missing: parent, grandparent, parent
        os.mkdir("/shared/bcast/step")
        fs.revalidate("/shared/bcast/step/m")   # step present: one open

    world, a, _ = _world()
    world.server.mkdir("/shared/bcast")
    world.spawn(a, revalidate_twice)
    world.run()
    opened = [e.path for e in world.trace.select(op="open")]
    assert opened == ["/shared/bcast/step", "/shared/bcast", "/shared/bcast/step",
                      "/shared/bcast/step"]


def test_wait_for_path_returns_once_the_file_appears():
    def wait():
        fs.wait_for_path("/shared/m", timeout=60, poll=0.1)
        return time.monotonic()

    world, a, b = _world()
    world.spawn(a, _create_at, "/shared/m", 2.0)
    waiter = world.spawn(b, wait)
    world.run()
    assert 2.0 <= waiter.result() <= 2.1


def test_wait_for_path_raises_timeout_naming_the_path_and_the_time_waited():
    def wait():
        fs.wait_for_path("/shared/never", timeout=1.5, poll=0.4)

    world, a, _ = _world()
    waiter = world.spawn(a, wait)
    world.run(check=False)  # the timeout is the expected outcome
    with pytest.raises(TimeoutError, match=r"'/shared/never' did not appear within 1.5 s "
                                           r"\(waited 1.50 s\)"):
        waiter.result()
    assert world.now == pytest.approx(1.5)  # the last sleep is cut to the deadline


@pytest.mark.parametrize("timeout, poll", [(-1, 0.1), (1, 0), (1, -0.5)])
def test_wait_for_path_refuses_bad_timeouts_and_polls(timeout, poll):
    with pytest.raises(ValueError):
        fs.wait_for_path("/nowhere", timeout=timeout, poll=poll)


def test_wait_for_path_async_under_trio():
    async def wait(path):
        await fs.wait_for_path_async(path, timeout=60, poll=0.1)
        return trio.current_time()

    async def wait_too_long():
        with pytest.raises(TimeoutError, match=r"did not appear within 0\.5 s"):
            await fs.wait_for_path_async("/shared/never", timeout=0.5, poll=0.1)
        return "timed out"

    world, a, b = _world()
    world.spawn(a, _create_at, "/shared/m", 3.0)
    waiter = world.spawn(b, wait, "/shared/m")
    impatient = world.spawn(b, wait_too_long)
    world.run()
    assert 3.0 <= waiter.result() <= 3.1 + 1e-6
    assert impatient.result() == "timed out"


def test_ensure_dir_succeeds_when_another_host_made_it_after_a_cached_miss():
    def late_ensure():
        assert not os.path.isdir("/shared/out/cfg/deep")  # caches "absent"
        time.sleep(2.0)
        fs.ensure_dir("/shared/out/cfg/deep")
        return os.path.isdir("/shared/out/cfg/deep")

    def other_host_creates():
        time.sleep(1.0)
        fs.ensure_dir("/shared/out/cfg/deep")

    world, a, b = _world()
    world.server.mkdir("/shared/out")
    world.spawn(a, other_host_creates)
    process = world.spawn(b, late_ensure)
    world.run()
    assert process.result() is True


def test_atomic_write_replaces_with_a_writer_unique_temp_and_fsyncs():
    def write_twice():
        fs.atomic_write("/shared/meta.json", b"one")
        fs.atomic_write("/shared/meta.json", b"two")

    world, a, _ = _world()
    world.spawn(a, write_twice)
    world.run()
    assert world.server.listdir("/shared") == ["meta.json"]
    assert world.server.read_bytes("/shared/meta.json") == b"two"
    temps = [e.path for e in world.trace.select(op="open") if e.path.endswith(".tmp")]
    assert len(set(temps)) == 2 and all(".meta.json.a." in t for t in temps)
    assert len(world.trace.select(op="fsync")) == 4  # file and directory, twice


def test_two_hosts_writing_one_file_never_share_a_temp_name():
    world, a, b = _world(seed=3)
    world.spawn(a, fs.atomic_write, "/shared/meta.json", b"from a")
    world.spawn(b, fs.atomic_write, "/shared/meta.json", b"from b")
    world.run()
    assert world.server.listdir("/shared") == ["meta.json"]
    assert world.server.read_bytes("/shared/meta.json") in (b"from a", b"from b")


def test_list_entries_keeps_nfs_leftovers_apart_after_replacing_an_open_file():
    def replace_while_open():
        fs.atomic_write("/shared/ckpt/metadata.json", b"v1")
        reader = open("/shared/ckpt/metadata.json", "rb")
        fs.atomic_write("/shared/ckpt/metadata.json", b"v2")
        listing = fs.list_entries("/shared/ckpt")
        reader.close()
        return listing, fs.list_entries("/shared/ckpt")

    world, a, _ = _world()
    world.server.mkdir("/shared/ckpt")
    world.server.mkdir("/shared/ckpt/step_1")
    process = world.spawn(a, replace_while_open)
    world.run()
    during, after = process.result()
    assert during.entries == ("metadata.json", "step_1") and len(during.nfs_leftovers) == 1
    assert after.entries == ("metadata.json", "step_1") and after.nfs_leftovers == ()


# -- remove_tree (seed 002) -------------------------------------------------------------


class _RecordingLock:
    """A context manager that records, per use, whether it was held."""

    def __init__(self):
        self.held = False
        self.attempts_held = []

    def __call__(self):
        return self

    def __enter__(self):
        self.held = True
        return self

    def __exit__(self, *exc):
        self.held = False


def _rmtree_faults(*codes):
    """The first len(codes) rmtree attempts fail with these errnos (on their rmdir)."""
    return FaultPlan(rules=tuple(
        FaultRule(op="rmdir", path="/shared/ckpt/step_*", errno=code, nth=index + 1)
        for index, code in enumerate(codes)))


def _cleanup(paths, lock=None, waits=(0.05, 0.1, 0.2, 0.4)):
    budget = fs.RetryBudget(waits=waits)
    slept = []
    lock = lock or _RecordingLock()

    def sleep(seconds):
        slept.append((seconds, lock.held))
        time.sleep(seconds)

    def attempt_lock():
        lock.attempts_held.append("lock")
        return lock

    reports = [fs.remove_tree(p, budget=budget, attempt_lock=attempt_lock, sleep=sleep)
               for p in paths]
    return reports, slept, budget


def _prepare(world, count):
    world.server.mkdir("/shared/ckpt")
    for index in range(count):
        world.server.mkdir(f"/shared/ckpt/step_{index}")
        world.server.write_bytes(f"/shared/ckpt/step_{index}/w.bin", b"w")
    return [f"/shared/ckpt/step_{index}" for index in range(count)]


def test_remove_tree_retries_enotempty_ebusy_enoent_then_succeeds_lock_per_attempt():
    world = World(faults=_rmtree_faults(errno.ENOTEMPTY, errno.EBUSY, errno.ENOENT))
    paths = _prepare(world, 1)
    lock = _RecordingLock()
    process = world.spawn(world.host("a"), _cleanup, paths, lock)
    world.run()
    (report,), slept, budget = process.result()
    assert report.removed and report.attempts == 4
    assert [s for s, _ in slept] == [0.05, 0.1, 0.2]
    assert all(not held for _, held in slept)  # no wait holds the lock
    assert lock.attempts_held == ["lock"] * 4  # every attempt took it
    assert not world.server.exists(paths[0])


def test_all_five_attempts_hold_the_lock_and_the_four_waits_do_not():
    world = World(faults=_rmtree_faults(*[errno.ENOTEMPTY] * 5))
    paths = _prepare(world, 1)
    held_during_rmdir = []
    lock = _RecordingLock()

    def watch():
        # The rmdir inside each rmtree attempt: record whether the lock is held.
        import shutil
        real = shutil.rmtree

        def recording(path, *args, **kwargs):
            held_during_rmdir.append(lock.held)
            return real(path, *args, **kwargs)

        shutil.rmtree = recording
        try:
            return _cleanup(paths, lock)
        finally:
            shutil.rmtree = real

    process = world.spawn(world.host("a"), watch)
    world.run()
    (report,), slept, _ = process.result()
    assert not report.removed and report.attempts == 5
    assert held_during_rmdir == [True] * 5
    assert [held for _, held in slept] == [False] * 4


def test_the_budget_is_shared_by_all_removals_of_one_cleanup():
    world = World(faults=FaultPlan(rules=(
        FaultRule(op="rmdir", path="/shared/ckpt/step_*", errno=errno.ENOTEMPTY),)))
    paths = _prepare(world, 10)
    process = world.spawn(world.host("a"), _cleanup, paths)
    world.run()
    reports, slept, budget = process.result()
    assert sum(r.attempts for r in reports) == 14  # 5 for the first, 1 for each other
    assert sum(s for s, _ in slept) == pytest.approx(0.75)
    assert not any(r.removed for r in reports)


def test_enoent_after_the_directory_is_gone_is_not_retried():
    world = World()
    world.server.mkdir("/shared/ckpt")
    process = world.spawn(world.host("a"), _cleanup, ["/shared/ckpt/step_9"])
    world.run()
    (report,), slept, _ = process.result()
    assert report.removed and report.attempts == 1 and slept == []


def test_a_permission_error_is_tried_once_and_reported():
    world = World(faults=_rmtree_faults(errno.EACCES))
    paths = _prepare(world, 1)
    process = world.spawn(world.host("a"), _cleanup, paths)
    world.run()
    (report,), slept, _ = process.result()
    assert not report.removed and report.attempts == 1 and slept == []
    assert report.errors == ["EACCES: /shared/ckpt/step_0"]
    assert list(fs.iter_reports([report]))[0].startswith("could not remove /shared/ckpt/step_0")


def test_remove_tree_clears_a_real_silly_rename_once_the_writer_closes():
    def writer():
        handle = open("/shared/ckpt/step_0/w.bin", "rb")
        time.sleep(0.2)
        handle.close()

    world = World()
    paths = _prepare(world, 1)
    host = world.host("a")
    world.spawn(host, writer)
    cleaner = world.spawn(host, _cleanup, paths)
    world.run()
    (report,), slept, _ = cleaner.result()
    assert report.removed and report.attempts > 1
    assert any("ENOTEMPTY" in error for error in report.errors)
    assert not world.server.exists(paths[0])


def test_primitives_run_unchanged_on_a_local_disk(tmp_path):
    target = tmp_path / "d" / "m"
    fs.ensure_dir(target.parent)
    assert not fs.marker_exists(target)
    fs.atomic_write(target, b"x")
    assert fs.marker_exists(target) and target.read_bytes() == b"x"
    fs.wait_for_path(target, timeout=0, poll=0.1)
    assert fs.list_entries(target.parent) == fs.Listing(("m",), ())
    report = fs.remove_tree(target.parent, budget=fs.RetryBudget())
    assert report.removed and not target.parent.exists()
