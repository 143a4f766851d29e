"""``World(store=)``: the server's file data on the real disk, invisible to the model.

With a store, the server's blocks and every clean page a host caches are
numbers of immutable blocks in one real file (``simfs/_nfs/_store.py``), so
the same run gives the same RPCs, trace and answers as without one, a stale
page included, while RAM holds numbers instead of data.  Memory is counted
with tracemalloc (bytes, not timings); a full disk is simulated by making
the store's real write fail.
"""

import errno
import hashlib
import mmap
import os
import tracemalloc

import pytest

import simfs
import simfs._nfs._pagecache as pagecache_module
import simfs._nfs._store as store_module
from simfs import FaultPlan, HostCrash, StoreError, World, posix

from .helpers import SPARSE_SIZE, run_alone, two_hosts, write_sparse_then_read_holes

MIB = 1 << 20
PATTERN = bytes(range(251))  # a prime length: no page looks like its neighbour


def _data(size, salt=0):
    repeated = PATTERN * (size // len(PATTERN) + 2)
    return repeated[salt % len(PATTERN):][:size]


def _write(path, data, chunk=MIB):
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for start in range(0, len(data), chunk):
        posix.write(fd, data[start:start + chunk])
    posix.close(fd)


def _read(path):
    fd = posix.open(path, os.O_RDONLY)
    parts = []
    while chunk := posix.read(fd, MIB):
        parts.append(chunk)
    posix.close(fd)
    return b"".join(parts)


def test_a_file_written_on_one_host_reads_back_on_another_through_the_store(tmp_path):
    data = _data(3 * MIB + 1234)
    world, a, b = two_hosts(store=str(tmp_path))
    run_alone(world, a, _write, "/shared/f", data, 100_000)  # chunks across pages
    assert run_alone(world, b, _read, "/shared/f") == data
    assert world.server.read_bytes("/shared/f") == data
    assert os.listdir(tmp_path) == []  # the store's file is unlinked: nothing left behind


def _write_pattern(path, mib):
    block = _data(MIB)
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for _ in range(mib):
        posix.write(fd, block)
    posix.close(fd)


def _digest(path):
    fd = posix.open(path, os.O_RDONLY)
    digest = hashlib.sha256()
    while chunk := posix.read(fd, MIB):
        digest.update(chunk)
    posix.close(fd)
    return digest.hexdigest()


def test_with_a_store_ram_holds_block_numbers_not_the_files_bytes():
    mib = 16
    world, a, b = two_hosts(store=True)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run_alone(world, a, _write_pattern, "/shared/big", mib)
        digest = run_alone(world, b, _digest, "/shared/big")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Without a store the server's blocks alone hold 16 MiB; with one, the
    # server and two caches hold 4096 numbers each.
    assert held < mib * MIB / 4
    assert digest == hashlib.sha256(_data(MIB) * mib).hexdigest()


def _stale_reader(path):
    fd = posix.open(path, os.O_RDONLY)
    first = os.pread(fd, 8192, 0)  # cached: the page of 'a's
    posix.sleep(1.0)  # the writer's WRITE has landed; attributes still cached (acregmin=3)
    again = os.pread(fd, 8192, 0)
    posix.sleep(5.0)  # attributes expired: the change is seen, the cache dropped
    fresh = os.pread(fd, 8192, 0)
    posix.close(fd)
    return first, again, fresh


def _overwriter(path):
    posix.sleep(0.5)
    fd = posix.open(path, os.O_WRONLY)
    os.pwrite(fd, b"B" * 4096, 0)  # a whole page
    os.pwrite(fd, b"C" * 10, 5000)  # part of one
    posix.close(fd)


def _stale_run(store):
    world, a, b = two_hosts(store=store)
    world.server.write_bytes("/shared/f", b"a" * 8192)
    reader = world.spawn(b, _stale_reader, "/shared/f")
    world.spawn(a, _overwriter, "/shared/f")
    world.run()
    return reader.result(), world.trace.digest(), world.server.read_bytes("/shared/f")


def test_a_stale_cached_page_serves_its_old_data_with_the_store_as_without_it():
    (first, again, fresh), digest, server = _stale_run(True)
    changed = b"B" * 4096 + b"a" * 904 + b"C" * 10 + b"a" * 3182
    assert first == again == b"a" * 8192  # the old block, not the one written since
    assert fresh == server == changed
    assert _stale_run(None) == ((first, again, fresh), digest, server)


def _churn(path, me, rounds):
    flags = os.O_CREAT | os.O_RDWR
    for step in range(rounds):
        fd = posix.open(path, flags | (os.O_APPEND if step % 3 == 2 else 0), 0o644)
        offset = (step * 3000 + me * 1111) % 20_000
        os.pwrite(fd, _data(2500 + 700 * me, salt=step + me), offset)
        if step % 4 == 3:
            os.ftruncate(fd, offset + 100)
        seen = os.pread(fd, 6000, (offset // 2))
        posix.sleep(0.3 * (me + 1))
        posix.close(fd)
        yield seen


def _churner(path, me, rounds):
    return [len(seen) for seen in _churn(path, me, rounds)], \
        b"".join(_churn(path + f".{me}", me, 2))


def _scratch(me):
    _write(f"/scratch/s{me}", _data(50_000, salt=me), 7000)
    return _read(f"/scratch/s{me}")


def _churn_run(seed, store):
    world = World(seed=seed, store=store)
    hosts = [world.host(name, local={"/scratch": "1GiB"}) for name in ("a", "b", "c")]
    processes = [world.spawn(host, _churner, "/shared/x", me, 6)
                 for me, host in enumerate(hosts)]
    processes.append(world.spawn(hosts[0], _scratch, 0))
    world.run()
    return ([p.result() for p in processes], world.trace.digest(),
            world.server.read_bytes("/shared/x"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_of_overlapping_writes_truncates_and_appends_is_the_same_run_with_the_store(seed):
    assert _churn_run(seed, True) == _churn_run(seed, None)


def _holds_for_writing(path):
    fd = os.open(path, os.O_RDWR)
    seen = [os.pread(fd, 4, 0)]
    for at in (2.0, 4.5):  # the second after acregmin: a GETATTR shows the change
        posix.sleep(at - posix.monotonic())
        seen.append(os.pread(fd, 4, 0))
    os.close(fd)
    posix.sleep(0.5)
    fd = os.open(path, os.O_RDONLY)  # the next open invalidates
    seen.append(os.pread(fd, 4, 0))
    os.close(fd)
    return seen


def _rewrites(path):
    posix.sleep(1.0)
    _write(path, b"new!" * 1024)


def _deferred_run(store):
    world = World(seed=0, store=store)
    world.server.write_bytes("/shared/f", b"old!" * 1024)
    holder = world.spawn(world.host("b", mount="vers=3,acregmin=3,acregmax=3"),
                         _holds_for_writing, "/shared/f")
    world.spawn(world.host("a"), _rewrites, "/shared/f")
    world.run()
    return holder.result(), world.trace.digest()


def test_a_deferred_invalidation_keeps_stored_pages_as_it_keeps_pages_in_memory():
    # A host with the file open for writing keeps its pages past a foreign
    # change until its next open (NFS_INO_DATA_INVAL_DEFER); with a store its
    # clean pages are block numbers, and they are kept the same way.
    seen, digest = _deferred_run(True)
    assert seen == [b"old!", b"old!", b"old!", b"new!"]
    assert _deferred_run(None) == (seen, digest)


def test_a_hole_costs_the_store_nothing_and_reads_as_zeros():
    world, a, b = two_hosts(store=True)
    middle, around, st = run_alone(world, a, write_sparse_then_read_holes)
    assert (middle, around, st.st_blocks) == (bytes(MIB), b"\0x\0", 8)
    assert run_alone(world, b, lambda: os.pread(posix.open("/shared/sparse", os.O_RDONLY),
                                                   5, SPARSE_SIZE // 2 - 2)) == b"\0\0x\0\0"
    assert world._server_state.store.used == 4096  # the one block written, holes none


def test_a_store_directory_that_does_not_exist_is_refused_naming_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=r"World\(store=\): '.*nope' does not exist; "
                                         r"allowed: None .*True .*existing directory"):
        World(store=missing)


def test_a_store_that_is_a_file_is_refused_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"'.*file' is not a directory"):
        World(store=str(tmp_path / "file"))


def test_a_store_directory_that_cannot_be_written_is_refused_with_the_reason(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere a mode allows nothing; sysfs refuses it too
        directory = "/sys"
    else:
        directory = str(tmp_path)
        os.chmod(directory, 0o555)
    try:
        with pytest.raises(ValueError, match=r"World\(store=\): cannot write under "
                                             r"'.*': \[Errno 13\] Permission denied"):
            World(store=directory)
    finally:
        os.chmod(tmp_path, 0o755)


@pytest.mark.parametrize("value", [42, b"/tmp", 1.5])
def test_a_store_that_is_no_directory_or_flag_is_refused(value):
    with pytest.raises(TypeError, match=r"World\(store=\): .* allowed: None"):
        World(store=value)


def test_a_store_size_beyond_the_directorys_free_space_is_refused_before_the_run(tmp_path):
    info = os.statvfs(tmp_path)
    free = info.f_bavail * info.f_frsize
    with pytest.raises(ValueError, match=rf"World\(store_size={free + 4096}\): .* more than the "
                                         rf"{free} bytes .* free under '{tmp_path}'"):
        World(store=tmp_path, store_size=free + 4096)
    World(store=tmp_path, store_size="1MiB")  # room enough


def test_a_store_size_without_a_store_is_refused():
    with pytest.raises(ValueError, match=r"store_size=1048576\) limits a block store, but "
                                         "there is none"):
        World(store_size="1MiB")


def test_a_run_that_writes_past_store_size_stops_with_a_store_error():
    world, a, _ = two_hosts(store=True, store_size="1MiB")
    world.spawn(a, _write, "/shared/f", _data(2 * MIB))
    with pytest.raises(StoreError, match=r"take the store past World\(store_size=1048576\)"):
        world.run()


def _failing_disk(monkeypatch, after, short=False):
    """The store's real write fails as a full disk does, after ``after`` writes."""
    real = store_module._pwritev
    calls = [0]

    def pwritev(fd, buffers, offset):
        calls[0] += 1
        if calls[0] > after:
            if short:
                return real(fd, buffers[:1], offset) if len(buffers) > 1 else 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, buffers, offset)

    monkeypatch.setattr(store_module, "_pwritev", pwritev)


def _write_twice(path, caught):
    _write(path, b"1" * 10_000)
    fd = posix.open(path, os.O_WRONLY)
    os.pwrite(fd, b"2" * 10_000, 0)
    try:
        posix.fsync(fd)
    except Exception as error:  # a program that swallows everything still fails the run
        caught.append(error)
    return "went on"


@pytest.mark.parametrize("short", [False, True], ids=["ENOSPC", "short write"])
def test_a_full_disk_under_the_store_stops_the_run_and_leaves_the_file_as_it_was(
        monkeypatch, short):
    world, a, b = two_hosts(store=True)
    # The first close's WRITE lands: its two whole pages, then its last part page.
    _failing_disk(monkeypatch, after=2, short=short)
    caught = []
    world.spawn(a, _write_twice, "/shared/f", caught)
    with pytest.raises(StoreError, match=r"block store under a temporary directory: writing "
                                         r"8192 bytes of /shared/f.*No space left on device"
                                         r".*left as it was before that WRITE"):
        world.run()
    assert [type(error) for error in caught] == [StoreError]  # never a simulated OSError
    assert not isinstance(caught[0], OSError)
    assert world.server.read_bytes("/shared/f") == b"1" * 10_000
    assert isinstance(caught[0], simfs.SimfsError)


def test_the_compact_block_map_answers_as_a_dict_of_numbers_does():
    from simfs._nfs._store import NumberMap

    compact, plain = NumberMap(), {}
    for step in range(3000):
        index = (step * 7919) % 5000 + (1 << 30 if step % 5 == 0 else 0)  # far chunks too
        if step % 4 == 3:
            assert compact.pop(index, None) == plain.pop(index, None)
        else:
            compact[index] = plain[index] = step
        assert (compact.get(index, "hole"), index in compact) == \
            (plain.get(index, "hole"), index in plain)
    assert (len(compact), sorted(compact), dict(compact.items())) == \
        (len(plain), sorted(plain), dict(sorted(plain.items())))
    compact.clear()
    assert (len(compact), list(compact), compact.get(5)) == (0, [], None)


def test_a_full_disk_met_by_a_background_writeback_stops_the_run_too(monkeypatch):
    def dirty_then_wait(path):
        fd = posix.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        posix.write(fd, b"d" * 8192)  # written back on the client's own schedule
        posix.sleep(60.0)
        posix.close(fd)

    def poll(path):
        for _ in range(600):
            os.path.exists(path)
            posix.sleep(0.1)

    world, a, b = two_hosts(store=True)
    _failing_disk(monkeypatch, after=0)
    world.spawn(a, dirty_then_wait, "/shared/f")
    world.spawn(b, poll, "/shared/other")
    with pytest.raises(StoreError, match=r"writing 8192 bytes of /shared/f failed: "
                                         r"\[Errno 28\] No space left on device"):
        world.run()
    assert world.server.stat("/shared/f").size == 0  # the WRITE landed nothing
    # It landed during the poller's call on the other host, which met the error.
    assert isinstance(world.processes[1].exception(), StoreError)


# -- dirty pages in the store, and blocks reused ------------------------------
#
# A file's dirty pages go to the store once more than SPILL_PAGES of them
# hold their bytes in memory, and the blocks nothing refers to are found
# when the store has grown by _COLLECT_MIN blocks: both made tiny here, so
# that a short run spills and collects all the time, and compared with the
# same run without a store (every answer, the trace, the server's bytes).

PAGE = 4096


@pytest.fixture
def tiny_bounds(monkeypatch):
    spills = []
    real_spill = pagecache_module.PageCacheOps._spill

    def spill(self, cache):
        spills.append(len(cache.dirty))
        real_spill(self, cache)

    monkeypatch.setattr(pagecache_module, "SPILL_PAGES", 3)
    monkeypatch.setattr(pagecache_module.PageCacheOps, "_spill", spill)
    monkeypatch.setattr(store_module, "_COLLECT_MIN", 2)
    return spills


def _dirty_churn(path, me, rounds):
    """Writes that stay dirty: whole and partial pages, overwrites of dirty
    pages, a write-only descriptor's pages never read, truncates through
    dirty ranges, an mmap written through, an O_SYNC write, few fsyncs."""
    fd = posix.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    blind = posix.open(path, os.O_WRONLY)  # no read-modify-write: pages not up to date
    # A file this host has not read: pages written in parts stay not up to
    # date, dirty end to end or not, and reading one writes it back first.
    old_blind = posix.open(path + ".old", os.O_WRONLY)
    old_read = posix.open(path + ".old", os.O_RDONLY)
    seen = []
    for step in range(rounds):
        first = (step * 4 + me * 17) % 30
        for page in range(first, first + 4):
            os.pwrite(old_blind, b"h" * 100, page * PAGE)
            os.pwrite(old_blind, bytes([97 + step]) * (PAGE - 100), page * PAGE + 100)
        os.pwrite(old_blind, b"p" * 10, (first + 5) * PAGE + 100)
        os.pwrite(old_blind, b"q" * 10, (first + 5) * PAGE + 3000)  # the p's written back
        seen.append(os.pread(old_read, 3 * PAGE, (first + 3) * PAGE))
        base = ((step * 5 + me * 3) % 16) * PAGE
        os.pwrite(fd, _data(PAGE * 6 + 123 * step, salt=step + me), base + (step % 3) * 700)
        os.pwrite(blind, _data(100, salt=step), base + 2 * PAGE + 50)  # into a dirty page
        os.pwrite(blind, bytes([65 + step]) * PAGE, base + 3 * PAGE)  # a dirty page again
        os.pwrite(blind, _data(PAGE - 10, salt=me), base + 9 * PAGE + 10)  # never read
        if step % 4 == 1:
            os.ftruncate(fd, base + 4 * PAGE + 1000)  # through the dirty range
        if step % 5 == 2:
            posix.fsync(fd)
        if step == 3:
            sync = posix.open(path, os.O_WRONLY | os.O_SYNC)
            os.pwrite(sync, b"s" * 5000, base + 100)
            posix.close(sync)
        if step == 4 and os.fstat(fd).st_size >= 3 * PAGE:
            with mmap.mmap(fd, 3 * PAGE) as mapped:
                mapped[PAGE - 5:PAGE + 5] = b"M" * 10
                mapped.flush()
        seen.append(os.pread(fd, 9000, base))
        seen.append(os.pread(fd, 3 * PAGE, base + 8 * PAGE))
        posix.sleep(0.2 * (me + 1))
    posix.close(blind)
    posix.close(old_blind)
    if me:  # the other leaves its dirty pages to the close at its exit
        posix.close(fd)
    return seen


def _watch(paths, rounds):
    seen = []
    for _ in range(rounds):
        for path in paths:
            try:
                fd = posix.open(path, os.O_RDONLY)
            except FileNotFoundError:
                seen.append(None)
                continue
            seen.append(_digest_fd(fd))
            posix.close(fd)
        posix.sleep(0.7)
    return seen


def _digest_fd(fd):
    digest = hashlib.sha256()
    while chunk := posix.read(fd, 50_000):
        digest.update(chunk)
    return digest.hexdigest()


def _dirty_then_crash(path):
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    posix.write(fd, _data(20 * PAGE, salt=7))
    posix.fsync(fd)  # these 20 pages reach the server
    os.pwrite(fd, b"L" * (12 * PAGE), 4 * PAGE)  # these never do: the host crashes
    posix.sleep(100.0)


def _dirty_run(seed, store):
    world = World(seed=seed, store=store,
                  faults=FaultPlan(crashes=(HostCrash(host="c", at=1.5),)))
    a, b, c = (world.host(name) for name in "abc")
    world.server.write_bytes("/shared/d.old", _data(40 * PAGE, salt=3))
    processes = [world.spawn(a, _dirty_churn, "/shared/d", 0, 8),
                 world.spawn(b, _dirty_churn, "/shared/d", 1, 6),
                 world.spawn(b, _watch, ["/shared/d", "/shared/lost"], 8)]
    world.spawn(c, _dirty_then_crash, "/shared/lost")
    world.run(check=False)
    results = [p.result() for p in processes]
    return (results, world.trace.digest(), world.server.read_bytes("/shared/d"),
            world.server.read_bytes("/shared/lost"), world.server.read_bytes("/shared/d.old"),
            world)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dirty_pages_spilled_to_the_store_and_blocks_reused_change_nothing_a_run_shows(
        seed, tiny_bounds):
    with_store = _dirty_run(seed, True)
    assert with_store[:5] == _dirty_run(seed, None)[:5]
    # The crashed host's unflushed pages are lost, with the store as without.
    assert with_store[3] == _data(20 * PAGE, salt=7)
    store = with_store[5]._server_state.store
    assert tiny_bounds and store.collections and store.reused  # both paths ran


def _unflushed(path, mib):
    block = _data(MIB)
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for _ in range(mib):
        posix.write(fd, block)  # no fsync: every page dirty until the close
    posix.close(fd)


def test_a_file_written_without_fsync_holds_a_bounded_number_of_dirty_pages_in_ram():
    mib = 48
    world, a, b = two_hosts(store=True)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run_alone(world, a, _unflushed, "/shared/big", mib)
        peak = tracemalloc.get_traced_memory()[1] - before
        digest = run_alone(world, b, _digest, "/shared/big")
    finally:
        tracemalloc.stop()
    # Without spilling, 48 MiB of dirty pages until the close; with it, at
    # most SPILL_PAGES (16 MiB) of them, and the program's 1 MiB block.
    assert peak < 24 * MIB
    assert digest == hashlib.sha256(_data(MIB) * mib).hexdigest()


def _rewrite(path, rounds):
    for step in range(rounds):
        fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        posix.write(fd, _data(70_000, salt=step))
        posix.close(fd)


def test_a_file_rewritten_many_times_reuses_the_blocks_its_old_versions_left():
    world, a, _ = two_hosts(store=True)
    run_alone(world, a, _rewrite, "/shared/f", 400)
    store = world._server_state.store
    # 400 versions of 18 blocks each: 28 MiB without reuse; what is live is
    # one version (and the writer's cached pages of it, the same blocks).
    assert store.used <= 2 * MIB
    assert world.server.read_bytes("/shared/f") == _data(70_000, salt=399)


def _reuse_run():
    world, a, b = two_hosts(store=True)
    world.spawn(a, _rewrite, "/shared/f", 60)
    world.spawn(b, _churner, "/shared/x", 1, 5)
    world.run()
    return [dict(inode.blocks.numbered()) for inode in world._server_state.inodes.values()
            if inode.kind == "f"]


def test_which_blocks_are_reused_follows_from_the_run_alone(monkeypatch):
    monkeypatch.setattr(store_module, "_COLLECT_MIN", 4)
    first = _reuse_run()
    assert first == _reuse_run()
    assert max(max(numbers.values(), default=0) for numbers in first) < 60 * 18


def _overwrite_then_churn(path):
    _overwriter(path)
    for step in range(40):  # blocks freed and reused while the reader's page is stale
        _write("/shared/g", _data(3 * PAGE, salt=step))
        posix.sleep(0.01)


def test_a_stale_page_keeps_its_block_while_others_are_reused(monkeypatch):
    # The reader's stale page is a block no server map refers to after the
    # overwrite: collections must keep it (it is the reader's) while the
    # writer's churn reuses every other free block, as the stale read with
    # and without the store shows.
    monkeypatch.setattr(store_module, "_COLLECT_MIN", 1)
    runs = []
    for store in (True, None):
        world, a, b = two_hosts(store=store)
        world.server.write_bytes("/shared/f", b"a" * 8192)
        reader = world.spawn(b, _stale_reader, "/shared/f")
        world.spawn(a, _overwrite_then_churn, "/shared/f")
        world.run()
        runs.append((reader.result(), world.trace.digest()))
        if store:
            assert world._server_state.store.reused > 0
    (first, again, _), _ = runs[0]
    assert first == again == b"a" * 8192
    assert runs[0] == runs[1]


def _write_in_halves(path):
    fd = posix.open(path, os.O_WRONLY)  # not readable: no page is read first
    os.pwrite(fd, b"x" * 100, 0)
    os.pwrite(fd, b"y" * (PAGE - 100), 100)  # the page is dirty end to end, never read
    posix.fsync(fd)
    posix.close(fd)
    fd = posix.open(path, os.O_RDONLY)
    data = os.pread(fd, PAGE, 0)
    posix.close(fd)
    return data


def _halves_run(store):
    world = World(seed=0, store=store)
    world.server.write_bytes("/shared/f", b"-" * (3 * PAGE))
    result = run_alone(world, world.host("a"), _write_in_halves, "/shared/f")
    return result, [(event.op, event.rpcs) for event in world.trace]


def test_a_page_written_whole_in_parts_but_never_read_is_read_again_with_the_store_too():
    # nfs_write_end marks a page up to date only when one write starts at its
    # first byte and covers it; written in two parts, it never is, and the
    # read after the flush sends a READ.  The store kept it as a clean stored
    # page instead, which a read takes as up to date: no READ.
    result, events = _halves_run(True)
    assert result == b"x" * 100 + b"y" * (PAGE - 100)
    assert events == _halves_run(None)[1]
    assert any("READ" in rpcs for op, rpcs in events if op == "read")


def test_closing_the_world_closes_the_stores_file_and_a_later_read_says_so():
    world, a, _ = two_hosts(store=True)
    run_alone(world, a, _write, "/shared/f", b"kept" * 2000)
    assert world.server.read_bytes("/shared/f") == b"kept" * 2000  # after run(): readable
    store = world._server_state.store
    assert store._finalizer.alive  # the descriptor is open until...
    world.close()
    assert not store._finalizer.alive  # ...closed: its disk space is back now
    with pytest.raises(StoreError, match=r"closed \(World\.close\(\)\).*read World\.server "
                                         r"and run the world before World\.close\(\)"):
        world.server.read_bytes("/shared/f")
    world.close()  # twice is fine


def test_a_full_disk_met_while_dirty_pages_go_to_the_store_stops_the_run_in_that_write(
        monkeypatch, tiny_bounds):
    def write_unflushed(path, caught):
        fd = posix.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            posix.write(fd, b"d" * (5 * PAGE))  # past 3 dirty pages: they go to the store
        except Exception as error:
            caught.append(error)
        return "went on"

    world, a, _ = two_hosts(store=True)
    _failing_disk(monkeypatch, after=0)
    caught = []
    world.spawn(a, write_unflushed, "/shared/f", caught)
    with pytest.raises(StoreError, match=r"writing 12288 bytes of /shared/f failed: "
                                         r"\[Errno 28\] No space left on device"):
        world.run()
    assert [type(error) for error in caught] == [StoreError]  # never a simulated OSError
    assert world.server.stat("/shared/f").size == 0
