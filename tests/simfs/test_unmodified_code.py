"""Unmodified code in the world: plain_programs.py never imports simfs.

Each test runs a plain function as a simulated process and checks what it
saw.  The NFS facts involved are docs/nfs-facts.md, "Attribute and dentry
caches" (the seed-000 stall) and nfs(5) (flock emulated as NLM locks,
"local_lock=none").
"""

import _thread
import errno
import threading
import time

import pytest

from simfs import BlockedOutsideSimulation, SimulationEscape, World

from . import plain_programs as plain


def _run(function, *args, seed=0, mount="vers=3", **world):
    w = World(seed=seed, **world)
    process = w.spawn(w.host("a", mount=mount), function, *args)
    w.run()
    return w, process.result()


@pytest.mark.parametrize("created_at", [0.3, 1.7])
def test_a_plain_exists_poller_stalls_until_acdirmin_as_in_seed_000(created_at):
    w = World()
    w.server.mkdir("/shared/t")
    w.spawn(w.host("a"), plain.create_marker, "/shared/t/marker", created_at)
    poller = w.spawn(w.host("b"), plain.poll_exists, "/shared/t/marker")
    w.run()
    # acdirmin after the first poll (docs/nfs-facts.md, "Attribute and dentry caches")
    assert poller.result() == pytest.approx(30.0)


def test_the_same_code_with_the_seeds_revalidating_check_sees_it_within_a_poll():
    w = World()
    w.server.mkdir("/shared/t")
    w.spawn(w.host("a"), plain.create_marker, "/shared/t/marker", 1.3)
    poller = w.spawn(w.host("b"), plain.poll_revalidating, "/shared/t/marker")
    w.run()
    assert 1.3 <= poller.result() <= 1.4


def test_os_and_os_path_calls_reach_the_simulated_export():
    w, seen = _run(plain.os_matrix, "/shared")
    assert seen["fstat_size"] == 5 and seen["excl"] == "EEXIST"
    assert seen["read"] == b"hello world" and seen["stat_size"] == 11
    assert seen["lstat_is_file"] and seen["exists"] == (True, False) and seen["isdir"]
    assert seen["getsize"] == 11 and seen["getmtime"] == 2000.0
    assert seen["listdir"] == ["b", "f"] and seen["scandir"] == [("b", True), ("f", False)]
    assert seen["walk"] == [("/shared", ["a"], []), ("/shared/a", ["b"], ["f"]),
                            ("/shared/a/b", [], [])]
    assert seen["nlink"] == 2 and seen["replaced"] == "replacement"
    assert seen["rmdir_missing"] == "ENOENT" and seen["left"] == []
    assert {event.op for event in w.trace} >= {"open", "write", "fsync", "stat", "scandir",
                                               "link", "rename", "unlink", "rmdir", "utime"}


def test_pathlib_and_open_reach_the_simulated_export():
    w, seen = _run(plain.pathlib_matrix, "/shared")
    assert seen["exists"] == (True, False) and seen["is_dir"] and seen["size"] == 2
    assert seen["text"] == "héllo\nmore\n" and seen["lines"] == ["héllo\n", "more\n"]
    assert seen["bytes"] == b"\x00\x01" and seen["middle"] == b"cd"
    assert seen["iterdir"] == ["b.bin", "r.bin", "sub", "t.txt", "touched", "x"]
    assert seen["glob"] == ["b.bin", "r.bin"] and seen["stdlib_glob"] == ["t.txt"]
    assert seen["after"] == ["r.bin", "touched", "x"]
    assert w.server.read_text("/shared/p/x") == "new"


def test_shutil_copies_moves_and_removes_trees():
    _, seen = _run(plain.shutil_matrix, "/shared")
    assert "tree/deep/w.bin" in seen["tree"] and seen["copied"] and seen["mtime_kept"]
    assert seen["left"] == ["copy2.json", "copyfile.json", "moved.json"]


def test_tempfile_works_in_a_simulated_directory_with_seeded_names():
    _, first = _run(plain.tempfile_matrix, "/shared", seed=4)
    _, again = _run(plain.tempfile_matrix, "/shared", seed=4)
    _, other = _run(plain.tempfile_matrix, "/shared", seed=5)
    assert first["during"] and first["tmpdir_removed"] and first["mkdtemp"]
    assert first["mkstemp"].startswith("ck-") and first["mkstemp"] in first["left"]
    assert first == again and first["mkstemp"] != other["mkstemp"]


def test_flock_excludes_across_hosts_until_the_holder_unlocks():
    # nfs(5) local_lock=none: flock is sent to the server, so it excludes
    # across hosts as well as within one.
    w = World()
    w.server.write_bytes("/shared/lock", b"")
    holder = w.spawn(w.host("a"), plain.hold_flock, "/shared/lock", 3.0)
    waiter = w.spawn(w.host("b"), plain.wait_flock, "/shared/lock", 1.0)
    w.run()
    assert holder.result() == [("locked", 0.0), ("unlocked", 3.0)]
    assert waiter.result() == {"nonblocking": "EWOULDBLOCK", "got": 3.0}


def test_lockf_needs_a_writable_descriptor_for_an_exclusive_lock():
    assert _run(plain.lockf_needs_a_writable_descriptor, "/shared/l")[1] == "EBADF"


def test_flock_and_lockf_conflict_because_nfs_emulates_flock_with_posix_locks():
    assert _run(plain.lockf_conflicts_with_flock, "/shared/l")[1] == "conflict"


def test_timed_waits_on_threading_primitives_take_virtual_time():
    _, seen = _run(plain.timed_waits)
    assert seen == {"event_timeout": (False, 5.0), "condition_timeout": (False, 7.0),
                    "semaphore_timeout": (False, 8.5), "queue_timeout": (False, 9.0)}


def test_threads_locks_events_and_queues_are_simulated():
    w, results = _run(plain.producer_consumer)
    assert results == [(0, 1.0), (1, 1.5), (2, 2.0), "done", False]
    assert any(event.process == "consumer" for event in w.trace)


def test_a_thread_pool_writes_checkpoints_in_virtual_time():
    w, seen = _run(plain.pool_writes_checkpoints, "/shared", 6)
    assert seen["paths"] == 6
    # Three workers, shard k takes 0.1*(k+1) s; shards 3, 4, 5 follow shards
    # 0, 1, 2 on the worker that frees first: the pool drains at 0.3 + 0.6 = 0.9 s,
    # plus the microseconds the shards' bytes take on the default 10 Gbit/s link
    # (a sum of the six waits would be 2.1 s).
    assert seen["elapsed"] == pytest.approx(0.9, abs=1e-3)
    assert w.server.exists("/shared/step_1/.finished")
    assert len(w.server.listdir("/shared/step_1")) == 7


def _leaves_a_loop_thread_and_its_pool(results):
    import asyncio

    loop = asyncio.new_event_loop()  # never stopped: a library's loop thread, as zarr's
    threading.Thread(target=loop.run_forever, name="io", daemon=True).start()

    async def job():
        return await asyncio.to_thread(sum, [1, 2])  # the loop's pool starts a worker

    results.append(asyncio.run_coroutine_threadsafe(job(), loop).result())


def test_a_pool_worker_left_waiting_when_the_world_ends_goes_without_a_traceback(caplog):
    # A real process's threads end with it without a word; each idle worker
    # unwound at teardown logged "Exception in worker" with a ProcessKilled.
    results = []
    w = World(seed=1)
    w.spawn(w.host("a"), _leaves_a_loop_thread_and_its_pool, results)
    w.run()
    assert results == [3]
    assert [r.getMessage() for r in caplog.records if r.name == "concurrent.futures"] == []


def test_two_async_hosts_in_one_world():
    w = World(seed=2)
    w.server.mkdir("/shared/t")
    publisher = w.spawn(w.host("trainer"), plain.async_publish, "/shared/t/ready", 1.0)
    waiter = w.spawn(w.host("consumer"), plain.async_wait, "/shared/t/ready")
    w.run()
    assert publisher.result() == pytest.approx(1.0)
    seen, order = waiter.result()
    assert seen == pytest.approx(30.0, abs=1e-6) and sorted(order) == [0, 1, 2, 3]


def test_trio_run_called_by_plain_code_uses_the_world_clock():
    w, seen = _run(plain.sync_calls_trio_run, "/shared/r")
    assert seen == pytest.approx(2.0) and w.now == pytest.approx(2.0)


def _digest_of(function, *args, seed):
    w = World(seed=seed)
    w.server.mkdir("/shared/t")
    for host in ("a", "b"):
        w.spawn(w.host(host), function, *args)
    w.run()
    return w.trace.digest(), w.choices


@pytest.mark.parametrize("program, args", [
    (plain.producer_consumer, ()),
    # ThreadPoolExecutor numbers its threads from a class-level counter; the
    # routes count them per simulated process, so two worlds agree.
    (plain.pool_writes_checkpoints, ("/shared/t", 4)),
    (plain.async_wait, ("/shared/t/absent-until-timeout",)),
])
def test_the_same_seed_gives_the_same_digest_for_threads_and_trio(program, args):
    if program is plain.async_wait:
        def program(path):
            import trio

            async def bounded():
                with trio.move_on_after(3):
                    await plain.async_wait(path)
            return trio.run(bounded)
    for seed in (1, 2, 3):
        assert _digest_of(program, *args, seed=seed) == _digest_of(program, *args, seed=seed)


@pytest.mark.parametrize("program, named", [
    (plain.read_outside_the_export, "open('/etc/hostname'): this path names the real machine"),
    (plain.run_a_subprocess, "subprocess.Popen"),
    (plain.open_a_socket, "socket.create_connection(('example.com', 80))"),
    (plain.swallow_an_escape, "os.rmdir('/etc') would change the real machine"),
    (plain.call_a_captured_original, "a real os.mkdir('/shared/made-for-real')"),
])
def test_each_escape_is_refused_naming_the_process_and_host(program, named):
    w = World()
    w.spawn(w.host("gpu7"), program, name="trainer")
    with pytest.raises(SimulationEscape) as caught:
        w.run()
    assert named in str(caught.value)
    assert "'trainer'" in str(caught.value) and "'gpu7'" in str(caught.value)


def test_a_real_blocking_wait_is_reported_with_process_host_and_last_call():
    lock = _thread.allocate_lock()
    lock.acquire()
    # 1 s, not 0.2: the watchdog also counts the real time before the first
    # simulated call (a process's import of its own modules, a gc pass).
    w = World(step_timeout=1.0)
    w.spawn(w.host("h"), plain.wait_on_a_real_lock, lock, name="waiter")
    with pytest.raises(BlockedOutsideSimulation, match=r"'waiter' on host 'h'.*stat"):
        w.run()
    lock.release()


def test_code_outside_any_process_is_not_patched(tmp_path):
    w, _ = _run(plain.os_matrix, "/shared")
    (tmp_path / "real.txt").write_text("real")
    assert (tmp_path / "real.txt").read_text() == "real"
    # The test body's clock is the real one (the world's starts at 2026-01-01).
    import datetime

    assert abs(time.time() - datetime.datetime.now().timestamp()) < 60
    assert isinstance(threading.Lock(), type(_thread.allocate_lock()))


def test_hostname_pid_time_and_randomness_are_per_host_and_seeded():
    w = World(seed=9)
    first = w.spawn(w.host("a"), plain.who_am_i)
    second = w.spawn(w.host("b"), plain.who_am_i)
    w.run()
    one, two = first.result(), second.result()
    assert (one["hostname"], two["hostname"]) == ("a", "b")
    assert one["pid"] != two["pid"] and one["time"] == 1_767_225_600.0
    again = World(seed=9)
    repeat = again.spawn(again.host("a"), plain.who_am_i)
    again.spawn(again.host("b"), plain.who_am_i)
    again.run()
    assert repeat.result() == one


def test_errors_inside_the_world_are_real_oserror_subclasses():
    def rmdir_missing():
        import os

        try:
            os.rmdir("/shared/missing")
        except FileNotFoundError as error:
            return error.errno, error.filename, str(error), error.simfs_simulated

    assert _run(rmdir_missing)[1] == (
        errno.ENOENT, "/shared/missing", "[Errno 2] No such file or directory: '/shared/missing'",
        True)


def test_trios_scheduling_choices_follow_the_worlds_seed():
    def order(seed):
        w = World(seed=seed)
        process = w.spawn(w.host("a"), plain.racing_tasks)
        w.run()
        return process.result()

    assert order(3) == order(3)
    assert len({tuple(order(seed)) for seed in range(6)}) > 1
